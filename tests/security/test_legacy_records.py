"""Pre-lease records reach the fail-safe path end to end, and it never hits a stranger
(SPEC §13 "Legacy records").

Record files are dropped into a real install's ``<data dir>/lifecycle/legacy/``, then a
real ``acpgate lifecycle-service`` starts: the holder of slot 0 imports them and reaps
each record before it serves. Its processes are real: "witnesses" that record every
catchable signal (SIGTERM included: only SIGKILL ends one) and answer a SIGWINCH probe
after any signal sent earlier, so "never signalled" is read, not waited for. A second
install's live wrapper and adapter, the shell the service runs under, a stranger on a
stored PID: none of them is touched, and each record says why.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2_grpc
from services.common.config import Config
from services.common.grpc_channel import wait_healthy
from services.lifecycle.adapters.spawn import install_wrapper
from services.lifecycle.processes.verify import (
    REASON_COMMAND,
    REASON_ROOT_GONE,
    REASON_WRAPPER_ROOT,
)
from services.lifecycle.reaping.legacy import REASON_FOREIGN_ROOT, REASON_LEASED, REASON_PROTECTED
from tests.launches import dial
from tests.lifecycle.conftest import REPO, ProcessGuard, make_config, start_service_process
from tests.security.procs import alive, ensure_detacher, eventually, guard

__all__ = ["guard"]  # the shared fixture: imported so that pytest finds it here

pytestmark = pytest.mark.slow

NOBODY = 65534

# argv: pidfile — a process the old system started: a child under it, every catchable
# signal noted in <pidfile>.signals (so SIGTERM does not end it), SIGWINCH noted as
# "probe" (handled after any lower-numbered signal that was already pending).
WITNESS = r"""
import json, os, signal, subprocess, sys, time
pidfile = sys.argv[1]
def note(signum, frame):
    with open(pidfile + ".signals", "a") as fh:
        fh.write("probe\n" if signum == signal.SIGWINCH else f"{signum}\n")
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
          signal.SIGWINCH):
    signal.signal(s, note)
child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
with open(pidfile + ".tmp", "w") as fh:
    json.dump({"root": os.getpid(), "child": child.pid}, fh)
os.replace(pidfile + ".tmp", pidfile)
while True:
    time.sleep(1)
"""


@dataclass
class Witness:
    """A running :data:`WITNESS`: its argv, root and child."""

    argv: list[str]
    root: psutil.Process
    child: psutil.Process
    pidfile: Path

    def record(self, **fields: object) -> dict[str, object]:
        """A record naming it by its exact command, shell-quoted as an old system stored it."""
        return {"pid": self.root.pid, "command": shlex.join(self.argv), **fields}

    def noted(self) -> list[str]:
        path = Path(f"{self.pidfile}.signals")
        return path.read_text().split() if path.exists() else []

    async def signals_before_probe(self) -> list[str]:
        """Every signal it got before now (probed: the answer comes after all of them)."""
        before = self.noted().count("probe")
        self.root.send_signal(signal.SIGWINCH)
        await eventually(lambda: self.noted().count("probe") > before, 10.0, "the probe")
        return [s for s in self.noted() if s != "probe"]

    def gone(self) -> bool:
        return not alive(self.root) and not alive(self.child)


def write_witness(directory: Path, script: Path | None) -> tuple[Path, Path]:
    """Write :data:`WITNESS` (to ``script``, default ``directory/witness.py``); it and the
    next free pidfile name in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = script or directory / "witness.py"
    path.write_text(WITNESS, encoding="utf-8")
    return path, directory / f"pids-{len(list(directory.glob('pids-*.json')))}.json"


async def start_witness(directory: Path, guard: ProcessGuard, *, script: Path | None = None,
                        flags: tuple[str, ...] = ()) -> Witness:
    """Start :data:`WITNESS` (from ``script``, default ``directory/witness.py``)."""
    path, pidfile = await asyncio.to_thread(write_witness, directory, script)
    argv = [sys.executable, *flags, str(path), str(pidfile)]
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                start_new_session=True)
    root = guard.track(proc.pid)
    await eventually(pidfile.exists, 10.0, "the witness's pidfile")
    child = guard.track(json.loads(pidfile.read_text())["child"])
    return Witness(argv, root, child, pidfile)


async def a_free_pid() -> int:
    """The PID of a process that ran and is gone."""
    proc = await asyncio.create_subprocess_exec("sleep", "30")
    proc.kill()
    await proc.wait()
    return proc.pid


def legacy_dir(cfg: Config) -> Path:
    d = cfg.lifecycle_state_dir / "legacy"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    return d


def drop(cfg: Config, name: str, *records: object, mode: int = 0o600) -> Path:
    """Write a record file (a str is written as the line it is)."""
    path = legacy_dir(cfg) / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records),
                    encoding="utf-8")
    os.chmod(path, mode)
    return path


@dataclass(frozen=True)
class Row:
    """One stored legacy record."""

    source: str
    line: int
    pid: int
    state: str
    reason: str
    terminated: tuple[int, ...]
    processed_at: int


def rows(cfg: Config) -> list[Row]:
    """Every legacy record of the install (read-only)."""
    db = cfg.lifecycle_state_dir / "leases.db"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        found = conn.execute(
            "SELECT source, line, pid, state, reason, terminated_pids, processed_at"
            " FROM legacy_records ORDER BY record_id").fetchall()
    return [Row(s, n, p, st, r, tuple(json.loads(t)), at) for s, n, p, st, r, t, at in found]


@asynccontextmanager
async def service(cfg: Config, log: Path, guard: ProcessGuard, address: str = "") -> AsyncIterator[
        lifecycle_pb2_grpc.LifecycleServiceStub]:
    """``acpgate lifecycle-service`` on ``cfg`` (at ``address``, default its data dir's
    socket), healthy (its startup done), stopped after."""
    env = {"ACPGATE_services__lifecycle_addr": address} if address else {}
    proc = await start_service_process(cfg.config_dir, log, env)
    guard.track(proc.pid)
    channel = dial(cfg, address or f"unix:{cfg.data_dir}/run/lifecycle.sock")
    try:
        await wait_healthy(channel, within=30.0)
        yield lifecycle_pb2_grpc.LifecycleServiceStub(channel)
    finally:
        await channel.close(None)
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 20.0)


async def test_legacy_records_reaped_only_when_provably_theirs(
    tmp_path: Path, guard: ProcessGuard,
) -> None:
    # Install B, with a live lease: its wrapper, its adapter, the adapter's detached grandchild.
    cfg_b = make_config(tmp_path / "b", term_grace_ms=200)
    async with service(cfg_b, tmp_path / "b.log", guard) as stub_b:
        tree_b = await ensure_detacher(stub_b, tmp_path / "work-b", guard)
        root_b = (await stub_b.GetInstance(pb.GetInstanceRequest())).wrapper_root
        adapter_argv = await asyncio.to_thread(tree_b.adapter.cmdline)

        # Install A, its wrapper root made as its first start would.
        cfg_a = make_config(tmp_path / "a", term_grace_ms=200)
        wrapper_a = await install_wrapper(cfg_a.lifecycle_state_dir)
        matched = await start_witness(tmp_path / "old agent", guard)  # a space: quoting matters
        old_wrapper = await start_witness(tmp_path / "w", guard, flags=("-I", "-S"),
                                          script=wrapper_a.root / "old_wrapper.py")
        stranger = await start_witness(tmp_path / "stranger", guard)
        gone_pid = await a_free_pid()

        # A runs under a shell that waits for a line: the shell's PID goes into the records.
        log_a = tmp_path / "a.log"
        env = {k: v for k, v in os.environ.items() if k != "ACPGATE_CONFIG_DIR"}
        with log_a.open("ab") as log:
            shell = await asyncio.create_subprocess_exec(
                "/bin/sh", "-c", 'read go; "$0" -m acpgate lifecycle-service --config-dir "$1"; :',
                sys.executable, str(cfg_a.config_dir), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL, stderr=log, cwd=str(REPO), env=env)
        guard.track(shell.pid)
        shell_argv = await asyncio.to_thread(psutil.Process(shell.pid).cmdline)
        drop(cfg_a, "zeroclaw-processes.jsonl",
             matched.record(started_at=1_720_000_000_000),                   # 1 closed
             {"pid": old_wrapper.root.pid, "wrapper": True},                 # 2 closed
             {"pid": stranger.root.pid, "command": "/usr/bin/old-agent --acp"},  # 3 left
             {"pid": tree_b.wrapper.pid, "wrapper": True},                   # 4 left
             {"pid": tree_b.wrapper.pid, "wrapper": root_b},                 # 5 left
             {"pid": tree_b.adapter.pid, "command": adapter_argv},           # 6 left
             {"pid": gone_pid, "command": "/usr/bin/old-agent"},             # 7 lost
             {"pid": shell.pid, "command": shell_argv})                      # 8 left
        assert shell.stdin is not None
        shell.stdin.write(b"go\n")
        await shell.stdin.drain()
        channel = dial(cfg_a, f"unix:{cfg_a.data_dir}/run/lifecycle.sock")
        try:
            await wait_healthy(channel, within=30.0)
            service_a = guard.track(psutil.Process(shell.pid).children()[0].pid)
            outcome = {r.line: (r.state, r.reason) for r in rows(cfg_a)}
            assert outcome == {
                1: ("closed", ""),
                2: ("closed", ""),
                3: ("left", REASON_COMMAND),
                4: ("left", REASON_WRAPPER_ROOT),
                5: ("left", REASON_FOREIGN_ROOT),
                6: ("left", REASON_LEASED),
                7: ("lost", REASON_ROOT_GONE),
                8: ("left", REASON_PROTECTED),
            }
            terminated = {r.line: set(r.terminated) for r in rows(cfg_a)}
            assert terminated[1] == {matched.root.pid, matched.child.pid}
            assert terminated[2] == {old_wrapper.root.pid, old_wrapper.child.pid}
            assert all(not terminated[n] for n in range(3, 9))
            # Reaped, child and root (the root outlives SIGTERM: SIGKILL after the grace).
            await eventually(matched.gone, 10.0, "the matched record's tree to go")
            await eventually(old_wrapper.gone, 10.0, "the old wrapper's tree to go")
            # Left alone: the stranger, B's whole tree, the shell and A itself.
            assert await stranger.signals_before_probe() == []
            assert all(alive(p) for p in (stranger.root, stranger.child, *tree_b.processes))
            assert alive(psutil.Process(shell.pid)) and alive(service_a)
            verified = await stub_b.VerifyOwnedTree(
                pb.VerifyOwnedTreeRequest(lease_id=tree_b.lease.lease_id))
            assert verified.verified, verified.reason
            assert tree_b.signals() == ""
            # The file is imported once: renamed, kept for the operator.
            names = sorted(p.name for p in legacy_dir(cfg_a).iterdir())
            assert names == ["zeroclaw-processes.jsonl.imported"]
        finally:
            await channel.close(None)
            for child in psutil.Process(shell.pid).children():  # A itself, if it still runs
                child.send_signal(signal.SIGTERM)
            await asyncio.wait_for(shell.wait(), 20.0)


async def test_a_malformed_or_untrusted_file_is_logged_and_left(
    tmp_path: Path, guard: ProcessGuard,
) -> None:
    cfg = make_config(tmp_path / "gw", term_grace_ms=200)
    w = [await start_witness(tmp_path / f"w{i}", guard) for i in range(4)]
    broken = drop(cfg, "broken.jsonl", w[0].record(),
                  '{"pid": 5, "command": "sk-legacy-secret"')  # cut short
    loose = drop(cfg, "loose.jsonl", w[1].record(), mode=0o666)
    theirs = drop(cfg, "theirs.jsonl", w[2].record())
    as_root = os.getuid() == 0
    if as_root:
        os.chown(theirs, NOBODY, NOBODY)
    drop(cfg, "good.jsonl", w[3].record())
    log = tmp_path / "gw.log"
    async with service(cfg, log, guard):
        # The service started, and did what the good file asked.
        await eventually(w[3].gone, 10.0, "the good file's record to be reaped")
        assert [(r.source, r.state) for r in rows(cfg)] == [("good.jsonl", "closed")]
        for witness in w[:3]:
            assert await witness.signals_before_probe() == []
        assert broken.exists() and loose.exists() and theirs.exists()  # left for the operator
    text = log.read_text()
    refusals = {json.loads(line)["file"]: json.loads(line)["why"]
                for line in text.splitlines() if '"legacy_file_refused"' in line}
    assert refusals[str(broken)] == "line 2: not JSON (Expecting ',' delimiter)"
    assert "writable by group or others" in refusals[str(loose)]
    if as_root:
        assert refusals[str(theirs)] == f"file belongs to another user (uid {NOBODY})"
    assert "sk-legacy-secret" not in text  # the log never holds a file's content

    # Fixed by the operator: the next start imports them.
    drop(cfg, "broken.jsonl", w[0].record(), {"pid": await a_free_pid(), "command": "x"})
    os.chmod(loose, 0o600)
    async with service(cfg, tmp_path / "gw2.log", guard):
        await eventually(w[0].gone, 10.0, "the fixed file's record to be reaped")
        await eventually(w[1].gone, 10.0, "the tightened file's record to be reaped")
        assert sorted((r.source, r.line, r.state) for r in rows(cfg)) == [
            ("broken.jsonl", 1, "closed"), ("broken.jsonl", 2, "lost"),
            ("good.jsonl", 1, "closed"), ("loose.jsonl", 1, "closed")]
        if as_root:
            assert await w[2].signals_before_probe() == [] and theirs.exists()


async def test_one_service_at_a_time_and_never_twice(tmp_path: Path, guard: ProcessGuard) -> None:
    cfg = make_config(tmp_path / "gw", term_grace_ms=200)
    first = await start_witness(tmp_path / "first", guard)
    stranger = await start_witness(tmp_path / "stranger", guard)
    records = (first.record(), {"pid": stranger.root.pid, "command": "/usr/bin/old-agent"})
    drop(cfg, "records.jsonl", *records)
    async with service(cfg, tmp_path / "a1.log", guard) as slot0:
        assert (await slot0.GetInstance(pb.GetInstanceRequest())).slot == 0
        await eventually(first.gone, 10.0, "the first record to be reaped")
        ended = rows(cfg)
        assert [(r.line, r.state) for r in ended] == [(1, "closed"), (2, "left")]

        # While slot 0's holder runs, another service (slot 1) leaves new files alone.
        later = await start_witness(tmp_path / "later", guard)
        later_file = drop(cfg, "later.jsonl", later.record())
        again = drop(cfg, "again.jsonl", *records)  # the same records, dropped twice
        async with service(cfg, tmp_path / "a2.log", guard, f"unix:{tmp_path}/a2.sock") as slot1:
            assert (await slot1.GetInstance(pb.GetInstanceRequest())).slot == 1
            assert later_file.exists() and again.exists()
            assert await later.signals_before_probe() == []
            assert rows(cfg) == ended
    # The next holder of slot 0 imports them: the new record is reaped, the old ones are
    # not processed again (the same content adds no row), the stranger never signalled.
    async with service(cfg, tmp_path / "a3.log", guard) as slot0:
        assert (await slot0.GetInstance(pb.GetInstanceRequest())).slot == 0
        await eventually(later.gone, 10.0, "the later record to be reaped")
        assert rows(cfg)[:2] == ended
        assert [(r.source, r.state) for r in rows(cfg)[2:]] == [("later.jsonl", "closed")]
        assert not again.exists() and not later_file.exists()
        assert await stranger.signals_before_probe() == []
