"""The ``acpgate`` command line (SPEC §0).

Each sub-command loads the config (flag > env > file > defaults), then hands
over to the one module that owns that job. Imports are lazy so that
``acpgate config get`` does not pay for gRPC, and so a broken optional piece
cannot stop the others. Every expected failure prints one clear line to stderr
and exits 2; nothing here prints a traceback for bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from acpgate import __version__
from acpgate.cli_parser import build_parser
from acpgate.listen_flags import apply_listen_flags, served_urls
from services.common import config as config_mod
from services.common import event_loop
from services.common.addresses import gateway_url
from services.common.config import Config, ConfigError
from services.common.live_config import LiveConfig
from services.common.log_output import (
    ENV_LOG_LEVEL,
    log_startup,
    plan_logging,
    setup_logging,
    start_logging,
)
from services.common.logs import get_logger
from services.common.malloc_tuning import EDGE_MALLOC, tune_malloc

if TYPE_CHECKING:
    from acpgate.embedded import EmbeddedServices
    from acpgate.serve_supervisor import Supervisor
    from services.edge.tokens import TokenStore
    from services.edge.transport.ws_server import EdgeServer

EXIT_USAGE = 2
#: The long-running commands, and the process name each one logs as.
PROCESS_NAMES = {"acp": "acp", "serve": "serve", "session-service": "session",
                 "lifecycle-service": "lifecycle", "edge": "edge", "agent": "agent",
                 "bridge": "bridge"}


def _fail(message: str) -> int:
    print(f"acpgate: {message}", file=sys.stderr)
    return EXIT_USAGE


def _load(args: argparse.Namespace, overrides: dict[str, Any] | None = None) -> Config:
    config_dir = config_mod.resolve_config_dir(getattr(args, "config_dir", None))
    return config_mod.load_config(config_dir, overrides=overrides)


def _run_async(factory: Callable[[], Coroutine[Any, Any, int]], process: str) -> int:
    """Run the command's coroutine on ``process``'s event loop (services.common.event_loop)."""
    try:
        return event_loop.run(factory(), process=process)
    except KeyboardInterrupt:
        return 130


def _cmd_config(args: argparse.Namespace) -> int:
    config_dir = config_mod.resolve_config_dir(args.config_dir)
    if args.config_command == "set":
        # A first `config set` on a fresh dir starts from the working default
        # (one demo agent), not from an empty file that dispatches nothing.
        config_mod.ensure_default_config(config_dir)
        try:
            before: Config | None = config_mod.load_config(config_dir)
        except ConfigError:
            before = None  # the edit may be what repairs it
        value = config_mod.set_value(config_dir, args.key, args.value)
        print(f"{args.key} = {value!r}")
        from acpgate.ops.reload_notify import after_set  # the running processes reload

        for line in after_set(before, config_mod.load_config(config_dir), args.key):
            print(line)
        return 0
    cfg = config_mod.load_config(config_dir)
    if args.config_command == "get":
        value = config_mod.get_value(cfg, args.key)
        if isinstance(value, tuple):
            value = list(value)
        print(value if isinstance(value, str) else repr(value))
        return 0
    if args.config_command == "show":
        print(config_mod.show(cfg), end="")
        return 0
    return _fail("config needs an action: set, get or show")


def _cmd_token(args: argparse.Namespace) -> int:
    from services.edge import tokens

    cfg = _load(args)
    store = tokens.TokenStore(tokens.token_db_path(cfg))
    try:
        return _token_action(store, args)
    except tokens.UnknownGrant as exc:
        return _fail(str(exc))


def _token_action(store: TokenStore, args: argparse.Namespace) -> int:
    """One ``acpgate token`` action on ``store``."""
    if args.token_command == "create":
        from services.edge.tokens import GRANT_HOST

        wanted = [*args.grant, *([GRANT_HOST] if args.admin else [])]
        token_id, secret = store.create(args.name, list(dict.fromkeys(wanted)))
        print(secret)
        print(f"token id: {token_id} (the token above is shown only once)", file=sys.stderr)
        return 0
    if args.token_command == "list":
        for info in store.list():
            state = "revoked" if info.revoked else "active"
            grants = ",".join(info.grants) or "-"
            print(f"{info.token_id}\t{state}\t{info.name}\t{info.created_at}\t{grants}")
        return 0
    if args.token_command == "revoke":
        if not store.revoke(args.token_id):
            return _fail(f"no token with id {args.token_id!r}")
        print(f"revoked {args.token_id}")
        return 0
    if args.token_command in ("grant", "revoke-grant"):
        change = store.grant if args.token_command == "grant" else store.revoke_grant
        if not change(args.token_id, args.grant):
            return _fail(f"no token with id {args.token_id!r}")
        print(f"{args.token_command} {args.grant} {args.token_id}")
        return 0
    return _fail("token needs an action: create, list, revoke, grant or revoke-grant")


def _start_logs(cfg: Config, command: str, worker: int = 0) -> None:
    """The long-running ``command``'s logs as ``[logging]`` and the environment say
    (services.common.log_output); the bridge writes a file only when one is named. An
    edge worker's lines name it (``"process": "edge-2"``)."""
    start_logging(plan_logging(cfg, _process(command, worker),
                               file_by_default=command != "bridge"))


def _process(command: str, worker: int = 0) -> str:
    return PROCESS_NAMES[command] + (f"-{worker}" if worker else "")


def _live(cfg: Config, command: str, worker: int = 0,
          overrides: dict[str, Any] | None = None) -> LiveConfig:
    """What SIGHUP reloads in ``command``'s process: ``cfg`` read again with the same
    flags, and its log output (acpgate.reloading)."""
    from acpgate.reloading import live_config

    return live_config(cfg, _process(command, worker), overrides)


def _run_bridge(args: argparse.Namespace) -> int:
    from services.edge.transport.bridge import run_bridge

    config_dir = config_mod.resolve_config_dir(args.config_dir)
    try:  # the bridge reports a missing or bad config itself (exit 2)
        cfg = config_mod.load_config(config_dir)
        _start_logs(cfg, "bridge")
        log_startup(cfg, "bridge", serves="ACP on stdio",
                    gateway=gateway_url(cfg, cfg.gateway.port))
    except ConfigError:
        pass
    return _run_async(lambda: run_bridge(config_dir), "bridge")


def _run_acp(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {}
    if args.max_sessions is not None:
        overrides["acp.max_sessions"] = args.max_sessions
    if args.session_timeout is not None:
        overrides["acp.session_timeout_secs"] = args.session_timeout
    cfg = _load(args, overrides)
    _start_logs(cfg, "acp")
    from acpgate.embedded import start_embedded
    from services.edge.transport.stdio import run_stdio

    live = _live(cfg, "acp", overrides=overrides)

    async def start_services(c: Config) -> EmbeddedServices:
        services = await start_embedded(c, live)
        log_startup(c, "acp", serves="ACP on stdio", session_addr=services.session_addr,
                    lifecycle_addr=services.lifecycle_addr)
        return services

    return _run_async(lambda: run_stdio(cfg, version=__version__,
                                        start_services=start_services, live=live), "acp")


def _run_service(command: str, cfg: Config, args: argparse.Namespace) -> int:
    """One of the long-running services, its logs started and its startup line written."""
    from services.common.addresses import default_lifecycle_address, default_session_address

    worker = getattr(args, "worker", 0) if command == "edge" else 0
    if worker < 0:
        return _fail(f"--worker {worker}: expected a positive worker number")
    _start_logs(cfg, command, worker)
    if command == "serve":
        from acpgate.serve import run_serve

        def serving(supervisor: Supervisor) -> None:
            log_startup(cfg, "serve", gateway=gateway_url(cfg, supervisor.port),
                        session_addr=default_session_address(cfg),
                        lifecycle_addr=default_lifecycle_address(cfg))

        return _run_async(lambda: run_serve(cfg, on_ready=serving, live=_live(cfg, command),
                                            replace=args.replace), "serve")
    if command == "session-service":
        from services.session.api.server import run_session_service

        log_startup(cfg, "session", address=default_session_address(cfg))
        return _run_async(lambda: run_session_service(
            cfg, _live(cfg, command), host_instance=args.host_instance), "session")
    if command == "lifecycle-service":
        from services.lifecycle.api.server import run_lifecycle_service

        log_startup(cfg, "lifecycle", address=default_lifecycle_address(cfg))
        return _run_async(lambda: run_lifecycle_service(cfg, slot_fd=args.slot_fd,
                                                        live=_live(cfg, command)),
                          "lifecycle")
    if command == "edge":
        # Before gRPC is imported and starts its threads: M_ARENA_MAX binds only later arenas.
        tuned = tune_malloc(EDGE_MALLOC)
        from services.edge.transport.gateway import run_edge

        get_logger("edge").info("malloc_tuned", options=tuned)

        def listening(server: EdgeServer) -> None:
            if not args.listen_fd:  # bound here, not by serve (which names the URLs itself)
                get_logger("edge").info("serving", **served_urls(cfg, server.port))
            log_startup(cfg, f"edge-{worker}" if worker else "edge",
                        gateway=gateway_url(cfg, server.port),
                        session_addr=default_session_address(cfg),
                        lifecycle_addr=default_lifecycle_address(cfg))

        return _run_async(lambda: run_edge(cfg, version=__version__, ready=listening,
                                           listen_fds=args.listen_fd, worker=worker,
                                           board_fd=args.board_fd,
                                           live=_live(cfg, command, worker)),
                          "edge")
    if command == "agent":
        from services.agent.main import run_agent_stdio
        from services.session.decisions.policy import policy_for

        log_startup(cfg, "agent", serves="ACP on stdio", alias=args.alias)
        # Standalone (an editor launches it directly): no edge sends each session's
        # policy, so the agent applies the session service's decision to the cwd.
        return _run_async(lambda: run_agent_stdio(cfg, args.alias, version=__version__,
                                                  local_policy=policy_for), "agent")
    return _fail(f"unknown command {command!r}")  # pragma: no cover - argparse guards this


def _cmd_ops(args: argparse.Namespace) -> int:
    """``acpgate ps``, ``sessions``, ``store``, ``doctor``: an operator's look at the install."""
    if args.command == "doctor":
        from acpgate.ops.doctor import run_doctor

        config_dir = config_mod.resolve_config_dir(args.config_dir)
        return _run_async(lambda: run_doctor(config_dir, as_json_out=args.json), "cli")
    cfg = _load(args)
    if args.command == "store":
        if not args.store_command:
            return _fail("store needs an action: check or repair")
        from acpgate.ops.store_cmd import run_store
        from services.session.store.unusable import with_config_dir

        flag = with_config_dir("", str(cfg.config_dir)) \
            if cfg.config_dir != config_mod.resolve_config_dir(None, {}) else ""
        return _run_async(lambda: run_store(cfg, args.store_command, config_flag=flag,
                                            as_json_out=args.json), "cli")
    if args.command == "ps":
        from acpgate.ops.ps_cmd import run_ps

        return _run_async(lambda: run_ps(cfg, with_leases=args.leases, as_json_out=args.json),
                          "cli")
    if not args.sessions_command:
        return _fail("sessions needs an action: list, show or delete")
    from acpgate.ops.sessions_cmd import run_sessions

    return _run_async(lambda: run_sessions(
        cfg, args.sessions_command, session_id=getattr(args, "session_id", ""),
        limit=getattr(args, "limit", 50), query=getattr(args, "query", ""),
        as_json_out=getattr(args, "json", False)), "cli")


def _cmd_agents(args: argparse.Namespace) -> int:
    """``acpgate agents add | list | search`` (acpgate.ops.agents_cmd)."""
    from acpgate.ops import agents_cmd
    from acpgate.ops.registry import RegistryError

    config_dir = config_mod.resolve_config_dir(args.config_dir)
    try:
        if args.agents_command == "add":
            return agents_cmd.add_agent(config_dir, args.agent_id, alias=args.alias,
                                        registry=args.registry, via=args.via, force=args.force)
        if args.agents_command == "search":
            return agents_cmd.search_registry(args.text, registry=args.registry)
        if args.agents_command == "list":
            return agents_cmd.list_agents(config_mod.load_config(config_dir))
    except RegistryError as exc:
        return _fail(str(exc))
    return _fail("agents needs an action: add, list or search")


def dispatch(args: argparse.Namespace) -> int:
    """Run one parsed sub-command and return its exit code."""
    command = args.command
    if command in ("ps", "sessions", "store", "doctor"):
        return _cmd_ops(args)
    if command == "config":
        return _cmd_config(args)
    if command == "token":
        return _cmd_token(args)
    if command == "agents":
        return _cmd_agents(args)
    if command == "bridge":
        return _run_bridge(args)
    if command in ("acp", "serve", "agent"):
        # First run: a working default (one built-in agent on the offline demo model).
        config_mod.ensure_default_config(config_mod.resolve_config_dir(args.config_dir))
    if command == "acp":
        return _run_acp(args)
    if command in ("serve", "edge"):
        apply_listen_flags(args)  # before the config is loaded: it and the children see them
    return _run_service(command, _load(args), args)


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    # Until a long-running command reads its [logging]: stderr, warnings unless asked.
    setup_logging(os.environ.get(ENV_LOG_LEVEL) or "warning")
    try:
        return dispatch(args)
    except ConfigError as exc:
        return _fail(str(exc))
    except BrokenPipeError:
        return 0

