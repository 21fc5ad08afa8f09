"""``acpgate doctor [--json]``: check this install and say what to do about it.

In order: the config (parsed and checked against the schema: the error names
the key), the permissions of acpgate's state, the gateway port, the running
services (each answers gRPC health and an authenticated call with the
install's service credential), the store (``GetStoreStatus``: persistent, or
in memory and why; with no service running, the SQLite file itself, read-only:
intact, or damaged and what to do), the agents (built-in ones complete, external ones'
commands on ``PATH``), the API-key variables they read, Landlock, and Node.js
for the external agents that run on it, in the version their npm package declares. Each check prints ``ok``, ``warn`` or
``fail`` with one line of why and, when not ok, what to do; the exit code is 1
when any failed. A config that does not load stops the checks there: the
others need it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import grpc

from acpgate import __version__
from acpgate.ops.client import (
    CALL_TIMEOUT_SECS,
    OpsError,
    connect,
    describe,
    find_targets,
    operator_security,
    relative_home,
)
from acpgate.ops.doctor_checks import (
    FAIL,
    OK,
    WARN,
    Check,
    agent_checks,
    key_checks,
    landlock_check,
    node_needed,
    permission_check,
    port_check,
)
from acpgate.ops.node_engines import NodeRequirement, node_requirement, satisfies
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as lpb
from acpgate_contracts.session.v1 import session_pb2 as spb
from services.common import config as config_mod
from services.common.config import Config, ConfigError
from services.session.store.sqlite.diagnosis import DAMAGED, MISSING, NEWER, diagnose
from services.session.store.sqlite.diagnosis import OK as STORE_OK

__all__ = ["doctor", "run_doctor"]

#: Node.js below this major version cannot run the tested adapters.
NODE_MIN_MAJOR = 18


def config_check(config_dir: Path) -> tuple[Check, Config | None]:
    """The config loads (file, environment) and passes the schema."""
    file = config_dir / config_mod.CONFIG_FILE_NAME
    try:
        cfg = config_mod.load_config(config_dir)
    except ConfigError as exc:
        return Check("config", FAIL, str(exc), f"fix it in {relative_home(file)} (README "
                     "\"Configuration\"), or: acpgate config set KEY VALUE"), None
    if not file.exists():
        return Check("config", WARN, f"no {relative_home(file)} yet: the defaults apply",
                     "the first `acpgate acp` or `acpgate serve` writes one (a built-in demo "
                     "agent)"), cfg
    enabled = [a for a, s in cfg.agents.items() if s.enabled]
    return Check("config", OK, f"{relative_home(file)}: {len(enabled)} agent(s) enabled, "
                 f"default {cfg.acp.default_agent or '(none)'}"), cfg


async def service_checks(cfg: Config) -> list[Check]:
    """Every running service answers with the credential; the store is persistent."""
    targets = await asyncio.to_thread(find_targets, cfg)
    configured = bool(cfg.services.session_addr or cfg.services.lifecycle_addr)
    if not targets:
        return [Check("services", OK, "none runs now (an editor's `acpgate acp` starts its "
                      "own; `acpgate serve` runs the gateway)"),
                await _stopped_store_check(cfg)]
    try:
        security = await asyncio.to_thread(operator_security, cfg)
    except OpsError as exc:
        return [Check("services", FAIL, str(exc), "run doctor as the user acpgate runs as")]
    out: list[Check] = []
    store: Check | None = None
    for target in targets:
        name = f"services {target.name}"
        async with connect(security, target) as conn:
            try:
                instance = await conn.lifecycle.GetInstance(lpb.GetInstanceRequest(),
                                                            timeout=CALL_TIMEOUT_SECS)
                status = await conn.session.GetStoreStatus(spb.GetStoreStatusRequest(),
                                                           timeout=CALL_TIMEOUT_SECS)
            except grpc.aio.AioRpcError as exc:
                fix = ("check [services] addresses and that the services run" if configured
                       else "restart it (or stop it and let its clients start a new one)")
                out.append(Check(name, FAIL, describe(exc, target.session_addr), fix))
                continue
        out.append(Check(name, OK, f"session and lifecycle services answer (instance "
                         f"{instance.gateway_instance_id}, slot {instance.slot})"
                         + (f", gateway {target.gateway}" if target.gateway else "")))
        if store is None:
            store = _store_check(status)
    if store is None:
        store = Check("store", WARN, "not checked: no session service answered")
    return [*out, store]


async def _stopped_store_check(cfg: Config) -> Check:
    """The store of a stopped install: the SQLite file, looked at read-only."""
    if cfg.store.url:
        return Check("store", WARN, "not checked: no session service runs to ask",
                     "start `acpgate serve` and run doctor again, or: acpgate store check")
    found = await asyncio.to_thread(diagnose, cfg.session_db_path, thorough=False)
    where = relative_home(found.path)
    if found.state == STORE_OK:
        return Check("store", OK, f"sqlite at {where}, schema {found.schema_version}, "
                     f"{found.sessions} session(s) (not running: read-only check)")
    if found.state == MISSING:
        return Check("store", OK, f"no store yet at {where} (the first start creates it)")
    flag = "" if cfg.config_dir == config_mod.resolve_config_dir(None, {}) else \
        f" --config-dir {cfg.config_dir}"
    fix = (f"acpgate store repair{flag} (moves it aside, recovers what it still holds)"
           if found.state == DAMAGED else
           "run the acpgate that wrote it, or move the file aside" if found.state == NEWER
           else "move it away: acpgate stores sessions only in a regular file of its own")
    return Check("store", FAIL, f"{where}: {found.problem} — acpgate refuses to start on it",
                 fix)


def _store_check(status: spb.StoreStatus) -> Check:
    if status.persistent:
        return Check("store", OK, f"{status.backend} at {relative_home(status.db_path)}, "
                                  f"schema {status.schema_version}")
    return Check("store", FAIL, f"in memory: {status.fallback_reason} (nothing survives a "
                 "restart, session/load is off)", "fix the reason above (a writable data dir, "
                 "[store] url reachable) and restart acpgate")


async def _version_of(program: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        program, "--version", stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), CALL_TIMEOUT_SECS)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return ""
    return out.decode(errors="replace").strip()


def _requirements(cfg: Config, aliases: list[str]) -> dict[str, NodeRequirement]:
    """The Node.js range each of ``aliases`` declares (its package.json ``engines.node``),
    where the package is on this machine."""
    found = {alias: node_requirement(cfg.agents[alias], os.environ) for alias in aliases}
    return {alias: req for alias, req in found.items() if req is not None}


async def node_check(cfg: Config) -> Check:
    """Node.js (and npm, to install adapters) for the external agents that run on it, in
    the version each declares it needs (``engines.node``) where that can be read."""
    needed = await asyncio.to_thread(node_needed, cfg)
    node, npm = shutil.which("node"), shutil.which("npm")
    if not needed:
        return Check("node", OK, "not needed: no enabled external agent runs on Node.js")
    who = ", ".join(needed)
    if node is None:
        return Check("node", FAIL, f"{who} run(s) on Node.js, which is not on PATH",
                     f"install Node.js ≥ {NODE_MIN_MAJOR} (and npm)")
    version = await _version_of(node)
    wants = await asyncio.to_thread(_requirements, cfg, needed)
    unfit = {a: r for a, r in wants.items() if satisfies(version, r.node_range) is False}
    if unfit:
        ranges = sorted({r.node_range for r in unfit.values()})
        return Check("node", FAIL, f"node {version} does not fit what "
                     + ", ".join(f"{a} runs ({r.package} {r.version} declares node "
                                 f"{r.node_range} in its package.json engines)"
                                 for a, r in sorted(unfit.items())),
                     f"install a Node.js that fits {' and '.join(ranges)} (e.g. with nvm or "
                     "your package manager) and put it first on PATH, or pin an older "
                     "version of the package")
    major = version.lstrip("v").split(".", 1)[0]
    if major.isdigit() and int(major) < NODE_MIN_MAJOR:
        return Check("node", FAIL, f"node {version} is too old for {who}",
                     f"install Node.js ≥ {NODE_MIN_MAJOR}")
    npm_note = f", npm {await _version_of(npm)}" if npm else ", no npm (installing adapters " \
        "needs it)"
    fits = "".join(f"; {a} wants {r.node_range}" for a, r in sorted(wants.items()))
    return Check("node", OK if npm else WARN, f"node {version}{npm_note}, for {who}{fits}")


async def doctor(config_dir: Path) -> list[Check]:
    """Every check, in order."""
    first, cfg = await asyncio.to_thread(config_check, config_dir)
    if cfg is None:
        return [first]
    checks = [first]
    checks += await asyncio.to_thread(lambda: [permission_check(cfg), port_check(cfg)])
    checks += await service_checks(cfg)
    checks += await asyncio.to_thread(lambda: [*agent_checks(cfg), *key_checks(cfg, os.environ),
                                               landlock_check()])
    checks.append(await node_check(cfg))
    return checks


def _render(config_dir: Path, checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = [f"acpgate doctor · {relative_home(config_dir)} · acpgate {__version__}", ""]
    for c in checks:
        lines.append(f"{c.status:<5} {c.name:<{width}}  {c.why}")
        if c.fix and c.status != OK:
            lines.append(f"{'':<5} {'':<{width}}  → {c.fix}")
    counts = {s: sum(1 for c in checks if c.status == s) for s in (OK, WARN, FAIL)}
    lines += ["", f"{counts[OK]} ok, {counts[WARN]} warning(s), {counts[FAIL]} failed"]
    return "\n".join(lines)


async def run_doctor(config_dir: Path, *, as_json_out: bool = False) -> int:
    """Run the checks and print them; 1 when any failed."""
    checks = await doctor(config_dir)
    failed = any(c.status == FAIL for c in checks)
    if as_json_out:
        print(json.dumps({"config_dir": str(config_dir), "version": __version__,
                          "ok": not failed, "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        print(_render(config_dir, checks))
    sys.stdout.flush()
    return 1 if failed else 0
