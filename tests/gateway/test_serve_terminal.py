"""`acpgate serve` as a person starts it: text logs and the served URLs on a terminal, JSON
on a pipe, ``--port`` / ``--host`` for one run, and a bad flag refused clearly (exit 2)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from .wsfixtures import free_port, wait_healthy, write_config

pytestmark = pytest.mark.slow

URL_KEYS = ("acp", "acp_http", "console", "healthz", "metrics")


def _env() -> dict[str, str]:
    """This environment with no log format asked for (the default decides)."""
    env = {k: v for k, v in os.environ.items() if k != "ACPGATE_LOG_FORMAT"}
    env["ACPGATE_LOG_LEVEL"] = "info"
    return env


class _Terminal:
    """A pty: its slave end is the child's stderr; a thread collects what the child wrote."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        self.data = bytearray()
        self.changed = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)

    def start(self) -> None:
        os.close(self.slave)  # the child holds it now
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: every holder of the slave end closed it
                break
            if not chunk:
                break
            self.data.extend(chunk)
            self.changed.set()

    def lines(self) -> list[str]:
        return bytes(self.data).decode("utf-8", "replace").replace("\r\n", "\n").splitlines()

    def close(self) -> None:
        self._reader.join(timeout=30)
        os.close(self.master)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def test_serve_on_a_terminal_logs_text_and_names_its_urls(tmp_path: Path) -> None:
    port = free_port()
    cfg = write_config(tmp_path / "cfg", port=port, prefix="/gw")
    term = _Terminal()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "acpgate", "serve", "--config-dir", str(cfg.config_dir),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=term.slave, env=_env())
    term.start()
    try:
        await wait_healthy(port, proc)
    finally:
        await _stop(proc)
        term.close()
    lines = term.lines()
    assert lines, "serve wrote nothing on its terminal"
    assert not any(line.lstrip().startswith("{") for line in lines), lines[:5]
    # The first line serve writes names every URL it serves, the path prefix honoured.
    first = lines[0]
    base = f"127.0.0.1:{port}/gw"
    assert "serving" in first and "serve[" in first, first
    for url in (f"ws://{base}/acp", f"http://{base}/acp", f"http://{base}/",
                f"http://{base}/healthz", f"http://{base}/metrics"):
        assert url in first, (url, first)
    # The children share the terminal, and write text too.
    assert any(" edge[" in line and "startup" in line for line in lines), lines
    # The log file stays JSON lines, whatever the terminal shows.
    assert cfg.log_file is not None
    logged = [json.loads(line) for line in cfg.log_file.read_text().splitlines()]
    assert any(r["event"] == "serving" for r in logged)


async def test_serve_on_a_pipe_logs_json_and_port_flag_moves_it(tmp_path: Path) -> None:
    configured, port = free_port(), free_port()
    cfg = write_config(tmp_path / "cfg", port=configured)
    log = tmp_path / "serve.log"
    with log.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "acpgate", "serve", "--config-dir", str(cfg.config_dir),
            "--port", str(port), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=err, env=_env())
    try:
        await wait_healthy(port, proc)
    finally:
        await _stop(proc)
    records: list[dict[str, Any]] = [json.loads(line) for line in log.read_text().splitlines()
                                     if line.strip()]
    (serving,) = [r for r in records if r["event"] == "serving"]
    assert serving["process"] == "serve"
    assert {key: serving[key] for key in URL_KEYS} == {
        "acp": f"ws://127.0.0.1:{port}/acp", "acp_http": f"http://127.0.0.1:{port}/acp",
        "console": f"http://127.0.0.1:{port}/", "healthz": f"http://127.0.0.1:{port}/healthz",
        "metrics": f"http://127.0.0.1:{port}/metrics"}
    # The children were told the port too (the edge's startup line names it).
    (edge,) = [r for r in records if r["event"] == "startup" and r.get("process") == "edge"]
    assert edge["gateway"] == f"ws://127.0.0.1:{port}/acp"


@pytest.mark.parametrize("flags, message", [
    (["--port", "70000"], "argument --port: 70000 is out of range (expected 0-65535"),
    (["--port", "-1"], "argument --port: -1 is out of range"),
    (["--port", "http"], "argument --port: 'http' is not a port number"),
    (["--host", "not a host!"], "argument --host: 'not a host!' is not an IP address or host"),
])
def test_bad_listen_flags_are_a_clear_error(tmp_path: Path, flags: list[str],
                                            message: str) -> None:
    for command in ("serve", "edge"):
        done = subprocess.run(
            [sys.executable, "-m", "acpgate", command, "--config-dir", str(tmp_path / "cfg"),
             *flags], capture_output=True, text=True, env=_env(), timeout=120)
        assert done.returncode == 2, done.stderr
        assert message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "cfg").exists()  # refused before anything was written
