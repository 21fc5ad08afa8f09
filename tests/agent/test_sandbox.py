"""The shell under Landlock: forbidden paths unreachable however the command spells them.

The bypass these tests pin: the shell's path check sees only the literal text,
so ``cat $(echo <base64> | base64 -d)`` read a forbidden file. With Landlock the
kernel refuses the open itself. The kernel-level tests skip where the kernel has
no Landlock; the plan/rule tests run everywhere.
"""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from typing import Any

import pytest

from services.agent.sandbox import (
    SANDBOX_FAILED_EXIT,
    WRITE_FILE,
    SandboxPlan,
    landlock_abi,
    make_plan,
    rules,
    sandboxed_argv,
)
from services.agent.tools.base import ToolContext
from services.agent.tools.shell import ShellTool
from services.common.policy import SecurityPolicy

needs_landlock = pytest.mark.skipif(landlock_abi() < 1, reason="kernel without Landlock")


class Box:
    """A workspace, an extra allowed root, an outside dir and a forbidden dir with a secret."""

    def __init__(self, tmp: Path) -> None:
        self.ws = tmp / "ws"
        self.root = tmp / "agent-home"
        self.outside = tmp / "outside"
        self.forbidden = tmp / "forbidden"
        for d in (self.ws, self.root, self.outside, self.forbidden):
            d.mkdir()
        (self.outside / "public.txt").write_text("PUBLIC\n")
        (self.forbidden / "key").write_text("PRIVATE-KEY")
        (self.forbidden / "sub").mkdir()
        (self.forbidden / "sub" / "deeper").write_text("DEEP-SECRET")

    def ctx(self, autonomy: str) -> ToolContext:
        policy = SecurityPolicy(workspace_dir=str(self.ws), allowed_roots=(str(self.root),),
                                forbidden_paths=(str(self.forbidden), "/etc"),
                                autonomy=autonomy, workspace_only=autonomy != "full")

        async def send(update: dict[str, Any]) -> None:
            return None

        async def no_client(method: str, params: dict[str, Any], wait: float) -> Any:
            raise AssertionError("no client request expected")

        return ToolContext(session_id="s", policy=policy, send_update=send,
                           client_request=no_client, shell_env=dict(os.environ))


@pytest.fixture
def box(tmp_path: Path) -> Box:
    return Box(tmp_path)


def hidden(path: Path | str) -> str:
    """A command that names ``path`` only in base64 (the literal check cannot see it)."""
    return f"$(echo {base64.b64encode(str(path).encode()).decode()} | base64 -d)"


async def sh(command: str, ctx: ToolContext, tool: ShellTool | None = None) -> str:
    result = await (tool or ShellTool()).run({"command": command}, ctx)
    return result.output


@needs_landlock
async def test_hidden_path_bypass_is_blocked_in_full_autonomy(box: Box) -> None:
    ctx = box.ctx("full")
    # The audit's example, verbatim: /etc is forbidden.
    out = await sh("cat $(echo L2V0Yy9ob3N0bmFtZQ== | base64 -d); echo rc=$?", ctx)
    assert "Permission denied" in out and out.rstrip().endswith("rc=1")
    out = await sh(f"cat {hidden(box.forbidden / 'key')}; echo rc=$?", ctx)
    assert "PRIVATE-KEY" not in out and "rc=1" in out
    # Deeper levels, listing, a child process and a symlink made at run time: all refused.
    out = await sh(f"cat {hidden(box.forbidden / 'sub' / 'deeper')}; "
                   f"ls {hidden(box.forbidden)}; "
                   f"python3 -c 'import sys; print(open(sys.argv[1]).read())' "
                   f"{hidden(box.forbidden / 'key')}; "
                   f"ln -s {hidden(box.forbidden / 'key')} link && cat link; "
                   f"cp {hidden(box.forbidden / 'key')} copy; "
                   f"echo overwrite > {hidden(box.forbidden / 'key')}; "
                   f"cat /proc/self/root{hidden(box.forbidden / 'key')}; "
                   f"mv {hidden(box.forbidden)} {hidden(box.ws / 'moved')}; true", ctx)
    assert "DEEP-SECRET" not in out and "PRIVATE-KEY" not in out
    assert not (box.ws / "copy").exists() and not (box.ws / "moved").exists()
    assert (box.forbidden / "key").read_text() == "PRIVATE-KEY"


@needs_landlock
async def test_everything_else_follows_the_policy(box: Box) -> None:
    full = box.ctx("full")
    out = await sh(f"echo w > made && cat made && echo r > {hidden(box.root / 'r.txt')} && "
                   f"cat {hidden(box.outside / 'public.txt')} && "
                   f"echo o > {hidden(box.outside / 'new.txt')} && "
                   "echo quiet > /dev/null && echo ok", full)
    assert out.splitlines()[1:] == ["w", "PUBLIC", "ok"]
    assert (box.outside / "new.txt").read_text() == "o\n"  # full: workspace_only is off
    supervised = box.ctx("supervised")
    out = await sh(f"echo s > made2 && echo r2 > {hidden(box.root / 'r2.txt')} && "
                   f"echo nope > {hidden(box.outside / 'nope.txt')}; echo rc=$?", supervised)
    assert (box.ws / "made2").exists() and (box.root / "r2.txt").exists()
    assert not (box.outside / "nope.txt").exists() and "rc=" in out  # outside the roots


@needs_landlock
async def test_without_landlock_the_same_command_gets_through(box: Box) -> None:
    """What the sandbox closes: the text check alone lets the hidden path through."""
    out = await sh(f"cat {hidden(box.forbidden / 'key')}", box.ctx("full"),
                   ShellTool(landlock=lambda: 0))
    assert "PRIVATE-KEY" in out


@needs_landlock
async def test_root_inside_a_forbidden_path_stays_usable(tmp_path: Path) -> None:
    """Roots beat forbidden paths, as in the policy."""
    forbidden = tmp_path / "home"
    ws = forbidden / "project"
    ws.mkdir(parents=True)
    (forbidden / "token").write_text("TOKEN")
    policy = SecurityPolicy(workspace_dir=str(ws), forbidden_paths=(str(forbidden),),
                            autonomy="full", workspace_only=False)
    ctx = ToolContext(session_id="s", policy=policy, send_update=_nothing,
                      client_request=_no_client, shell_env=dict(os.environ))
    out = await sh(f"echo x > f && cat f && cat {hidden(forbidden / 'token')}; true", ctx)
    assert "x" in out.splitlines() and "TOKEN" not in out


async def _nothing(update: dict[str, Any]) -> None:
    return None


async def _no_client(method: str, params: dict[str, Any], wait: float) -> Any:
    raise AssertionError("no client request expected")


async def test_trampoline_fails_closed(tmp_path: Path) -> None:
    """A plan it cannot read means the command does not run at all."""
    marker = tmp_path / "ran"
    argv = sandboxed_argv(SandboxPlan((str(tmp_path),), (), True),
                          ["/bin/sh", "-c", f"touch {marker}"])
    argv[argv.index("--") - 1] = "{not json"
    proc = await asyncio.create_subprocess_exec(*argv, stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    assert proc.returncode == SANDBOX_FAILED_EXIT
    assert b"cannot confine the command" in err and not marker.exists()


def test_plan_resolves_paths_and_keeps_forbidden_inside_roots(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "secret").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    plan = make_plan(str(ws), ["~"], [str(ws / "secret"), str(link), "~/.ssh", "private", str(ws)],
                     workspace_only=False)
    home = os.path.realpath(os.path.expanduser("~"))
    assert plan.roots == (str(ws), home)
    # Inside a root → kept (a root never reaches a forbidden path inside it); the symlink
    # is resolved to its target; a relative entry is the workspace's; a root itself wins.
    assert plan.forbidden == (str(ws / "secret"), str(tmp_path / "elsewhere"),
                              os.path.join(home, ".ssh"), str(ws / "private"))
    assert plan.write_everywhere is True
    assert SandboxPlan.from_json(plan.to_json()) == plan


def test_rules_grant_a_root_around_the_forbidden_path_inside_it(tmp_path: Path) -> None:
    """A root containing the data dir: its siblings get the root's rights, the data dir none."""
    root = tmp_path / "root"
    (root / "cfg" / "data").mkdir(parents=True)
    (root / "cfg" / "agents").mkdir()
    (root / "src").mkdir()
    (root / "notes.txt").write_text("n")
    data = root / "cfg" / "data"
    plan = SandboxPlan(roots=(str(root),), forbidden=(str(data),), write_everywhere=False)
    granted = dict(rules(plan, 5))
    full = granted[str(root / "src")]
    assert full == granted[str(root / "notes.txt")] == granted[str(root / "cfg" / "agents")]
    assert full & WRITE_FILE
    for path in (data, root, root / "cfg"):
        assert str(path) not in granted


def test_rules_grant_siblings_but_never_the_forbidden_path_or_its_parents(tmp_path: Path) -> None:
    (tmp_path / "deny").mkdir()
    (tmp_path / "deny" / "x").write_text("x")
    (tmp_path / "ok.txt").write_text("ok")
    (tmp_path / "okdir").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "deny")
    plan = SandboxPlan(roots=(), forbidden=(str(tmp_path / "deny"),), write_everywhere=False)
    granted = dict(rules(plan, 5))
    assert str(tmp_path / "ok.txt") in granted and str(tmp_path / "okdir") in granted
    for path in (tmp_path / "deny", tmp_path / "deny" / "x", tmp_path, tmp_path.parent, "/",
                 tmp_path / "alias"):
        assert str(path) not in granted
    assert "/dev/null" in granted
    no_forbidden = SandboxPlan(roots=(), forbidden=(), write_everywhere=True)
    assert next(p for p, _ in rules(no_forbidden, 1)) == "/"
