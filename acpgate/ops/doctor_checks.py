"""The checks ``acpgate doctor`` makes on this machine, without asking a service.

Each returns :class:`Check` values: ``ok``, ``warn`` or ``fail``, one line of
why, and what to do. They only look — stat, bind a probe socket, find a
command on ``PATH``, read an environment variable's *presence* — and change
nothing: a loose file mode is reported (acpgate tightens it itself when it
next opens the file), never fixed behind the operator's back, and no value of
a key is ever printed.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from acpgate.ops.adapters import KNOWN_ADAPTERS, adapter_keys, install_hint
from acpgate.ops.client import relative_home
from acpgate.ops.endpoints import live_endpoints
from services.common.config import AgentSection, Config
from services.common.in_use import port_holder
from services.edge.transport.bridge import TOKEN_FILE_NAME

__all__ = ["FAIL", "OK", "WARN", "Check", "agent_checks", "key_checks", "landlock_check",
           "node_needed", "permission_check", "port_check"]

OK, WARN, FAIL = "ok", "warn", "fail"

#: How many loose paths a failed permission check names.
_SHOWN = 4


@dataclass(frozen=True)
class Check:
    """One finding: its name, ``ok``/``warn``/``fail``, why, and what to do about it."""

    name: str
    status: str
    why: str
    fix: str = ""


def _loose(path: Path) -> str | None:
    """Why ``path`` is not its owner's alone, or None."""
    try:
        st = path.lstat()
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode) or stat.S_ISSOCK(st.st_mode):
        return None  # links point inside; sockets live in 0700 dirs
    if st.st_uid != os.getuid():
        return f"{relative_home(path)} belongs to uid {st.st_uid}"
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return f"{relative_home(path)} ({oct(mode)[2:]})"
    return None


def permission_check(cfg: Config) -> Check:
    """The config file, the bridge's token file and everything in the data dir: ``0600``
    files in ``0700`` dirs, of the user acpgate runs as — keys, tokens, conversations,
    adapter logs."""
    # The config dir itself may be the user's own (``~/.acpgate`` made by hand): what it
    # holds of acpgate's is the config file, the bridge's token and the data dir.
    paths = [cfg.config_file]
    token_file = cfg.config_file.parent / TOKEN_FILE_NAME
    if token_file.exists():
        paths.append(token_file)
    data = cfg.data_dir
    if data.exists():
        paths += [data, *sorted(data.rglob("*"))]
    found = [why for why in map(_loose, paths) if why]
    if not data.exists() and not found:
        return Check("permissions", OK, f"no data dir yet ({relative_home(data)}); acpgate "
                                        "makes it owner-only on its first start")
    if not found:
        return Check("permissions", OK, f"{relative_home(cfg.config_file)} and "
                                        f"{relative_home(data)}: owner-only (0600 files, 0700 "
                                        "dirs)")
    more = f" and {len(found) - _SHOWN} more" if len(found) > _SHOWN else ""
    return Check("permissions", FAIL,
                 f"others may reach acpgate's state: {', '.join(found[:_SHOWN])}{more}",
                 "chmod go-rwx on them, as the user acpgate runs as (acpgate tightens what it "
                 "opens itself on its next start)")


def _bind_probe(host: str, port: int) -> OSError | None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc
    return None


def port_check(cfg: Config) -> Check:
    """The gateway port: free, or held by this install's ``acpgate serve`` — anything else
    keeps serve from starting."""
    host, port = cfg.gateway.host, cfg.gateway.port
    where = f"port {port} on {host}"
    serves = [e for e in live_endpoints(cfg.data_dir) if e.process == "serve"]
    for serve in serves:
        if serve.gateway.rsplit(":", 1)[-1].split("/", 1)[0] == str(port):
            return Check("port", OK, f"{where} is this install's acpgate serve "
                                     f"(pid {serve.pid}, {serve.gateway})")
    problem = _bind_probe(host, port)
    if problem is None:
        return Check("port", OK, f"{where} is free: acpgate serve can take it")
    if problem.errno == errno.EADDRINUSE:
        pid = port_holder(host, port)
        who = f"pid {pid}" if pid else "another process"
        return Check("port", FAIL, f"{where} is in use by {who}, not by this install's "
                                   "acpgate serve", "stop it, or choose another port: "
                                   "acpgate config set gateway.port N")
    return Check("port", FAIL, f"{where} cannot be bound: {problem.strerror or problem}",
                 "set [gateway] host to an address of this machine")


def _command_path(agent: AgentSection) -> str | None:
    command = os.path.expanduser(agent.command)
    if os.sep in command:
        return command if os.access(command, os.X_OK) and os.path.isfile(command) else None
    return shutil.which(command)


def agent_checks(cfg: Config) -> list[Check]:
    """Every enabled agent can run: a built-in one has its provider and model, an external
    one's command is found; ``[acp] default_agent`` names one of them."""
    out: list[Check] = []
    default = cfg.acp.default_agent
    if default and (default not in cfg.agents or not cfg.agents[default].dispatchable):
        out.append(Check("default agent", FAIL, f"[acp] default_agent = {default!r} names no "
                         "enabled, complete agent: a session/new without agentAlias fails",
                         "acpgate config set acp.default_agent <alias>"))
    for alias, agent in sorted(cfg.agents.items()):
        name = f"agent {alias}"
        if not agent.enabled:
            continue
        if agent.kind == "builtin":
            if agent.dispatchable:
                out.append(Check(name, OK, f"built-in agent on {agent.default_model}"))
            else:
                out.append(Check(name, FAIL, "a built-in agent needs provider and model",
                                 f"acpgate config set agents.{alias}.provider demo (and .model)"))
            continue
        found = _command_path(agent) if agent.command else None
        if found:
            out.append(Check(name, OK, f"{agent.command} → {relative_home(found)}"))
            continue
        if os.sep in agent.command:
            out.append(Check(name, FAIL, f"{agent.command} is not an executable file",
                             "put the agent's program there (for a registry binary: unpack "
                             f"its archive there), or set agents.{alias}.command"))
            continue
        install = install_hint(agent.command)
        out.append(Check(name, FAIL, f"command {agent.command!r} is not found on PATH"
                         if agent.command else "an external agent needs a command",
                         f"{install}, or set agents.{alias}.command to its full path"))
    return out


def key_checks(cfg: Config, environ: Mapping[str, str]) -> list[Check]:
    """The API-key variables agents read are set in this environment (only whether; never
    a value)."""
    out: list[Check] = []
    for alias, agent in sorted(cfg.agents.items()):
        if not agent.enabled:
            continue
        name = f"key {alias}"
        if agent.kind == "builtin" and agent.api_key_env:
            var = agent.api_key_env
            if environ.get(var, "").strip():
                out.append(Check(name, OK, f"{var} is set"))
            else:
                out.append(Check(name, FAIL, f"agents.{alias}.api_key_env names {var}, which "
                                 f"is not set here: every prompt to {alias} fails",
                                 f"export {var} in the environment acpgate runs in"))
        if agent.kind != "acp":
            continue
        unset = [v for v in agent.pass_env if "*" not in v and not environ.get(v)]
        wanted = adapter_keys(agent.command, agent.args)
        given = {*agent.env, *(v for v in agent.pass_env if environ.get(v))}
        if wanted and not given.intersection(wanted):
            passed = [v for v in wanted if v in agent.pass_env]
            how = (f"pass_env names {', '.join(passed)}, not set here" if passed
                   else "none is in its env or pass_env")
            out.append(Check(name, WARN, f"{alias} reads its key from {' or '.join(wanted)}: "
                             f"{how}; it works only if the adapter is logged in itself",
                             f"export {passed[0]} where acpgate runs" if passed else
                             f"pass_env = [\"{wanted[0]}\"] in [agents.{alias}], or its env"))
            unset = [v for v in unset if v not in wanted]
        if unset:
            out.append(Check(name, WARN, f"agents.{alias}.pass_env names {', '.join(unset)}, "
                             "not set here: the agent does not get it",
                             "export it where acpgate runs, or drop it from pass_env"))
    return out


def landlock_check() -> Check:
    """Whether the kernel confines the built-in agent's shell (and gateway clients' stdio
    MCP servers) with Landlock."""
    from services.agent.sandbox import landlock_abi

    abi = landlock_abi()
    if abi >= 1:
        return Check("landlock", OK, f"Landlock ABI {abi}: the built-in agent's shell commands "
                                     "are confined to the session's roots")
    return Check("landlock", WARN, "Landlock is not available: shell commands are checked "
                 "but not confined, and gateway clients' stdio MCP servers are refused",
                 "a Linux kernel ≥ 5.13 with Landlock enabled (lsm=…,landlock)")


def node_needed(cfg: Config) -> list[str]:
    """The enabled external agents whose command runs on Node.js (a known npm adapter, or
    a script whose first line names node)."""
    needed = []
    for alias, agent in sorted(cfg.agents.items()):
        if not agent.enabled or agent.kind != "acp" or not agent.command:
            continue
        if Path(agent.command).name in KNOWN_ADAPTERS or Path(agent.command).name in (
                "node", "npx"):
            needed.append(alias)
            continue
        found = _command_path(agent)
        try:
            with open(found or "", "rb") as fh:
                if b"node" in fh.readline(200):
                    needed.append(alias)
        except OSError:
            pass
    return needed
