"""ACP ``session/set_mode``, ``session/set_config_option`` and ``session/set_model``: relayed
to the session's adapter, and the accepted value stored.

The adapter decides (it offered the modes, options and models in its
session/new, load or resume result); the edge passes the client's request on
whole under the adapter's session id (:func:`services.edge.dialect.handlers.relay.forward`),
answers with the adapter's result, and stores the accepted value on the row so
a restore sets it again (:mod:`services.edge.sessions.session_state`) and logs the change in
the session's event log. An adapter's refusal reaches the client with the adapter's code,
message and data (and nothing is logged).
"""

from __future__ import annotations

from typing import Any

from services.common.jsonrpc import JsonRpcError
from services.common.protocol import (
    INVALID_PARAMS,
    M_SESSION_SET_CONFIG_OPTION,
    M_SESSION_SET_MODE,
    M_SESSION_SET_MODEL,
    MSG_MISSING_PARAM,
)
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.handlers.relay import forward
from services.edge.params import first_str, session_id


def _missing(name: str) -> JsonRpcError:
    return JsonRpcError(INVALID_PARAMS, MSG_MISSING_PARAM.format(name=name))


def _sent(params: dict[str, Any], sid: str) -> dict[str, Any]:
    """The client's params as the agent gets them: ACP's ``sessionId`` (whichever of the
    dialect's keys named it)."""
    return {**{k: v for k, v in params.items() if k != "session_id"}, "sessionId": sid}


async def session_set_mode(conn: DialectConnection, params: dict[str, Any]) -> Any:
    """ACP session/set_mode on an active session."""
    session = conn.active_session(session_id(params))
    mode_id = first_str(params, "modeId")
    if not mode_id:
        raise _missing("modeId")
    result = await forward(session, M_SESSION_SET_MODE, _sent(params, session.session_id))
    session.state.mode_accepted(mode_id)
    session.log.config(M_SESSION_SET_MODE, modeId=mode_id)
    await session.state.flush()
    return result


async def session_set_config_option(conn: DialectConnection, params: dict[str, Any]) -> Any:
    """ACP session/set_config_option (string value, or boolean with ``type: "boolean"``)."""
    session = conn.active_session(session_id(params))
    config_id = first_str(params, "configId")
    if not config_id:
        raise _missing("configId")
    value = params.get("value")
    if not isinstance(value, str | bool):
        raise _missing("value")
    sent = _sent(params, session.session_id)
    if isinstance(value, bool):
        sent.setdefault("type", "boolean")
    result = await forward(session, M_SESSION_SET_CONFIG_OPTION, sent)
    session.state.config_accepted(result)
    session.log.config(M_SESSION_SET_CONFIG_OPTION, configId=config_id, value=value)
    await session.state.flush()
    return result


async def session_set_model(conn: DialectConnection, params: dict[str, Any]) -> Any:
    """ACP (unstable) session/set_model: relayed whole; the chosen model is stored."""
    session = conn.active_session(session_id(params))
    model_id = first_str(params, "modelId")
    if not model_id:
        raise _missing("modelId")
    result = await forward(session, M_SESSION_SET_MODEL, _sent(params, session.session_id))
    session.state.model_accepted(model_id)
    session.log.config(M_SESSION_SET_MODEL, modelId=model_id)
    await session.state.flush()
    return result
