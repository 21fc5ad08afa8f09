"""``acpgate bridge``: stdio ↔ the gateway's WebSocket ``/acp`` (SPEC §11).

An IDE that can only launch a stdio agent runs ``acpgate bridge`` and talks to
a (possibly remote) gateway as if it were ``acpgate acp``: each stdin line
becomes one text frame, each frame one stdout line. On stdin EOF the bridge
waits for the answers to the requests it already forwarded, then closes the
connection; when the gateway closes, the bridge exits. A line longer than the
gateway's ``max_frame_bytes`` (which would close the connection) is skipped as it
is read — never held whole — and answered on stdout as ``acpgate acp`` would: a
parse error with id null, "line too long (<n> bytes, limit <m>)".

Address, path prefix and TLS come from ``<config dir>/config.toml``; the token
from ``$ACPGATE_ACP_BRIDGE_TOKEN``, else ``<config dir>/acp-bridge-token``.
Exit codes: 0 normal, 1 connection failure or refusal, 2 missing/invalid
config or no token.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI
from websockets.typing import Subprotocol

from services.common.config import CONFIG_FILE_NAME, Config, ConfigError, load_config
from services.common.jsonrpc import (
    READ_CHUNK_BYTES,
    OversizeLine,
    classify,
    error_line,
)
from services.common.line_split import LineSplitter
from services.common.logs import get_logger
from services.common.protocol import INTERNAL_ERROR, WS_SUBPROTOCOL

ENV_BRIDGE_TOKEN = "ACPGATE_ACP_BRIDGE_TOKEN"
TOKEN_FILE_NAME = "acp-bridge-token"
EXIT_OK = 0
EXIT_CONNECTION = 1
EXIT_CONFIG = 2
#: Lines read ahead of the WebSocket at most (stdin is not read faster than we send).
STDIN_QUEUE_LINES = 64
#: After stdin EOF, how long answers to requests already sent are awaited (as `acpgate acp`).
EOF_GRACE_SECS = 20.0

log = get_logger("edge.bridge")


@dataclass(frozen=True)
class BridgeTarget:
    """Where and how the bridge connects (the token is not part of repr)."""

    url: str
    ssl_context: ssl.SSLContext | None
    max_frame_bytes: int


def gateway_url(cfg: Config) -> BridgeTarget:
    """``ws[s]://<host>:<port><prefix>/acp`` from ``[gateway]`` (a wildcard host means loopback)."""
    host = cfg.gateway.host
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    tls = cfg.gateway.tls
    use_tls = tls.enabled or bool(tls.ca_file)
    context: ssl.SSLContext | None = None
    if use_tls:
        context = ssl.create_default_context(cafile=tls.ca_file or None)
    scheme = "wss" if use_tls else "ws"
    return BridgeTarget(
        url=f"{scheme}://{host}:{cfg.gateway.port}{cfg.gateway.path_prefix}/acp",
        ssl_context=context,
        max_frame_bytes=cfg.gateway.max_frame_bytes,
    )


def bridge_token(config_dir: Path, environ: dict[str, str] | None = None) -> str:
    """The token from the environment, else the cached token file, else ""."""
    env = os.environ if environ is None else environ
    token = env.get(ENV_BRIDGE_TOKEN, "").strip()
    if token:
        return token
    try:
        return (config_dir / TOKEN_FILE_NAME).read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{config_dir / TOKEN_FILE_NAME}: cannot read token file: {exc}") from None


def _fail(message: str, code: int) -> int:
    print(f"acpgate bridge: {message}", file=sys.stderr)
    return code


class _PendingRequests:
    """Ids of client requests forwarded and not yet answered (for a clean EOF)."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self.empty = asyncio.Event()
        self.empty.set()
        #: Set once stdin hit EOF: nobody is left to answer the gateway's requests.
        self.eof = False

    def sent(self, line: str) -> None:
        """Note a line going to the gateway."""
        msg = _parse(line)
        if msg is not None and "method" in msg and msg.get("id") is not None:
            self._ids.add(str(msg["id"]))
            self.empty.clear()

    def received(self, frame: str) -> dict[str, Any] | None:
        """Note a frame from the gateway; returns it when it is a request to the client."""
        msg = _parse(frame)
        if msg is None or msg.get("id") is None:
            return None
        if "method" in msg:
            return msg
        if self._ids:
            self._ids.discard(str(msg["id"]))
            if not self._ids:
                self.empty.set()
        return None


def _parse(text: str) -> dict[str, Any] | None:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _start_stdin_reader(
    loop: asyncio.AbstractEventLoop, stream: IO[bytes], queue: asyncio.Queue[str | None],
    max_line: int,
) -> None:
    """Read stdin lines in a daemon thread (works for pipes, ttys and files alike).

    The thread blocks until the queue has room, so a slow gateway bounds how
    far stdin is read ahead; ``None`` marks EOF. A line over ``max_line`` bytes is
    skipped as it is read and queued as an :class:`OversizeLine`.
    """

    def put(item: str | None) -> bool:
        try:
            asyncio.run_coroutine_threadsafe(queue.put(item), loop).result()
            return True
        except RuntimeError:  # the loop is gone: the bridge is exiting
            return False

    read = getattr(stream, "read1", stream.read)  # what is there, not a full chunk

    def run() -> None:
        cutter = LineSplitter(max_line, blocks=False)
        try:
            while chunk := read(READ_CHUNK_BYTES):
                for line in cutter.feed(chunk):
                    if line.strip() and not put(_clean(line)):
                        return
            last = cutter.end()
            if last is not None and last.strip() and not put(_clean(last)):
                return
        except (OSError, ValueError):
            pass
        put(None)

    threading.Thread(target=run, name="bridge-stdin", daemon=True).start()


def _clean(line: str) -> str:
    """A stdin line as a text frame: a CR ending dropped, undecodable bytes replaced."""
    if isinstance(line, OversizeLine):
        return line
    return line.rstrip("\r").encode("utf-8", "surrogateescape").decode("utf-8", "replace")


async def _pump_stdin(
    ws: ClientConnection, queue: asyncio.Queue[str | None], pending: _PendingRequests,
    eof_grace: float, write: Callable[[bytes], None],
) -> None:
    """stdin lines → text frames; on EOF wait (bounded) for outstanding answers, then close.

    Like ``acpgate acp`` at EOF: requests already sent may still be answered
    within the grace; the gateway's own requests are refused from then on. A line
    too long for a frame is answered here (stdout) and never sent.
    """
    while True:
        line = await queue.get()
        if line is None:
            break
        if isinstance(line, OversizeLine):
            frame = classify(line)
            log.warning("bridge_line_too_long", bytes=line.size, limit=line.limit)
            await asyncio.to_thread(write, error_line(None, frame.error_code,
                                                      frame.error_message).encode() + b"\n")
            continue
        pending.sent(line)
        await ws.send(line)
    pending.eof = True
    try:
        await asyncio.wait_for(pending.empty.wait(), eof_grace)
    except TimeoutError:
        log.warning("bridge_eof_unanswered", grace_secs=eof_grace)
    await ws.close()


async def _pump_frames(
    ws: ClientConnection, write: Callable[[bytes], None], pending: _PendingRequests
) -> None:
    """Frames → stdout lines (written off the event loop: stdout may be a slow pipe)."""
    async for frame in ws:
        text = frame if isinstance(frame, str) else frame.decode("utf-8", errors="replace")
        request = pending.received(text)
        if request is not None and pending.eof:
            # stdin is closed: the client cannot answer, so the tool is denied at once.
            await ws.send(error_line(request["id"], INTERNAL_ERROR, "client closed its input"))
            continue
        await asyncio.to_thread(write, text.replace("\n", " ").encode("utf-8") + b"\n")


def _stdout_writer(stream: IO[bytes]) -> Callable[[bytes], None]:
    """Whole lines to ``stream`` from any thread, one at a time."""
    lock = threading.Lock()

    def write(data: bytes) -> None:
        with lock:
            stream.write(data)
            stream.flush()

    return write


async def run_bridge(
    config_dir: Path,
    *,
    stdin: IO[bytes] | None = None,
    stdout: IO[bytes] | None = None,
    environ: dict[str, str] | None = None,
    eof_grace: float = EOF_GRACE_SECS,
) -> int:
    """Bridge stdio to the gateway configured in ``config_dir``; returns the exit code."""
    config_file = config_dir / CONFIG_FILE_NAME
    if not config_file.is_file():
        return _fail(
            f"no config at {config_file}; point --config-dir at the gateway's config directory "
            "(it needs [gateway] host/port)",
            EXIT_CONFIG,
        )
    env = dict(os.environ) if environ is None else environ
    def prepare() -> tuple[Config, str, BridgeTarget]:
        cfg = load_config(config_dir, environ=env)
        return cfg, bridge_token(config_dir, env), gateway_url(cfg)

    try:
        # File reads and CA loading happen off the event loop.
        cfg, token, target = await asyncio.to_thread(prepare)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_CONFIG)
    except (OSError, ssl.SSLError) as exc:
        return _fail(f"cannot set up TLS: {exc}", EXIT_CONFIG)
    if not token and cfg.gateway.require_auth:
        return _fail(
            f"no token: set {ENV_BRIDGE_TOKEN} or write one to {config_dir / TOKEN_FILE_NAME} "
            "(mint one with `acpgate token create`)",
            EXIT_CONFIG,
        )
    headers = {"Authorization": f"Bearer {token}"} if token else None
    in_stream = stdin if stdin is not None else sys.stdin.buffer
    out_stream = stdout if stdout is not None else sys.stdout.buffer
    try:
        ws = await connect(
            target.url,
            additional_headers=headers,
            subprotocols=[Subprotocol(WS_SUBPROTOCOL)],
            ssl=target.ssl_context,
            max_size=target.max_frame_bytes,
            proxy=None,
            open_timeout=30,
        )
    except InvalidStatus as exc:
        status = exc.response.status_code
        if status == 401:
            return _fail(f"the gateway at {target.url} refused the token (HTTP 401)", EXIT_CONNECTION)
        return _fail(f"the gateway at {target.url} answered HTTP {status}", EXIT_CONNECTION)
    except InvalidURI as exc:
        return _fail(f"bad gateway address: {exc}", EXIT_CONFIG)
    except Exception as exc:  # network, TLS and handshake protocol errors alike
        return _fail(f"cannot connect to {target.url}: {exc}", EXIT_CONNECTION)

    log.info("bridge_connected", url=target.url)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=STDIN_QUEUE_LINES)
    pending = _PendingRequests()
    _start_stdin_reader(loop, in_stream, queue, target.max_frame_bytes)
    write = _stdout_writer(out_stream)
    to_ws = asyncio.create_task(_pump_stdin(ws, queue, pending, eof_grace, write))
    code = EXIT_OK
    try:
        await _pump_frames(ws, write, pending)
    except ConnectionClosed:
        pass
    except BrokenPipeError:
        pass  # the IDE went away
    finally:
        # Whether we closed on stdin EOF (normal) or the gateway went away first.
        we_closed = to_ws.done() and not to_ws.cancelled() and to_ws.exception() is None
        to_ws.cancel()
        try:
            await to_ws
        except (asyncio.CancelledError, ConnectionClosed):
            pass
        await ws.close()
    closed = ws.protocol.close_rcvd
    if closed is not None and closed.code not in (1000, 1001):
        code = _fail(f"the gateway closed the connection: {closed.code} {closed.reason}".rstrip(),
                     EXIT_CONNECTION)
    elif closed is None and not we_closed:
        code = _fail("the connection to the gateway was lost", EXIT_CONNECTION)
    log.info("bridge_closed", code=code)
    return code
