"""SPEC §3 alias chain and cwd rules, SPEC §8 restore chain, launch specs."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from services.common.config import AcpSection, AgentSection, Config
from services.common.protocol import MSG_AGENT_DISABLED, MSG_ALIAS_REQUIRED, MSG_UNKNOWN_AGENT
from services.session.decisions.aliases import (
    AliasError,
    launch_spec,
    resolve_alias,
    resolve_restore_alias,
)
from services.session.decisions.workspace import WorkspaceError, resolve_workspace


def _builtin(alias: str, **kw: object) -> AgentSection:
    return AgentSection(alias=alias, kind="builtin", provider="demo", model="demo", **kw)  # type: ignore[arg-type]


def _cfg(tmp_path: Path, default: str = "", **agents: AgentSection) -> Config:
    return Config(config_dir=tmp_path / "cfg", acp=AcpSection(default_agent=default),
                  agents=agents)


# ------------------------------------------------------------------ §3 alias chain


def test_spec3_alias_chain_order(tmp_path: Path) -> None:
    """SPEC §3: explicit → connection default → [acp] default_agent → sole agent."""
    cfg = _cfg(tmp_path, "c", a=_builtin("a"), b=_builtin("b"), c=_builtin("c"))
    assert resolve_alias(cfg, " a ", "b") == "a"
    assert resolve_alias(cfg, "  ", "b") == "b"
    assert resolve_alias(cfg, "", " ") == "c"
    sole = _cfg(tmp_path, solo=_builtin("solo"))
    assert resolve_alias(sole) == "solo"


def test_spec3_alias_required_message(tmp_path: Path) -> None:
    """SPEC §3: nothing yields an alias (no default, several agents) → the exact message."""
    cfg = _cfg(tmp_path, a=_builtin("a"), b=_builtin("b"))
    with pytest.raises(AliasError) as exc:
        resolve_alias(cfg)
    assert str(exc.value) == (
        "session/new requires `agentAlias` (alias of a configured [agents.<alias>] entry)"
    )
    with pytest.raises(AliasError, match="requires"):
        resolve_alias(_cfg(tmp_path))


def test_spec3_unknown_and_disabled_messages(tmp_path: Path) -> None:
    """SPEC §3: unknown alias and disabled/incomplete alias messages, whichever step chose it."""
    cfg = _cfg(
        tmp_path, "ghost",
        off=_builtin("off", enabled=False),
        half=AgentSection(alias="half", kind="builtin", provider="demo"),
        acpnocmd=AgentSection(alias="acpnocmd", kind="acp"),
    )
    with pytest.raises(AliasError) as exc:
        resolve_alias(cfg, "nope")
    assert str(exc.value) == "Unknown agent `nope` — no [agents.nope] entry configured"
    with pytest.raises(AliasError) as exc:
        resolve_alias(cfg)  # default_agent names a missing entry
    assert str(exc.value) == MSG_UNKNOWN_AGENT.format(alias="ghost")
    for alias in ("off", "half", "acpnocmd"):
        with pytest.raises(AliasError) as exc:
            resolve_alias(cfg, "", alias)
        assert str(exc.value) == f"Agent `{alias}` is not enabled for dispatch"


# ------------------------------------------------------------------ §8 restore chain


def test_spec8_restore_chain(tmp_path: Path) -> None:
    """SPEC §8: stored alias if dispatchable, else default_agent, else the sole agent."""
    cfg = _cfg(tmp_path, "dflt", stored=_builtin("stored"), dflt=_builtin("dflt"),
               off=_builtin("off", enabled=False))
    assert resolve_restore_alias(cfg, "stored") == "stored"
    assert resolve_restore_alias(cfg, "off") == "dflt"
    assert resolve_restore_alias(cfg, "gone") == "dflt"
    assert resolve_restore_alias(cfg, "") == "dflt"
    sole = _cfg(tmp_path, only=_builtin("only"))
    assert resolve_restore_alias(sole, "gone") == "only"
    # Default agent disabled is skipped too.
    skip = _cfg(tmp_path, "off", off=_builtin("off", enabled=False), other=_builtin("other"))
    with pytest.raises(AliasError) as exc:
        resolve_restore_alias(skip, "off")
    assert str(exc.value) == MSG_AGENT_DISABLED.format(alias="off")
    with pytest.raises(AliasError) as exc:
        resolve_restore_alias(skip, "gone")
    assert str(exc.value) == MSG_UNKNOWN_AGENT.format(alias="gone")
    with pytest.raises(AliasError) as exc:
        resolve_restore_alias(skip, "")
    assert str(exc.value) == MSG_ALIAS_REQUIRED


# ------------------------------------------------------------------ launch specs


async def test_launch_builtin_and_acp(tmp_path: Path) -> None:
    """Builtin agents run `python -m services.agent`; acp agents their configured command."""
    cfg = _cfg(
        tmp_path,
        bi=_builtin("bi", autonomy="readonly", env={"X": "1"}),
        ext=AgentSection(alias="ext", kind="acp", command="claude-agent-acp",
                         args=("--flag",), env={"K": "v"}, workspace=str(tmp_path / "extws")),
    )
    bi = await launch_spec(cfg, "bi")
    assert bi.command == sys.executable
    # Isolated mode: the session's cwd and PYTHON* variables never pick the code.
    assert bi.args == ("-I", "-m", "services.agent", "--config-dir", str(cfg.config_dir),
                       "--alias", "bi")
    assert bi.kind == "builtin" and bi.autonomy == "readonly" and bi.default_model == "demo/demo"
    ws = cfg.config_dir / "agents" / "bi" / "workspace"
    assert ws.is_dir() and bi.agent_workspace == str(ws.resolve())
    ext = await launch_spec(cfg, "ext")
    assert (ext.command, ext.args, dict(ext.env)) == ("claude-agent-acp", ("--flag",), {"K": "v"})
    assert ext.default_model == "" and ext.autonomy == "supervised"
    assert (tmp_path / "extws").is_dir()
    with pytest.raises(AliasError):
        await launch_spec(cfg, "missing")


# ------------------------------------------------------------------ §3 cwd rules


@pytest.fixture
def cfg(tmp_path: Path) -> Config:
    c = _cfg(tmp_path, a=_builtin("a"))
    c.config_dir.mkdir(parents=True)
    return c


async def test_spec3_cwd_omitted_is_agent_workspace(cfg: Config) -> None:
    """SPEC §3: omitted cwd → the agent workspace (created), never the daemon's start dir."""
    info = await resolve_workspace(cfg, "a", "", base_dir="/")
    ws = (cfg.config_dir / "agents" / "a" / "workspace").resolve()
    assert info.workspace_dir == str(ws) and info.is_agent_workspace
    assert ws.is_dir()
    assert info.workspace_dir != os.getcwd()


async def test_spec3_dot_placeholder_is_agent_workspace(cfg: Config) -> None:
    """SPEC §3: `.` resolving to the install root (config dir) → the agent workspace."""
    info = await resolve_workspace(cfg, "a", ".", base_dir=str(cfg.config_dir))
    assert info.is_agent_workspace
    assert info.workspace_dir == str((cfg.config_dir / "agents" / "a" / "workspace").resolve())
    # The install root reached by another spelling (a symlink) is the same placeholder.
    link = cfg.config_dir.parent / "cfg-link"
    link.symlink_to(cfg.config_dir)
    info = await resolve_workspace(cfg, "a", str(link))
    assert info.is_agent_workspace


async def test_spec3_explicit_cwd_real_path_never_widened(cfg: Config, tmp_path: Path) -> None:
    """SPEC §3: explicit cwd → its exact real path (symlinks and `..` resolved, relative to
    the caller's base dir)."""
    proj = tmp_path / "proj"
    (proj / "sub").mkdir(parents=True)
    link = tmp_path / "proj-link"
    link.symlink_to(proj)
    info = await resolve_workspace(cfg, "a", str(link / "sub" / ".." / "sub"))
    assert info.workspace_dir == str((proj / "sub").resolve())
    assert not info.is_agent_workspace
    rel = await resolve_workspace(cfg, "a", "sub", base_dir=str(proj))
    assert rel.workspace_dir == str((proj / "sub").resolve())
    # A subdirectory of the install root is not the placeholder either: it is acpgate's
    # own state, refused unless [autonomy] allow_cwd names it, and then exact.
    inner = cfg.config_dir / "inner"
    inner.mkdir()
    with pytest.raises(WorkspaceError, match="lies inside acpgate's own state"):
        await resolve_workspace(cfg, "a", str(inner))
    opted_in = replace(cfg, autonomy=replace(cfg.autonomy, allow_cwd=(str(inner),)))
    assert (await resolve_workspace(opted_in, "a", str(inner))).workspace_dir == \
        str(inner.resolve())


async def test_spec3_cwd_that_is_a_file(cfg: Config, tmp_path: Path) -> None:
    """SPEC §3: a cwd that is a file → the exact -32602 message."""
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(WorkspaceError) as exc:
        await resolve_workspace(cfg, "a", str(f))
    assert str(exc.value) == f"cwd is not a usable directory ({f}): Not a directory"


async def test_spec3_missing_cwd(cfg: Config, tmp_path: Path) -> None:
    """SPEC §3: a missing cwd → the exact -32602 message, naming the cwd as sent."""
    with pytest.raises(WorkspaceError) as exc:
        await resolve_workspace(cfg, "a", "nope/deeper", base_dir=str(tmp_path))
    assert str(exc.value) == "cwd is not a usable directory (nope/deeper): No such file or directory"
    with pytest.raises(WorkspaceError, match="NUL"):
        await resolve_workspace(cfg, "a", "bad\x00dir")


async def test_spec3_tilde_is_a_relative_path_not_home(cfg: Config, tmp_path: Path) -> None:
    """SPEC §3: a cwd is resolved relative to the caller's directory; `~` is not expanded."""
    with pytest.raises(WorkspaceError) as exc:
        await resolve_workspace(cfg, "a", "~", base_dir=str(tmp_path))
    assert str(exc.value) == "cwd is not a usable directory (~): No such file or directory"
    (tmp_path / "~").mkdir()
    info = await resolve_workspace(cfg, "a", "~", base_dir=str(tmp_path))
    assert info.workspace_dir == str((tmp_path / "~").resolve())
