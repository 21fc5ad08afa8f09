"""An adapter's ``fs/*`` and ``terminal/*`` requests: decided, then relayed or served.

ACP lets an agent ask its client to read and write text files and to run
commands in terminals. Behind the edge, each such request is first put to the
session service (``CheckOperation``: the session's roots, forbidden paths and
autonomy — the decision lives there, ARCHITECTURE rule 3). A refused request
is answered -32003 ``Refused by acpgate policy: <reason>``. An admitted one is

- relayed to the client with a ``zc-out-N`` id when the client advertised the
  method (``fs`` with the checked real path, so the client touches exactly the
  file that was admitted), its answer or error going back to the adapter whole;
- otherwise, for ``fs/*``, served by the edge itself on the checked real path
  (UTF-8 text, ``line``/``limit`` honoured, at most 10 MiB);
- ``terminal/*`` is never served by acpgate (only the lifecycle service starts
  processes, and it starts adapters): without a client terminal the edge does
  not advertise ``terminal`` at all, and a request anyway is -32601.

The terminals a client created for this session are remembered, so the
follow-up methods (output, wait, kill, release) reach only those.
"""

from __future__ import annotations

import asyncio
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.common.acp.schema import ClientCapabilities
from services.common.jsonrpc import JsonRpcError
from services.common.logs import get_logger
from services.common.protocol import (
    ACP_RESOURCE_NOT_FOUND,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    M_FS_READ,
    M_FS_WRITE,
    M_TERMINAL_CREATE,
    M_TERMINAL_FOLLOWUPS,
    M_TERMINAL_RELEASE,
    MAX_BLOB_BYTES,
    MSG_CLIENT_NO_ANSWER,
    MSG_POLICY_REFUSED,
    MSG_RESOURCE_NOT_FOUND,
    MSG_UNKNOWN_TERMINAL,
    POLICY_REFUSED,
)
from services.edge.adapter.exits import method_not_found
from services.edge.backends.errors import ServiceError
from services.edge.backends.session_types import (
    OPERATION_EXECUTE,
    OPERATION_READ,
    OPERATION_WRITE,
)
from services.edge.ports.backchannel import Asking, BackChannelError, ClientErrorAnswer

if TYPE_CHECKING:
    from services.edge.backends.session import SessionBackend

log = get_logger("edge.client_methods")

#: The methods this module answers.
CLIENT_METHODS = frozenset({M_FS_READ, M_FS_WRITE, M_TERMINAL_CREATE, *M_TERMINAL_FOLLOWUPS})

_OPERATION = {
    M_FS_READ: OPERATION_READ,
    M_FS_WRITE: OPERATION_WRITE,
    M_TERMINAL_CREATE: OPERATION_EXECUTE,
}


def _str_param(params: Mapping[str, Any], key: str, *, required: bool = True) -> str:
    value = params.get(key)
    if isinstance(value, str) and (value or not required):
        return value
    if value is None and not required:
        return ""
    raise JsonRpcError(INVALID_PARAMS, f"Missing required parameter: {key}")


def _positive(params: Mapping[str, Any], key: str) -> int | None:
    value = params.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise JsonRpcError(INVALID_PARAMS, f"Parameter '{key}' must be a positive integer")
    return value


def read_text(path: str, line: int | None, limit: int | None) -> str:
    """The text of ``path`` from 1-based ``line``, at most ``limit`` lines (blocking).

    Only a regular file is read, and never more than the limit: the agent may have put a
    FIFO there (an open or read would block this thread for good) or may grow the file
    between the size check and the read. The descriptor is opened non-blocking and
    without following a final link, then checked with ``fstat``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise JsonRpcError(ACP_RESOURCE_NOT_FOUND, MSG_RESOURCE_NOT_FOUND.format(path=path)) from None
    except IsADirectoryError:
        raise JsonRpcError(INVALID_PARAMS, f"Not a file: {path}") from None
    except OSError as exc:
        raise JsonRpcError(INTERNAL_ERROR, f"Cannot read {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise JsonRpcError(INVALID_PARAMS, f"Not a file: {path}")
        if st.st_size > MAX_BLOB_BYTES:
            raise JsonRpcError(INVALID_PARAMS,
                               f"File exceeds 10 MB limit ({st.st_size} bytes): {path}")
        data = _read_at_most(fd, MAX_BLOB_BYTES + 1)
    except OSError as exc:
        raise JsonRpcError(INTERNAL_ERROR, f"Cannot read {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_BLOB_BYTES:
        raise JsonRpcError(INVALID_PARAMS, f"File exceeds 10 MB limit (grew while read): {path}")
    # Universal newlines, as a text-mode read gives.
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
    if line is None and limit is None:
        return text
    lines = text.splitlines(keepends=True)
    start = (line or 1) - 1
    end = start + limit if limit is not None else len(lines)
    return "".join(lines[start:end])


def _read_at_most(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes of ``fd`` from where it stands (blocking)."""
    parts: list[bytes] = []
    left = limit
    while left > 0:
        part = os.read(fd, min(left, 1 << 20))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def write_text(path: str, content: str) -> None:
    """Write ``content`` to ``path`` (temp file + rename; parents created) (blocking)."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".acpgate-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(content)
            os.replace(tmp, target)
        except BaseException:
            _unlink_quietly(tmp)
            raise
    except OSError as exc:
        raise JsonRpcError(INTERNAL_ERROR, f"Cannot write {path}: {exc.strerror}") from None


def _unlink_quietly(path: str) -> None:
    """Remove a temp file, ignoring that it is already gone."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class ClientMethods:
    """The fs/terminal requests of one session's adapter."""

    def __init__(self, session_service: SessionBackend, session_id: str,
                 backchannel: Asking, client_caps: ClientCapabilities,
                 wait_secs: float) -> None:
        self._service = session_service
        self._session_id = session_id
        self._backchannel = backchannel
        self._client_caps = client_caps
        self._wait_secs = wait_secs
        self._terminals: set[str] = set()

    async def handle(self, method: str, params: dict[str, Any]) -> Any:
        """Answer one request (``params.sessionId`` already the edge's id)."""
        if method == M_FS_READ:
            return await self._fs_read(params)
        if method == M_FS_WRITE:
            return await self._fs_write(params)
        if method == M_TERMINAL_CREATE:
            return await self._terminal_create(params)
        if method in M_TERMINAL_FOLLOWUPS:
            return await self._terminal_followup(method, params)
        raise method_not_found(method)

    async def _admit(self, method: str, path: str) -> str:
        """The real path the session service admitted for ``method``; -32003 when refused."""
        try:
            answer = await self._service.check_operation(self._session_id, _OPERATION[method],
                                                         path)
        except ServiceError as exc:
            log.warning("check_operation_failed", session_id=self._session_id, code=exc.code)
            raise JsonRpcError(INTERNAL_ERROR,
                               f"Policy check failed: {exc.detail or exc.code}") from None
        if not answer.allowed:
            log.info("client_method_refused", session_id=self._session_id, method=method,
                     reason=answer.reason)
            raise JsonRpcError(POLICY_REFUSED, MSG_POLICY_REFUSED.format(reason=answer.reason))
        return answer.resolved_path

    async def _relay(self, method: str, params: dict[str, Any]) -> Any:
        """Re-issue to the client (:func:`ask_client`)."""
        return await ask_client(self._backchannel, method, params, self._wait_secs)

    async def _fs_read(self, params: dict[str, Any]) -> Any:
        path = _str_param(params, "path")
        line, limit = _positive(params, "line"), _positive(params, "limit")
        real = await self._admit(M_FS_READ, path)
        if self._client_caps.fs.read_text_file:
            return await self._relay(M_FS_READ, {**params, "path": real})
        return {"content": await asyncio.to_thread(read_text, real, line, limit)}

    async def _fs_write(self, params: dict[str, Any]) -> Any:
        path = _str_param(params, "path")
        content = params.get("content")
        if not isinstance(content, str):
            raise JsonRpcError(INVALID_PARAMS, "Missing required parameter: content")
        real = await self._admit(M_FS_WRITE, path)
        if self._client_caps.fs.write_text_file:
            return await self._relay(M_FS_WRITE, {**params, "path": real})
        await asyncio.to_thread(write_text, real, content)
        return {}

    async def _terminal_create(self, params: dict[str, Any]) -> Any:
        if not self._client_caps.terminal:
            raise method_not_found(M_TERMINAL_CREATE)
        _str_param(params, "command")
        cwd = _str_param(params, "cwd", required=False)
        real_cwd = await self._admit(M_TERMINAL_CREATE, cwd)
        result = await self._relay(M_TERMINAL_CREATE, {**params, "cwd": real_cwd})
        terminal_id = result.get("terminalId") if isinstance(result, dict) else None
        if isinstance(terminal_id, str):
            self._terminals.add(terminal_id)
        return result

    async def _terminal_followup(self, method: str, params: dict[str, Any]) -> Any:
        terminal_id = _str_param(params, "terminalId")
        if terminal_id not in self._terminals:
            raise JsonRpcError(INVALID_PARAMS,
                               MSG_UNKNOWN_TERMINAL.format(terminal_id=terminal_id))
        result = await self._relay(method, params)
        if method == M_TERMINAL_RELEASE:
            self._terminals.discard(terminal_id)
        return result


async def ask_client(backchannel: Asking, method: str, params: dict[str, Any],
                     wait_secs: float) -> Any:
    """Re-issue an agent's request to the client; the client's error goes back whole, no
    answer (a timeout, a client gone) is -32603."""
    try:
        return await backchannel.request(method, params, wait_secs)
    except ClientErrorAnswer as exc:
        raise JsonRpcError(exc.code, str(exc), exc.data) from None
    except BackChannelError as exc:
        raise JsonRpcError(INTERNAL_ERROR,
                           MSG_CLIENT_NO_ANSWER.format(method=method, why=exc)) from None
