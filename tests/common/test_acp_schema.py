"""The typed ACP models (services/common/acp): generated, faithful to the schema."""

from __future__ import annotations

import pytest

from services.common.acp.capabilities import agent_capabilities
from services.common.acp.schema import (
    AgentCapabilities,
    InitializeResponse,
    ListSessionsResponse,
    PromptResponse,
    RequestPermissionOutcome,
    RequestPermissionOutcomeSelected,
    RequestPermissionResponse,
    SessionConfigOption,
    SessionConfigOptionBoolean,
    SessionConfigOptionSelect,
    SessionConfigSelectGroup,
    SetSessionConfigOptionRequest,
)
from services.common.acp.wire import AcpDecodeError
from tests.golden import (
    REPO,
    definition_of,
    fixture_names,
    frame,
    payload,
    validate,
    validate_message,
)
from tools import gen_acp_schema

FILLED = {"VERSION": "0.0.0", "ALIAS": "a"}


def test_generated_models_are_up_to_date() -> None:
    """`make acp-schema` was run after the last change to the schema or the generator."""
    assert gen_acp_schema.OUTPUT.read_text() == gen_acp_schema.render(), \
        "services/common/acp/schema.py is stale: run `make acp-schema`"


def test_vendored_schema_is_the_shared_spec() -> None:
    for shared in (REPO.parent / "shared", REPO.parent.parent / "shared"):
        official = shared / "spec" / "acp-schema-v1.json"
        if official.exists():
            assert gen_acp_schema.SCHEMA.read_bytes() == official.read_bytes()
            return
    pytest.skip("no shared/spec beside the repository")


@pytest.mark.parametrize("name", fixture_names())
def test_every_golden_frame_is_valid_acp(name: str) -> None:
    validate_message(frame(name, **FILLED))
    validate(definition_of(name), payload(name, **FILLED))


@pytest.mark.parametrize("name", [n for n in fixture_names() if ".result." in n])
def test_golden_results_round_trip_through_the_models(name: str) -> None:
    model = {"InitializeResponse": InitializeResponse, "PromptResponse": PromptResponse,
             "RequestPermissionResponse": RequestPermissionResponse}[definition_of(name)]
    body = payload(name, **FILLED)
    assert model.from_json(body).to_json() == body


@pytest.mark.parametrize("features", [
    {"load_session": True, "resume": True, "close": True, "list_sessions": True},
    {"load_session": False, "resume": True, "close": True},
    {"load_session": False},
    {"load_session": True, "delete": True, "additional_directories": True, "image": True},
    {"load_session": True, "fork": True},
])
def test_the_capabilities_builder_writes_valid_acp(features: dict[str, bool]) -> None:
    caps = agent_capabilities(**features).to_json()
    validate("AgentCapabilities", caps)
    assert caps["promptCapabilities"]["embeddedContext"] is True
    advertised = {k for k, v in caps["sessionCapabilities"].items() if v == {}}
    names = {"resume": "resume", "close": "close", "list_sessions": "list", "delete": "delete",
             "additional_directories": "additionalDirectories", "fork": "fork"}
    assert advertised == {names[k] for k, v in features.items() if v and k in names}


def test_a_missing_required_field_is_an_error_naming_it() -> None:
    with pytest.raises(AcpDecodeError, match=r"RequestPermissionOutcomeSelected: missing "
                                             r"required 'optionId'"):
        RequestPermissionResponse.from_json({"outcome": {"outcome": "selected"}})
    with pytest.raises(AcpDecodeError, match="unknown outcome 'maybe'"):
        RequestPermissionOutcome.from_json({"outcome": "maybe"})
    with pytest.raises(AcpDecodeError, match=r"PromptResponse.stopReason: expected a string"):
        PromptResponse.from_json({"stopReason": 3})


def test_default_on_error_fields_fall_back_to_their_default() -> None:
    """x-deserialize-default-on-error: a malformed optional field is its default, not an error."""
    caps = AgentCapabilities.from_json({"loadSession": "yes", "promptCapabilities": [],
                                        "sessionCapabilities": {"resume": 1, "close": {}}})
    assert caps.load_session is False and caps.prompt_capabilities.image is False
    assert caps.session_capabilities.resume is None
    assert caps.session_capabilities.close is not None


def test_an_adapters_fork_capability_is_read() -> None:
    """ACP's unstable ``sessionCapabilities.fork`` (claude-agent-acp advertises it): read, so
    the edge knows which adapters fork natively; anything but an object is no capability."""
    read = AgentCapabilities.from_json
    assert read({"sessionCapabilities": {"fork": {}}}).session_capabilities.fork is not None
    assert read({"sessionCapabilities": {"fork": True}}).session_capabilities.fork is None
    assert read({"sessionCapabilities": {}}).session_capabilities.fork is None


def test_skip_invalid_items_drops_only_the_bad_ones() -> None:
    listed = ListSessionsResponse.from_json({"sessions": [
        {"sessionId": "a", "cwd": "/w"}, {"cwd": "/no-id"}, {"sessionId": "b", "cwd": "/w"}]})
    assert [s.session_id for s in listed.sessions] == ["a", "b"]


def test_tagged_and_untagged_unions() -> None:
    grouped = SessionConfigOption.from_json({
        "type": "select", "id": "model", "name": "Model", "category": "model",
        "currentValue": "x", "options": [{"group": "g", "name": "G",
                                          "options": [{"value": "x", "name": "X"}]}]})
    assert isinstance(grouped, SessionConfigOptionSelect)
    assert isinstance(grouped.options[0], SessionConfigSelectGroup)
    toggle = SessionConfigOption.from_json({"type": "boolean", "id": "t", "name": "T",
                                            "currentValue": True})
    assert isinstance(toggle, SessionConfigOptionBoolean) and toggle.current_value is True
    assert toggle.to_json() == {"type": "boolean", "id": "t", "name": "T", "currentValue": True}
    assert SetSessionConfigOptionRequest.from_json(
        {"sessionId": "s", "configId": "t", "type": "boolean", "value": False}).value is False
    assert SetSessionConfigOptionRequest.from_json(
        {"sessionId": "s", "configId": "m", "value": "x"}).value == "x"
    selected = RequestPermissionOutcomeSelected(option_id="yes")
    assert selected.to_json() == {"outcome": "selected", "optionId": "yes"}


def test_every_listed_model_is_exported() -> None:
    """Every model the generator lists is exported (a new one cannot be forgotten)."""
    from services.common.acp import schema

    assert set(gen_acp_schema.MODELS) <= set(schema.__all__)
