"""ACP ``session/set_mode`` and ``session/set_config_option``: relayed to the session's adapter.

The adapter decides (it offered the modes and options in its session/new,
load or resume result); the edge passes the request on under the adapter's
session id, answers with the adapter's result, and stores the accepted value
on the row so a restore sets it again (:mod:`services.edge.session_state`). An
adapter's refusal reaches the client with the adapter's code, message and data.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from services.common.jsonrpc import JsonRpcError
from services.common.protocol import INTERNAL_ERROR, INVALID_PARAMS, MSG_MISSING_PARAM
from services.edge.adapter import AdapterClient
from services.edge.adapter_errors import exit_data
from services.edge.adapter_link import AdapterGone
from services.edge.dispatch import DialectConnection
from services.edge.params import first_str, session_id
from services.edge.session import EdgeSession


def _missing(name: str) -> JsonRpcError:
    return JsonRpcError(INVALID_PARAMS, MSG_MISSING_PARAM.format(name=name))


async def _relay(session: EdgeSession,
                 call: Callable[[AdapterClient], Awaitable[Any]]) -> dict[str, Any]:
    """One request on the session's adapter; its error or exit as the client's error."""
    adapter = session.adapter
    if adapter is None:
        raise JsonRpcError(INTERNAL_ERROR, "Agent is not running")
    session.touch()
    try:
        result = await call(adapter)
    except JsonRpcError as exc:  # the adapter's refusal, whole (its data too)
        raise JsonRpcError(exc.code, exc.message, exc.data) from None
    except AdapterGone as exc:  # its exit and stderr tail in data.acpgate, as a setup's
        raise JsonRpcError(INTERNAL_ERROR, f"Agent failed: {exc.exit_info.describe()}",
                           exit_data(exc.exit_info, adapter.secrets)) from None
    return result if isinstance(result, dict) else {}


async def session_set_mode(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """ACP session/set_mode on an active session."""
    session = conn.active_session(session_id(params))
    mode_id = first_str(params, "modeId")
    if not mode_id:
        raise _missing("modeId")
    result = await _relay(session, lambda adapter: adapter.set_mode(mode_id))
    session.state.mode_accepted(mode_id)
    await session.state.flush()
    return result


async def session_set_config_option(conn: DialectConnection,
                                    params: dict[str, Any]) -> dict[str, Any]:
    """ACP session/set_config_option (string value, or boolean with ``type: "boolean"``)."""
    session = conn.active_session(session_id(params))
    config_id = first_str(params, "configId")
    if not config_id:
        raise _missing("configId")
    value = params.get("value")
    if not isinstance(value, str | bool):
        raise _missing("value")
    result = await _relay(session, lambda adapter: adapter.set_config_option(config_id, value))
    session.state.config_accepted(result)
    await session.state.flush()
    return result
