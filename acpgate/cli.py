"""The ``acpgate`` command line (SPEC §0).

Each sub-command loads the config (flag > env > file > defaults), then hands
over to the one module that owns that job. Imports are lazy so that
``acpgate config get`` does not pay for gRPC, and so a broken optional piece
cannot stop the others. Every expected failure prints one clear line to stderr
and exits 2; nothing here prints a traceback for bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from acpgate import __version__
from services.common import config as config_mod
from services.common import event_loop
from services.common.config import Config, ConfigError
from services.common.logs import get_logger, setup_logging
from services.common.malloc_tuning import EDGE_MALLOC, tune_malloc

if TYPE_CHECKING:
    from services.edge.tokens import TokenStore

EXIT_USAGE = 2


def _add_config_dir(p: argparse.ArgumentParser, *, nested: bool = False) -> None:
    """Accept ``--config-dir DIR`` / ``--config-dir=DIR`` on ``p``.

    ``nested`` parsers (``config set``, ``token create``…) use SUPPRESS as the
    default, so the flag may stand before or after the action without the
    action's parser resetting a value given before it.
    """
    p.add_argument(
        "--config-dir",
        metavar="DIR",
        default=argparse.SUPPRESS if nested else None,
        help="config directory (default: $ACPGATE_CONFIG_DIR, else ~/.acpgate)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every sub-command."""
    parser = argparse.ArgumentParser(
        prog="acpgate",
        description="acpgate — an ACP session host for editors, CI runners and remote clients.",
    )
    parser.add_argument("--version", action="version", version=f"acpgate {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    acp = sub.add_parser("acp", help="ACP over stdio (IDE mode); exits on EOF")
    _add_config_dir(acp)
    acp.add_argument("--max-sessions", type=int, metavar="N", help="override [acp] max_sessions")
    acp.add_argument(
        "--session-timeout", type=int, metavar="SECS", help="override [acp] session_timeout_secs"
    )

    for name, text in (
        ("serve", "session service + lifecycle service + WebSocket edge, supervised"),
        ("session-service", "run the session service alone"),
        ("bridge", "stdio <-> gateway WebSocket bridge"),
    ):
        _add_config_dir(sub.add_parser(name, help=text))
    lifecycle = sub.add_parser("lifecycle-service", help="run the lifecycle service alone")
    _add_config_dir(lifecycle)
    lifecycle.add_argument("--slot-fd", type=int, metavar="FD", default=None,
                           help="the locked instance slot inherited from acpgate serve "
                                "(default: take the lowest free slot)")
    edge = sub.add_parser("edge", help="run the WebSocket edge alone")
    _add_config_dir(edge)
    edge.add_argument("--listen-fd", type=int, metavar="FD", action="append", default=[],
                      help="a listening socket inherited from acpgate serve (repeatable; "
                           "default: bind [gateway] host and port)")

    agent = sub.add_parser("agent", help="the built-in ACP agent on stdio")
    _add_config_dir(agent)
    agent.add_argument("--alias", default="", help="which [agents.<alias>] to run")

    cfg = sub.add_parser("config", help="read or change config.toml")
    _add_config_dir(cfg)
    cfg_sub = cfg.add_subparsers(dest="config_command", metavar="ACTION")
    set_p = cfg_sub.add_parser("set", help="set KEY (dotted, e.g. acp.max_sessions) to VALUE")
    set_p.add_argument("key")
    set_p.add_argument("value")
    get_p = cfg_sub.add_parser("get", help="print the effective value of KEY")
    get_p.add_argument("key")
    show_p = cfg_sub.add_parser("show", help="print the effective config")
    for p in (set_p, get_p, show_p):
        _add_config_dir(p, nested=True)

    tok = sub.add_parser("token", help="gateway bearer tokens")
    _add_config_dir(tok)
    tok_sub = tok.add_subparsers(dest="token_command", metavar="ACTION")
    create = tok_sub.add_parser("create", help="mint a token (printed once)")
    create.add_argument("--name", default="", help="a label to recognise it by")
    create.add_argument("--grant", action="append", default=[], metavar="GRANT",
                        help="an operator grant for the token (see-all: read-only sight of "
                             "other tokens' sessions); repeatable")
    list_p = tok_sub.add_parser("list", help="list tokens (ids, labels and grants, never the "
                                             "secret)")
    revoke = tok_sub.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("token_id")
    grant = tok_sub.add_parser("grant", help="give a token an operator grant (see-all)")
    revoke_grant = tok_sub.add_parser("revoke-grant", help="take an operator grant from a token")
    for p in (grant, revoke_grant):
        p.add_argument("token_id")
        p.add_argument("grant", metavar="GRANT")
    for p in (create, list_p, revoke, grant, revoke_grant):
        _add_config_dir(p, nested=True)
    return parser


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
        value = config_mod.set_value(config_dir, args.key, args.value)
        print(f"{args.key} = {value!r}")
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
        token_id, secret = store.create(args.name, args.grant)
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


def dispatch(args: argparse.Namespace) -> int:
    """Run one parsed sub-command and return its exit code."""
    command = args.command
    if command == "config":
        return _cmd_config(args)
    if command == "token":
        return _cmd_token(args)
    if command == "bridge":
        from services.edge.bridge import run_bridge

        config_dir = config_mod.resolve_config_dir(args.config_dir)
        return _run_async(lambda: run_bridge(config_dir), "bridge")

    if command in ("acp", "serve", "agent"):
        # First run: a working default (one built-in agent on the offline demo model).
        config_mod.ensure_default_config(config_mod.resolve_config_dir(args.config_dir))

    if command == "acp":
        overrides: dict[str, Any] = {}
        if args.max_sessions is not None:
            overrides["acp.max_sessions"] = args.max_sessions
        if args.session_timeout is not None:
            overrides["acp.session_timeout_secs"] = args.session_timeout
        cfg = _load(args, overrides)
        from acpgate.embedded import start_embedded
        from services.edge.stdio import run_stdio

        return _run_async(lambda: run_stdio(cfg, version=__version__,
                                            start_services=start_embedded), "acp")
    cfg = _load(args)
    if command == "serve":
        from acpgate.serve import run_serve

        return _run_async(lambda: run_serve(cfg), "serve")
    if command == "session-service":
        from services.session.server import run_session_service

        return _run_async(lambda: run_session_service(cfg), "session")
    if command == "lifecycle-service":
        from services.lifecycle.server import run_lifecycle_service

        return _run_async(lambda: run_lifecycle_service(cfg, slot_fd=args.slot_fd), "lifecycle")
    if command == "edge":
        # Before gRPC is imported and starts its threads: M_ARENA_MAX binds only later arenas.
        tuned = tune_malloc(EDGE_MALLOC)
        from services.edge.gateway import run_edge

        get_logger("edge").info("malloc_tuned", options=tuned)

        return _run_async(lambda: run_edge(cfg, version=__version__, listen_fds=args.listen_fd),
                          "edge")
    if command == "agent":
        from services.agent.main import run_agent_stdio
        from services.session.policy import policy_for

        # Standalone (an editor launches it directly): no edge sends each session's
        # policy, so the agent applies the session service's decision to the cwd.
        return _run_async(lambda: run_agent_stdio(cfg, args.alias, version=__version__,
                                                  local_policy=policy_for), "agent")
    return _fail(f"unknown command {command!r}")  # pragma: no cover - argparse guards this


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    setup_logging()
    try:
        return dispatch(args)
    except ConfigError as exc:
        return _fail(str(exc))
    except BrokenPipeError:
        return 0

