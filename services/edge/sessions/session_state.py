"""The state of an adapter's session that the edge relays and keeps: modes, config, model,
title.

An adapter reports its session's modes, config options and models in the
``session/new``/``load``/``resume`` result, changes them when the client asks
(``session/set_mode``, ``session/set_config_option``, ``session/set_model``) and
announces changes of its own (``current_mode_update``, ``config_option_update``,
``session_info_update``). :class:`AdapterSessionState` keeps the adapter's
latest word as it said it (raw JSON, relayed unchanged), and writes what
matters for a restore to the session row: the current mode, the current config
values ``{configId: value}`` — with the current model under the key
``_acpgate/model`` (one more setting of the same kind, in the same
JSON, so no schema change) — and the title. One writer per session, always the
latest state, so quick changes cannot land out of order; :meth:`~AdapterSessionState.flush`
waits for it (a prompt or set request answers only once its changes are stored).

On restore, :func:`reapply` sets the stored mode, config values and model again on a
fresh adapter session wherever the adapter's own defaults differ.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import orjson

from services.common.logs import get_logger
from services.common.protocol import (
    CONFIG_MODEL_KEY,
    U_CONFIG_OPTION,
    U_CURRENT_MODE,
    U_SESSION_INFO,
)
from services.edge.backends.errors import ServiceError
from services.edge.backends.session import SessionBackend
from services.edge.backends.session_types import RowUpdate, SessionRow

log = get_logger("edge.session")

#: The update kinds that change stored state (checked per relayed update: keep it a set).
STATE_UPDATES = frozenset({U_CURRENT_MODE, U_CONFIG_OPTION, U_SESSION_INFO})

__all__ = ["STATE_UPDATES", "AdapterSessionState", "ConfigSetter", "reapply"]


class ConfigSetter(Protocol):
    """The adapter calls :func:`reapply` makes (``AdapterClient``)."""

    async def set_mode(self, mode_id: str) -> Any:
        """``session/set_mode``; the adapter's result."""

    async def set_config_option(self, config_id: str, value: str | bool) -> Any:
        """``session/set_config_option``; the adapter's result."""

    async def set_model(self, model_id: str) -> Any:
        """``session/set_model``; the adapter's result."""


def config_values(options: Any) -> dict[str, Any]:
    """``{configId: currentValue}`` of a ``configOptions`` array (malformed entries skipped)."""
    out: dict[str, Any] = {}
    if isinstance(options, list):
        for option in options:
            if isinstance(option, dict) and isinstance(option.get("id"), str) \
                    and isinstance(option.get("currentValue"), str | bool):
                out[option["id"]] = option["currentValue"]
    return out


class AdapterSessionState:
    """Modes, config options and title of one session, as its adapter last reported them."""

    def __init__(self, service: SessionBackend, session_id: str,
                 spawn: Callable[[Coroutine[Any, Any, None]], object], *,
                 fence: Callable[[], tuple[str, int]] = lambda: ("", 0)) -> None:
        self._service = service
        self._session_id = session_id
        self._spawn = spawn
        #: This host's instance id and claim generation, read at each write
        #: (``HostClaims.fence``): the row is written only while this host holds the claim.
        self._fence = fence
        #: The adapter's ``SessionModeState`` (``currentModeId``, ``availableModes``), raw.
        self.modes: dict[str, Any] | None = None
        #: The adapter's ``configOptions`` array, raw.
        self.config_options: list[Any] | None = None
        #: The adapter's ``SessionModelState`` (``currentModelId``, ``availableModels``), raw.
        self.models: dict[str, Any] | None = None
        self._title: str | None = None
        self._dirty = False
        self._writer: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ what the adapter said

    def on_setup(self, result: Any) -> None:
        """A ``session/new``/``load``/``resume`` result: its modes and config options."""
        if not isinstance(result, dict):
            return
        if isinstance(result.get("modes"), dict):
            self.modes = dict(result["modes"])
        if isinstance(result.get("configOptions"), list):
            self.config_options = list(result["configOptions"])
        if isinstance(result.get("models"), dict):
            self.models = dict(result["models"])

    def result_fields(self) -> dict[str, Any]:
        """``modes``, ``configOptions`` and ``models`` for the client's new/load/resume
        result (as they are now: after a restore set the stored ones again)."""
        out: dict[str, Any] = {}
        if self.modes is not None:
            out["modes"] = self.modes
        if self.config_options is not None:
            out["configOptions"] = self.config_options
        if self.models is not None:
            out["models"] = self.models
        return out

    @property
    def title(self) -> str | None:
        """The title the agent gave the session (``session_info_update``), if any."""
        return self._title

    @property
    def model_id(self) -> str:
        """The current model ("" when the adapter reported no models)."""
        current = self.models.get("currentModelId") if self.models else None
        return current if isinstance(current, str) else ""

    def model_accepted(self, model_id: str) -> None:
        """The adapter accepted ``session/set_model``."""
        self.models = {**(self.models or {}), "currentModelId": model_id}
        self._save()

    @property
    def mode_id(self) -> str:
        """The current mode ("" when the adapter has no modes)."""
        current = self.modes.get("currentModeId") if self.modes else None
        return current if isinstance(current, str) else ""

    def mode_accepted(self, mode_id: str) -> None:
        """The adapter accepted ``session/set_mode``."""
        self.modes = {**(self.modes or {}), "currentModeId": mode_id}
        self._save()

    def config_accepted(self, result: Any) -> None:
        """The adapter's ``session/set_config_option`` result (the whole new configOptions)."""
        options = result.get("configOptions") if isinstance(result, dict) else None
        if isinstance(options, list):
            self.config_options = list(options)
            self._save()

    def on_update(self, update: dict[str, Any]) -> None:
        """A relayed update whose kind is in :data:`STATE_UPDATES`."""
        kind = update.get("sessionUpdate")
        if kind == U_CURRENT_MODE and isinstance(update.get("currentModeId"), str):
            self.mode_accepted(update["currentModeId"])
        elif kind == U_CONFIG_OPTION:
            self.config_accepted(update)
        elif kind == U_SESSION_INFO and isinstance(update.get("title"), str) \
                and update["title"].strip():
            self._title = update["title"]
            self._save()

    # ------------------------------------------------------------------ the row

    def _save(self) -> None:
        self._dirty = True
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_future()
            self._spawn(self._write(self._writer))

    async def flush(self) -> None:
        """Wait until the latest state is written (at once when nothing is pending)."""
        if self._writer is not None:
            await asyncio.shield(self._writer)

    def _config_json(self) -> str:
        """The row's ``config_json``: the config values and the model ("" when neither)."""
        values = config_values(self.config_options)
        if self.model_id:
            values[CONFIG_MODEL_KEY] = self.model_id
        if self.config_options is None and not self.model_id:
            return ""
        return orjson.dumps(values).decode()

    async def _write(self, done: asyncio.Future[None]) -> None:
        """Write the latest state until nothing changed meanwhile (one writer)."""
        try:
            while self._dirty:
                self._dirty = False
                holder, generation = self._fence()
                update = RowUpdate(
                    self._session_id, holder_instance_id=holder, claim_generation=generation,
                    mode_id=self.mode_id, config_json=self._config_json(), title=self._title)
                try:
                    await self._service.update_session(update)
                except ServiceError as exc:
                    log.warning("state_store_failed", session_id=self._session_id,
                                code=exc.code)
        finally:
            if not done.done():
                done.set_result(None)


async def reapply(state: AdapterSessionState, adapter: ConfigSetter,
                  row: SessionRow) -> None:
    """Set the row's stored mode and config values again where the fresh adapter session
    differs. A value the adapter no longer offers, or refuses, is left at its default."""
    stored_mode = row.mode_id
    offered = state.modes.get("availableModes") if state.modes else None
    mode_ids = {m.get("id") for m in offered if isinstance(m, dict)} \
        if isinstance(offered, list) else set()
    if stored_mode and stored_mode != state.mode_id and stored_mode in mode_ids:
        try:
            await adapter.set_mode(stored_mode)
            state.mode_accepted(stored_mode)
        except Exception as exc:
            log.info("mode_not_reapplied", session_id=row.session_id, error=str(exc))
    try:
        wanted = orjson.loads(row.config_json) if row.config_json else {}
    except orjson.JSONDecodeError:
        wanted = {}
    if isinstance(wanted, dict):
        await _reapply_model(state, adapter, wanted.pop(CONFIG_MODEL_KEY, None), row.session_id)
    current = config_values(state.config_options)
    for config_id, value in (wanted.items() if isinstance(wanted, dict) else ()):
        if config_id not in current or current[config_id] == value \
                or not isinstance(value, str | bool):
            continue
        try:
            state.config_accepted(await adapter.set_config_option(config_id, value))
        except Exception as exc:
            log.info("config_not_reapplied", session_id=row.session_id, config_id=config_id,
                     error=str(exc))


async def _reapply_model(state: AdapterSessionState, adapter: ConfigSetter, model: Any,
                         session_id: str) -> None:
    """Set the stored model again where the fresh adapter session offers it and differs."""
    offered = state.models.get("availableModels") if state.models else None
    model_ids = {m.get("modelId") for m in offered if isinstance(m, dict)} \
        if isinstance(offered, list) else set()
    if not isinstance(model, str) or not model or model == state.model_id \
            or model not in model_ids:
        return
    try:
        await adapter.set_model(model)
        state.model_accepted(model)
    except Exception as exc:
        log.info("model_not_reapplied", session_id=session_id, error=str(exc))
