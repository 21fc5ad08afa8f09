"""SPEC §12: the agent's one enforcement of the session policy (services/agent/enforce.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.agent.enforce import (
    PolicyViolation,
    check_read,
    check_write,
    may_read,
    may_run_shell,
    may_write,
    needs_approval,
)
from services.common.policy import SecurityPolicy


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A session workspace with one file."""
    d = tmp_path / "ws"
    d.mkdir()
    (d / "a.txt").write_text("a")
    return d


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside every root, with one file."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("s")
    return d


def _pol(ws: Path, **kw: object) -> SecurityPolicy:
    return SecurityPolicy(workspace_dir=str(ws), **kw)  # type: ignore[arg-type]


def test_spec12_inside_workspace_relative_and_absolute(ws: Path) -> None:
    """SPEC §12: files inside the workspace are readable, relative paths are workspace-relative."""
    p = _pol(ws)
    assert check_read(p, "a.txt") == ws / "a.txt"
    assert check_read(p, str(ws / "a.txt")) == ws / "a.txt"
    assert check_read(p, ".") == ws
    assert check_write(p, "new/dir/file.txt") == ws / "new" / "dir" / "file.txt"


@pytest.mark.parametrize(
    "raw",
    [
        "../outside/secret.txt",
        "sub/../../outside",
        "..",
        "a/..",
        "..\\outside",
        "%2e%2e/outside",
        "%2E%2E/outside",
        "..%2foutside",
        "a%2f..%2f..%2foutside",
        "%252e%252e/outside",
        "a.txt%00.png",
        "a.txt\x00",
        "~root/.bashrc",
        "~nobody",
        "",
    ],
)
def test_spec12_traversal_rejected(ws: Path, raw: str) -> None:
    """SPEC §12: NUL, `..` components, `~user` and percent-encoded traversal are refused."""
    p = _pol(ws, workspace_only=False, autonomy="full")
    with pytest.raises(PolicyViolation):
        check_read(p, raw)
    assert not may_read(p, raw)
    assert not may_write(p, raw)


def test_spec12_harmless_percent_and_dots_allowed(ws: Path) -> None:
    """Names with a literal `%20` or dots that are not `..` components are fine."""
    p = _pol(ws)
    assert may_write(p, "a%20b.txt")
    assert may_write(p, "..hidden")
    assert may_write(p, "x..y/z")


def test_spec12_outside_refused_when_workspace_only(ws: Path, outside: Path) -> None:
    """SPEC §12: paths outside the roots are refused unless workspace_only is off (full)."""
    p = _pol(ws)
    with pytest.raises(PolicyViolation, match="outside the session workspace"):
        check_read(p, str(outside / "secret.txt"))
    full = _pol(ws, autonomy="full", workspace_only=False)
    assert check_read(full, str(outside / "secret.txt")) == outside / "secret.txt"


def test_spec12_symlink_escape_inside_to_outside(ws: Path, outside: Path) -> None:
    """SPEC §12: a symlink inside the workspace pointing outside is an escape (read and write)."""
    (ws / "link").symlink_to(outside)
    (ws / "filelink").symlink_to(outside / "secret.txt")
    (ws / "dangling").symlink_to(outside / "not-yet.txt")
    p = _pol(ws)
    with pytest.raises(PolicyViolation, match="symlink"):
        check_read(p, "link/secret.txt")
    with pytest.raises(PolicyViolation, match="symlink"):
        check_read(p, "filelink")
    # A not-yet-existing target under a symlinked parent resolves via that parent.
    with pytest.raises(PolicyViolation):
        check_write(p, "link/new/deeper/file.txt")
    # A dangling symlink as the write target resolves to where the write would land.
    with pytest.raises(PolicyViolation):
        check_write(p, "dangling")


def test_spec12_symlink_inside_to_inside_ok(ws: Path) -> None:
    """A symlink that stays inside the workspace is fine and resolves to its real path."""
    (ws / "sub").mkdir()
    (ws / "inner").symlink_to(ws / "sub")
    p = _pol(ws)
    assert check_write(p, "inner/f.txt") == ws / "sub" / "f.txt"


def test_spec12_symlinked_workspace_itself(tmp_path: Path, ws: Path) -> None:
    """A workspace reached through a symlink still contains its own files."""
    alias = tmp_path / "ws-alias"
    alias.symlink_to(ws)
    p = SecurityPolicy(workspace_dir=str(alias))
    assert check_read(p, "a.txt") == ws / "a.txt"


def test_spec12_forbidden_beats_everything_but_roots(tmp_path: Path, ws: Path) -> None:
    """SPEC §12: forbidden paths win, even in full mode — except inside an allowed root."""
    forbidden = tmp_path / "forbidden"
    (forbidden / "agentws").mkdir(parents=True)
    (forbidden / "other").mkdir()
    full = _pol(
        ws,
        allowed_roots=(str(forbidden / "agentws"),),
        forbidden_paths=(str(forbidden),),
        autonomy="full",
        workspace_only=False,
    )
    with pytest.raises(PolicyViolation, match="forbidden"):
        check_read(full, str(forbidden / "other" / "x"))
    with pytest.raises(PolicyViolation, match="forbidden"):
        check_read(full, str(forbidden))
    # The allowed root inside the forbidden tree wins.
    assert may_write(full, str(forbidden / "agentws" / "IDENTITY.md"))
    # A workspace inside a forbidden path wins too.
    inside = _pol(forbidden / "other", forbidden_paths=(str(forbidden),))
    assert may_write(inside, "file.txt")
    # A symlink from the workspace into the forbidden tree is refused even in full mode.
    (ws / "to-forbidden").symlink_to(forbidden / "other")
    assert not may_read(full, "to-forbidden/x")
    # Prefix match is per component: "forbidden2" is not under "forbidden".
    (tmp_path / "forbidden2").mkdir()
    assert may_read(full, str(tmp_path / "forbidden2"))


def test_a_root_never_reaches_a_forbidden_path_inside_it(tmp_path: Path) -> None:
    """A root containing the data dir (or ~/.ssh) still does not reach it."""
    root = tmp_path / "project"
    data = root / "cfg" / "data"
    agent_ws = root / "cfg" / "agents" / "a" / "workspace"
    for d in (data, agent_ws, root / "src"):
        d.mkdir(parents=True)
    p = _pol(root, allowed_roots=(str(agent_ws),),
             forbidden_paths=(str(data), str(root / "cfg"), "secrets"),
             autonomy="full", workspace_only=False)
    for path in (str(data / "sessions" / "acp-sessions.db"), "cfg/data/gateway/tokens.db",
                 "cfg/config.toml", "secrets/key", str(root / "cfg")):
        with pytest.raises(PolicyViolation, match="forbidden"):
            check_read(p, path)
        assert not may_write(p, path)
    assert may_write(p, "src/main.py")
    # A root inside the forbidden tree (the agent workspace in the config dir) still wins.
    assert may_write(p, str(agent_ws / "IDENTITY.md"))
    # A symlink the session makes into the forbidden tree does not help either.
    (root / "src" / "peek").symlink_to(data)
    assert not may_read(p, "src/peek/x")


def test_spec12_forbidden_tilde_expands_to_home(
    tmp_path: Path, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`~` in forbidden paths is the home dir; `~/x` in tool paths expands too."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    p = _pol(ws, forbidden_paths=("~/.ssh",), autonomy="full", workspace_only=False)
    assert not may_read(p, "~/.ssh/id_rsa")
    assert not may_read(p, str(home / ".ssh" / "id_rsa"))
    assert may_read(p, "~/notes.txt")
    assert check_read(p, "~") == home


def test_spec12_allowed_roots_extend_workspace(tmp_path: Path, ws: Path) -> None:
    """SPEC §12: allowed_roots (the agent workspace) are reachable besides the workspace."""
    agent_ws = tmp_path / "agent"
    agent_ws.mkdir()
    p = _pol(ws, allowed_roots=(str(agent_ws),))
    assert check_read(p, str(agent_ws / "SOUL.md")) == agent_ws / "SOUL.md"


def test_spec12_readonly_no_writes_no_shell(ws: Path) -> None:
    """SPEC §12: readonly refuses writes and the shell but still reads."""
    p = _pol(ws, autonomy="readonly")
    assert may_read(p, "a.txt")
    assert not may_write(p, "a.txt")
    with pytest.raises(PolicyViolation, match="readonly"):
        check_write(p, "b.txt")
    assert not may_run_shell(p)
    assert may_run_shell(_pol(ws))
    assert may_run_shell(_pol(ws, autonomy="full", workspace_only=False))


def test_spec12_needs_approval() -> None:
    """SPEC §12: supervised asks for tools outside auto_approve, and always for always_ask."""
    p = SecurityPolicy(
        workspace_dir="/w", auto_approve=("file_read", "glob"), always_ask=("glob",)
    )
    assert not needs_approval(p, "file_read")
    assert needs_approval(p, "glob")
    assert needs_approval(p, "shell")
    full = SecurityPolicy(workspace_dir="/w", autonomy="full", workspace_only=False)
    assert not needs_approval(full, "shell")


def test_approval_patterns_match_mcp_tool_names() -> None:
    """Auto_approve/always_ask are patterns over ``<server>__<tool>`` names."""
    p = SecurityPolicy(workspace_dir="/w", auto_approve=("docs__*", "file_read"),
                       always_ask=("docs__delete*",))
    assert not needs_approval(p, "docs__search")
    assert needs_approval(p, "docs__delete_page")
    assert needs_approval(p, "other__search")
    assert needs_approval(p, "Docs__search")  # case-sensitive, like tool names
    assert needs_approval(p, "file_read_extra")  # a plain name matches only itself


# ------------------------------------------------------------------ property: no escape

_segments = st.sampled_from(
    ["a", "sub", "link", "..", ".", "%2e%2e", "%2f", "~", "~root", "a\x00b", "", "x%2E%2e",
     "%252e%252e", "out"]
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(_segments, min_size=1, max_size=5), absolute=st.booleans())
def test_spec12_property_never_outside_roots(
    tmp_path: Path, parts: list[str], absolute: bool
) -> None:
    """SPEC §12 property: whatever the path, an allowed one resolves inside the roots."""
    ws = tmp_path / "pws"
    if not ws.exists():
        (ws / "sub").mkdir(parents=True)
        (tmp_path / "pout").mkdir()
        (ws / "link").symlink_to(tmp_path / "pout")
    p = SecurityPolicy(workspace_dir=str(ws))
    raw = "/".join(parts)
    if absolute:
        raw = str(ws) + "/" + raw
    for check in (check_read, check_write):
        try:
            real = check(p, raw)
        except PolicyViolation:
            continue
        assert real == ws or ws in real.parents, raw
