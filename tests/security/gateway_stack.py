"""A real ``acpgate serve`` for the attack tests: its own config dir and HOME, real tokens.

:func:`running_gateway` starts the local attacker model server
(``tests.security.fake_model``), writes a config (a built-in agent on that
server, a demo agent), starts ``acpgate serve`` — session
service, lifecycle service and WebSocket edge as three processes — with
``HOME`` pointing at a fresh directory (so ``~/.ssh`` is the test's), waits
until ``/healthz`` answers, and stops the tree again with SIGTERM, checking
that nothing it started is left. Tokens are minted and revoked through the
``acpgate token`` command, as an operator would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from websockets.asyncio.client import ClientConnection, connect

from tests.agent.fake_http import FakeProviderServer
from tests.gateway.wsfixtures import http_get
from tests.launches import DATA_PATH_ENV
from tests.security.fake_model import attacker_model_server

ACPGATE = [sys.executable, "-m", "acpgate"]
#: Generous ceiling for one wait; the tests never assert on timing.
WAIT = 60.0

CONFIG = """\
[acp]
default_agent = "attacker"
max_sessions = {max_sessions}
max_sessions_per_token = {per_token}

[gateway]
host = "127.0.0.1"
port = {port}
{gateway}
[autonomy]
level = "{autonomy}"
{autonomy_extra}
[agents.attacker]
kind = "builtin"
provider = "openai"
model = "attacker"
base_url = "{model_url}/v1"
max_retries = 0

[agents.demo]
kind = "builtin"
provider = "demo"
model = "demo"
{extra}"""


@dataclass(frozen=True)
class Token:
    """A gateway token as ``acpgate token create`` printed it."""

    token_id: str
    secret: str


def free_port() -> int:
    """A TCP port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Gateway:
    """A running ``acpgate serve`` and the paths around it."""

    config_dir: Path
    home: Path
    port: int
    log: Path
    proc: asyncio.subprocess.Process
    #: The attacker's model server the built-in agents talk to (its ``requests``).
    model: FakeProviderServer | None = None

    @property
    def data_dir(self) -> Path:
        """``<config dir>/data`` (the default)."""
        return self.config_dir / "data"

    @property
    def url(self) -> str:
        """``ws://127.0.0.1:<port>/acp``."""
        return f"ws://127.0.0.1:{self.port}/acp"

    def env(self) -> dict[str, str]:
        """The environment of every acpgate process of this gateway (the CLI logs at info)."""
        return gateway_env(self.home)

    async def cli(self, *args: str) -> tuple[int, str, str]:
        """Run ``acpgate <args> --config-dir <dir>``: (exit code, stdout, stderr)."""
        proc = await asyncio.create_subprocess_exec(
            *ACPGATE, *args, "--config-dir", str(self.config_dir), env=self.env(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), WAIT)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    async def token(self, name: str) -> Token:
        """``acpgate token create --name <name>``: the secret from stdout, the id from stderr."""
        code, out, err = await self.cli("token", "create", "--name", name)
        assert code == 0, err
        secret = out.strip()
        token_id = err.split("token id:", 1)[1].split()[0]
        return Token(token_id, secret)

    async def revoke(self, token: Token) -> None:
        """``acpgate token revoke <id>`` (another process than the edge)."""
        code, _, err = await self.cli("token", "revoke", token.token_id)
        assert code == 0, err

    async def grant(self, token: Token, grant: str, *, revoke: bool = False) -> None:
        """``acpgate token grant|revoke-grant <id> <grant>``, as the operator would."""
        code, _, err = await self.cli("token", "revoke-grant" if revoke else "grant",
                                      token.token_id, grant)
        assert code == 0, err

    async def connect(self, token: Token | None, **kw: Any) -> ClientConnection:
        """A WebSocket client of ``/acp`` with ``Authorization: Bearer <token>``."""
        headers = {"Authorization": f"Bearer {token.secret}"} if token else {}
        return await connect(self.url, proxy=None, additional_headers=headers, **kw)

    async def metrics(self) -> dict[str, float]:
        """``GET /metrics`` as {sample name with labels: value}."""
        status, _, body = await http_get(f"http://127.0.0.1:{self.port}/metrics")
        assert status == 200, body
        out: dict[str, float] = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def stored_items(self, session_id: str) -> int:
        """History items the store holds for ``session_id`` (its SQLite file, read-only)."""
        db = self.data_dir / "sessions" / "acp-sessions.db"
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            (count,) = conn.execute("SELECT count(*) FROM history WHERE session_id = ?",
                                    (session_id,)).fetchone()
        return int(count)

    def events(self) -> list[dict[str, Any]]:
        """Every JSON log line the gateway's processes wrote so far."""
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
        return out

    def edge_pid(self) -> int:
        """The pid of the ``acpgate edge`` child of serve."""
        for child in psutil.Process(self.proc.pid).children():
            with contextlib.suppress(psutil.Error):
                if "edge" in child.cmdline():
                    return child.pid
        raise AssertionError("acpgate serve has no edge child")


def gateway_env(home: Path, log_level: str = "info") -> dict[str, str]:
    """os.environ without ACPGATE_* overrides (but the data path the test run picked,
    :func:`tests.launches.config_environ`), with its own HOME, logging at ``log_level``."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("ACPGATE_") and "__" in k) or k == DATA_PATH_ENV}
    env.update(HOME=str(home), ACPGATE_LOG_LEVEL=log_level)
    env.pop("ACPGATE_CONFIG_DIR", None)
    return env


def write_gateway_config(config_dir: Path, *, port: int, model_url: str,
                         autonomy: str = "full", autonomy_extra: str = "",
                         gateway: str = "", max_sessions: int = 20, per_token: int = 0,
                         extra: str = "") -> None:
    """The config of :func:`running_gateway` (``autonomy_extra``/``gateway``: more keys of
    those sections; ``extra``: more sections, ``{model_url}`` filled in)."""
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "config.toml").write_text(CONFIG.format(
        port=port, model_url=model_url, autonomy=autonomy, autonomy_extra=autonomy_extra,
        gateway=gateway, max_sessions=max_sessions, per_token=per_token,
        extra=extra.replace("{model_url}", model_url)), encoding="utf-8")


async def _wait_healthy(gw: Gateway) -> None:
    for _ in range(int(WAIT * 10)):
        assert gw.proc.returncode is None, "acpgate serve exited:\n" + gw.log.read_text()
        with contextlib.suppress(OSError):
            status, _, _ = await http_get(f"http://127.0.0.1:{gw.port}/healthz")
            if status == 200:
                return
        await asyncio.sleep(0.1)
    raise AssertionError("acpgate serve never became healthy:\n" + gw.log.read_text())


async def _stop(gw: Gateway) -> None:
    """SIGTERM serve, wait; then nothing it started may be left."""
    try:
        tree = [gw.proc.pid, *(c.pid for c in psutil.Process(gw.proc.pid).children(True))]
    except psutil.NoSuchProcess:
        tree = []
    if gw.proc.returncode is None:
        gw.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(gw.proc.wait(), WAIT)
        except TimeoutError:
            gw.proc.kill()
            await gw.proc.wait()
            raise
    left = []
    for pid in tree:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
    assert not left, f"acpgate serve left processes behind: {left}"


@asynccontextmanager
async def running_gateway(root: Path, *, log_level: str = "info",
                          **config: Any) -> AsyncIterator[Gateway]:
    """``acpgate serve`` on a free port under ``root`` (``config``: :func:`write_gateway_config`)."""
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    config_dir = root / "cfg"
    port = free_port()
    log = root / "serve.log"
    async with attacker_model_server() as model:
        write_gateway_config(config_dir, port=port, model_url=model.url, **config)
        with log.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                *ACPGATE, "serve", "--config-dir", str(config_dir),
                env=gateway_env(home, log_level), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=err)
        gw = Gateway(config_dir, home, port, log, proc, model)
        try:
            await _wait_healthy(gw)
            yield gw
        finally:
            await _stop(gw)
