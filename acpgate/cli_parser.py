"""The ``acpgate`` argument parser: every sub-command, its flags and their help."""

from __future__ import annotations

import argparse

from acpgate import __version__
from acpgate.listen_flags import add_listen_flags

__all__ = ["build_parser"]


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


def _add_agents(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``acpgate agents add | list | search``."""
    agents = sub.add_parser("agents", help="the configured agents; add one from the ACP "
                                           "Registry")
    _add_config_dir(agents)
    agents_sub = agents.add_subparsers(dest="agents_command", metavar="ACTION")
    add = agents_sub.add_parser("add", help="write [agents.<alias>] for registry agent ID "
                                            "(installs nothing)")
    add.add_argument("agent_id", metavar="ID", help="the agent's id in the registry "
                                                    "(acpgate agents search)")
    add.add_argument("--alias", default="", metavar="NAME", help="the section's name "
                                                                 "(default: the id)")
    add.add_argument("--force", action="store_true",
                     help="replace an existing [agents.<alias>]")
    add.add_argument("--via", choices=("npx", "uvx", "binary"), default="",
                     help="which of the manifest's distributions (default: the first of "
                          "npx, uvx, binary it offers)")
    search = agents_sub.add_parser("search", help="what the ACP Registry offers")
    search.add_argument("text", nargs="?", default="", metavar="TEXT",
                        help="only agents whose id, name or description contains TEXT")
    for p in (add, search):
        p.add_argument("--registry", metavar="FILE", default=None,
                       help="a registry.json (or one agent.json) file or https URL "
                            "(default: the public ACP Registry)")
    list_p = agents_sub.add_parser("list", help="the configured agents (* the default)")
    for p in (add, search, list_p):
        _add_config_dir(p, nested=True)


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

    serve = sub.add_parser(
        "serve", help="session service + lifecycle service + WebSocket edge, supervised")
    _add_config_dir(serve)
    add_listen_flags(serve)
    serve.add_argument("--replace", action="store_true",
                       help="hot restart: take over the listening port and the live sessions "
                            "of the serve running on this data dir, which then exits "
                            "(none running: start as usual)")
    session = sub.add_parser("session-service", help="run the session service alone")
    _add_config_dir(session)
    session.add_argument("--host-instance", metavar="ID", default="",
                         help="the gateway instance id of the host served (acpgate serve "
                              "passes it): its liveness is held in a PostgreSQL store")
    _add_config_dir(sub.add_parser("bridge", help="stdio <-> gateway WebSocket bridge"))
    lifecycle = sub.add_parser("lifecycle-service", help="run the lifecycle service alone")
    _add_config_dir(lifecycle)
    lifecycle.add_argument("--slot-fd", type=int, metavar="FD", default=None,
                           help="the locked instance slot inherited from acpgate serve "
                                "(default: take the lowest free slot)")
    edge = sub.add_parser("edge", help="run the WebSocket edge alone")
    _add_config_dir(edge)
    add_listen_flags(edge)
    edge.add_argument("--listen-fd", type=int, metavar="FD", action="append", default=[],
                      help="a listening socket inherited from acpgate serve (repeatable; "
                           "default: bind [gateway] host and port)")
    edge.add_argument("--worker", type=int, metavar="N", default=0,
                      help="this edge is worker N of several on one port (acpgate serve "
                           "with [gateway] workers > 1): its limits, counters and sessions' "
                           "claims are shared through the session service")
    edge.add_argument("--board-fd", type=int, metavar="FD", default=None,
                      help="the edge workers' board inherited from acpgate serve: each worker "
                           "says there that it serves, and how many connections it holds")

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
                             "other tokens' sessions; host: the console's host view); "
                             "repeatable")
    create.add_argument("--admin", action="store_true",
                        help="an operator's token: the host grant (the web console's host "
                             "page: every live session, its processes, close and cancel)")
    list_p = tok_sub.add_parser("list", help="list tokens (ids, labels and grants, never the "
                                             "secret)")
    revoke = tok_sub.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("token_id")
    grant = tok_sub.add_parser("grant", help="give a token an operator grant (see-all, host)")
    revoke_grant = tok_sub.add_parser("revoke-grant", help="take an operator grant from a token")
    for p in (grant, revoke_grant):
        p.add_argument("token_id")
        p.add_argument("grant", metavar="GRANT")
    for p in (create, list_p, revoke, grant, revoke_grant):
        _add_config_dir(p, nested=True)

    ps = sub.add_parser("ps", help="the live sessions of this install: agent, owner, state, "
                                   "processes (PID, RSS, CPU), lease")
    _add_config_dir(ps)
    ps.add_argument("--leases", action="store_true", help="also every live lease, warm ones too")
    ps.add_argument("--json", action="store_true", help="print JSON")

    sessions = sub.add_parser("sessions", help="the stored sessions: list, show, delete")
    _add_config_dir(sessions)
    sessions_sub = sessions.add_subparsers(dest="sessions_command", metavar="ACTION")
    s_list = sessions_sub.add_parser("list", help="stored sessions, newest activity first")
    s_list.add_argument("--limit", type=int, default=50, metavar="N", help="at most N (50)")
    s_list.add_argument("--query", default="", metavar="TEXT",
                        help="only those whose id, agent or title contains TEXT")
    s_show = sessions_sub.add_parser("show", help="a session and its whole history")
    s_delete = sessions_sub.add_parser("delete", help="delete a stored session (not one being "
                                                      "served) and its history")
    for p in (s_show, s_delete):
        p.add_argument("session_id", metavar="ID")
    for p in (s_list, s_show):
        p.add_argument("--json", action="store_true", help="print JSON")
    for p in (s_list, s_show, s_delete):
        _add_config_dir(p, nested=True)

    _add_agents(sub)

    store = sub.add_parser("store", help="the session store: check it, repair a damaged one")
    _add_config_dir(store)
    store_sub = store.add_subparsers(dest="store_command", metavar="ACTION")
    st_check = store_sub.add_parser("check", help="integrity and schema version of the store "
                                                  "(read-only; exit 1 when acpgate cannot "
                                                  "start on it)")
    st_repair = store_sub.add_parser("repair", help="move a damaged store aside and recover "
                                                    "what it still holds into a fresh one "
                                                    "(stop acpgate first)")
    for p in (st_check, st_repair):
        p.add_argument("--json", action="store_true", help="print JSON")
        _add_config_dir(p, nested=True)

    doctor = sub.add_parser("doctor", help="check this install: config, permissions, ports, "
                                           "services, store, agents, keys, sandbox")
    _add_config_dir(doctor)
    doctor.add_argument("--json", action="store_true", help="print JSON")
    return parser
