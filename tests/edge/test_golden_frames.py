"""The edge against the golden wire fixtures the agent tests use too.

The frames the edge builds toward adapters (``initialize``, permission answers)
are the exact fixtures the built-in agent's tests feed in; the agent's prompt
result fixture is what the edge reads usage from; and ``acpgate acp`` answers a
client's ``initialize`` with the exact SPEC §2 frame.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from acpgate import __version__
from services.common.acp.schema import Implementation
from services.common.policy import SecurityPolicy
from services.common.protocol import (
    CANCEL_REASON_CLIENT_ERROR,
    CANCEL_REASON_CLIENT_GONE,
    CANCEL_REASON_TIMEOUT,
)
from services.edge.adapter.caps import read_initialize_result
from services.edge.adapter.requests import initialize_request, read_prompt_result
from services.edge.dialect.handlers.initialize import read_client_capabilities
from services.edge.ports.permission import cancelled_answer, relayed_answer
from services.edge.sessions.hub import EDGE_NAME, EDGE_TITLE
from tests.e2e.harness import AcpProcess, write_config
from tests.golden import frame, payload

EDGE = Implementation(name=EDGE_NAME, title=EDGE_TITLE, version=__version__)


@pytest.mark.slow
def test_acp_answers_a_clients_initialize_with_the_golden_frame(tmp_path: Path) -> None:
    acp = AcpProcess(write_config(tmp_path / "cfg"))
    try:
        request = frame("initialize.request.client")
        _, response = acp.call_with_id("initialize", request["params"], request["id"])
        assert response == frame("initialize.result.edge", VERSION=__version__)
    finally:
        assert acp.close() == 0
        acp.kill()


def test_initialize_toward_adapters_is_the_golden_frame() -> None:
    """What a supervised session's adapter is promised for the golden client: fs (the
    edge serves it when the client does not), its terminals, its elicitation."""
    caps = read_client_capabilities(payload("initialize.request.client"))
    assert SecurityPolicy("/w").autonomy == "supervised"
    assert initialize_request(caps, EDGE, SecurityPolicy("/w")).to_json() == \
        payload("initialize.request.edge", VERSION=__version__)


def test_client_capabilities_that_are_not_an_object_read_as_none_advertised() -> None:
    assert read_client_capabilities({"clientCapabilities": "all"}).to_json() == \
        {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}


def test_the_built_in_agents_capabilities_as_the_edge_reads_them() -> None:
    caps = read_initialize_result(
        payload("initialize.result.agent", VERSION="1", ALIAS="a")).agent_capabilities
    assert caps.load_session is False
    assert caps.session_capabilities.resume is not None
    assert caps.prompt_capabilities.embedded_context is True
    assert read_initialize_result({"agentCapabilities": 7}).agent_capabilities.load_session is False


def test_permission_answers_toward_adapters_are_the_golden_frames() -> None:
    """SPEC §6: the outcome alone is relayed; the edge's own cancels say why."""
    assert relayed_answer(payload("request_permission.result.client")) == \
        payload("request_permission.result.relayed")
    for reason in (CANCEL_REASON_CLIENT_ERROR, CANCEL_REASON_CLIENT_GONE):
        assert cancelled_answer(reason) == payload(f"request_permission.result.{reason}")
    # A timeout names the seconds the edge waited (its session_timeout_secs).
    assert cancelled_answer(CANCEL_REASON_TIMEOUT, timeout_secs=45) == \
        payload("request_permission.result.timeout")
    assert relayed_answer({"outcome": {"outcome": "selected"}}) == \
        {"outcome": {"outcome": "cancelled"}}  # no option chosen: nothing was allowed


def test_the_built_in_agents_prompt_result_as_the_edge_reads_it() -> None:
    result = read_prompt_result(payload("prompt.result.agent"))
    assert result.stop_reason == "end_turn"
    assert result.usage is not None
    assert (result.usage.input_tokens, result.usage.output_tokens) == (3, 2)
    # an adapter that answers without a stop reason ended its turn; bad usage is ignored
    odd = read_prompt_result({"usage": "lots"})
    assert odd.stop_reason == "end_turn" and odd.usage is None
