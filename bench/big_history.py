"""Memory when a session with a big history is loaded.

Five 15 MB prompts made ``session/load`` fail ("agent process connection lost")
with the edge at 454 MB (1,083 MB after twelve). The scenario: ``acpgate serve``
with the built-in agent on the offline demo model (which echoes each prompt, so a
turn stores about twice the prompt), one WebSocket client sends N prompts of
``prompt_mb`` MiB into one session, closes it and loads it again, reading the
whole replay. Measured per N:

- the edge's peak RSS during the load (``VmHWM``, reset through
  ``/proc/<pid>/clear_refs`` right before it), against its RSS before the load;
- the peak RSS of the agent that served the prompts, and of the one the load started
  (seeded with the history);
- the session service's peak RSS during the load (it reads the history for it, twice);
- whether the load answered, and the replay was complete (every prompt replayed).

The store's quotas are off here (``0``): the scenario is about memory, and twelve
echoed 15 MB turns are more than the default ``max_session_bytes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass

import psutil

from bench.sizes import Sizes
from bench.stage import Serve, Stage, serve, stage
from bench.stats import Dist, Row
from bench.transports import ws_peer

MB = 1024 * 1024


def _config(st: Stage) -> None:
    """The stage's config with a built-in demo agent as the default, quotas off."""
    st.config_dir.mkdir(parents=True, exist_ok=True)
    st.workspace.mkdir(exist_ok=True)
    (st.config_dir / "config.toml").write_text(f"""
[acp]
default_agent = "assistant"
max_sessions = 8
session_timeout_secs = 3600

[gateway]
host = "127.0.0.1"
port = {st.port}
max_frame_bytes = {64 * MB}

[store]
max_session_bytes = 0
max_token_bytes = 0

[agents.assistant]
kind = "builtin"
provider = "demo"
model = "demo"
""", encoding="utf-8")


def _status_kb(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak(pid: int) -> None:
    """Start ``pid``'s VmHWM over from its current RSS (Linux ``clear_refs`` 5)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/clear_refs", "w") as fh:
        fh.write("5")


def _agents(sv: Serve) -> list[psutil.Process]:
    out = []
    with contextlib.suppress(psutil.NoSuchProcess):
        for proc in psutil.Process(sv.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "services.agent" in proc.cmdline():
                    out.append(proc)
    return out


@dataclass(frozen=True)
class _Measured:
    """One run's figures, in MB, and how the load went."""

    edge_before: float
    edge_peak: float
    prompts_agent_peak: float
    load_agent_peak: float
    session_before: float
    session_peak: float
    outcome: str


async def _agents_peak(sv: Serve) -> float:
    """The highest VmHWM among the agent processes alive now."""
    peaks = [await asyncio.to_thread(_status_kb, a.pid, "VmHWM:") for a in _agents(sv)]
    return max(peaks, default=float("nan"))


async def _scenario(st: Stage, sv: Serve, token: str, prompts: int,
                    prompt_mb: int) -> _Measured:
    """The prompts, the close, the load: what they took."""
    edge = sv.children()["edge"].pid
    session_service = sv.children()["session"].pid
    text = "x" * (prompt_mb * MB)
    endpoint = await ws_peer(st.ws_url, token)
    peer = endpoint.peer
    try:
        sid = (await peer.request("session/new", {"cwd": str(st.workspace)}))["sessionId"]
        for _ in range(prompts):
            await peer.prompt(sid, text, wait_secs=600)
        prompts_agent_peak = await _agents_peak(sv)
        await peer.request("session/close", {"sessionId": sid})
        await asyncio.sleep(0.5)
        before = await asyncio.to_thread(_status_kb, edge, "VmRSS:")
        await asyncio.to_thread(_reset_peak, edge)
        session_before = await asyncio.to_thread(_status_kb, session_service, "VmRSS:")
        await asyncio.to_thread(_reset_peak, session_service)
        sink = peer.sink(sid)
        sink.messages = set()  # a turn's reply may come in several chunks: one message
        outcome = "ok"
        try:
            await peer.request("session/load", {"sessionId": sid, "cwd": str(st.workspace)},
                               wait_secs=600)
        except Exception as exc:  # the figure is the point; the failure is its note
            outcome = f"load failed: {str(exc)[:160]}"
        peak = await asyncio.to_thread(_status_kb, edge, "VmHWM:")
        load_agent_peak = await _agents_peak(sv)
        session_peak = await asyncio.to_thread(_status_kb, session_service, "VmHWM:")
        if outcome == "ok":  # one assistant message replayed per stored turn
            outcome = f"ok, {len(sink.messages)} of {prompts} turns replayed"
        return _Measured(before, peak, prompts_agent_peak, load_agent_peak, session_before,
                         session_peak, outcome)
    finally:
        await endpoint.close()


async def run_big_history(sizes: Sizes) -> list[Row]:
    """Rows #23.7: one per history size."""
    rows: list[Row] = []
    for prompts in sizes.big_history_prompts:
        async with stage() as st:
            _config(st)
            async with serve(st) as sv:
                token = st.mint_token()
                got = await _scenario(st, sv, token, prompts, sizes.big_history_prompt_mb)
        label = f"{prompts} × {sizes.big_history_prompt_mb} MiB prompts"
        rows.append(Row("23.7", f"edge peak RSS, session/load of {label}", "MB",
                        Dist.of([got.edge_peak]), "edge RSS before the load",
                        Dist.of([got.edge_before]), note=json.dumps(got.outcome)[1:-1]))
        rows.append(Row("23.7", f"agent peak RSS over {label}", "MB",
                        Dist.of([got.prompts_agent_peak]), "—", None))
        rows.append(Row("23.7", f"agent peak RSS, seeded with {label}", "MB",
                        Dist.of([got.load_agent_peak]), "—", None))
        rows.append(Row("23.7", f"session service peak RSS, session/load of {label}", "MB",
                        Dist.of([got.session_peak]), "its RSS before the load",
                        Dist.of([got.session_before])))
    return rows
