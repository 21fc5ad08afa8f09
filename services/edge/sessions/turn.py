"""A turn's usage as the store records it, and the turn accumulator the edge runs.

:class:`~services.common.turn_items.TurnAccumulator` builds a turn's history items (the
session service builds them with it from the log for a turn that spilled);
:func:`turn_usage` is the prompt result's usage as stored with the turn.
"""

from __future__ import annotations

from typing import Any, Final

from services.common.acp.schema import PromptResponse
from services.common.turn_items import TEXT_BLOCK_CHUNKS, TurnAccumulator
from services.edge.backends.session_types import TurnUsage

__all__ = ["TEXT_BLOCK_CHUNKS", "TURN_KEEP_CHARS", "TurnAccumulator", "turn_usage"]

#: The most text of a running turn the edge keeps (characters); past it the turn spills
#: and the session service builds its items from the event log.
TURN_KEEP_CHARS: Final = 1 << 20


def _quota_usage(raw: Any) -> TurnUsage | None:
    """The tokens of a prompt result's ``_meta.quota.token_count`` (gemini-cli reports its
    usage there, not in ``usage``), or None."""
    meta = raw.get("_meta") if isinstance(raw, dict) else None
    quota = meta.get("quota") if isinstance(meta, dict) else None
    counts = quota.get("token_count") if isinstance(quota, dict) else None
    if not isinstance(counts, dict):
        return None
    # gemini-cli writes snake_case keys, claude-agent-acp camelCase.
    tokens = [counts.get(snake, counts.get(camel)) for snake, camel in
              (("input_tokens", "inputTokens"), ("output_tokens", "outputTokens"))]
    if not all(type(n) is int for n in tokens):
        return None
    return TurnUsage(input_tokens=max(0, tokens[0] or 0),
                                 output_tokens=max(0, tokens[1] or 0))


def turn_usage(result: PromptResponse, raw: Any = None) -> TurnUsage | None:
    """The prompt result's ``usage`` as the store records it (negative counts as 0); without
    one, the tokens of its ``_meta.quota`` (``raw``: the result as the adapter sent it)."""
    usage = result.usage
    if usage is None:
        return _quota_usage(raw)
    return TurnUsage(
        input_tokens=max(0, usage.input_tokens), output_tokens=max(0, usage.output_tokens),
        thought_tokens=max(0, usage.thought_tokens or 0),
        cached_read_tokens=max(0, usage.cached_read_tokens or 0),
        cached_write_tokens=max(0, usage.cached_write_tokens or 0))
