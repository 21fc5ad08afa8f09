"""Each tool: happy path and every policy refusal (traversal, symlink escape, forbidden, readonly)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from services.agent.enforce import PolicyViolation
from services.agent.tools import all_tools, tool_kind
from services.agent.tools.base import ToolContext, ToolError
from services.common.policy import SecurityPolicy


class Env:
    """A workspace, an outside dir with a secret, a symlink escape, and a context factory."""

    def __init__(self, tmp: Path) -> None:
        self.ws = tmp / "ws"
        self.ws.mkdir()
        self.outside = tmp / "outside"
        self.outside.mkdir()
        (self.outside / "secret.txt").write_text("TOP SECRET")
        (self.ws / "escape").symlink_to(self.outside, target_is_directory=True)
        (self.ws / "hello.txt").write_text("hello\nworld\nhello again\n")
        (self.ws / "sub").mkdir()
        (self.ws / "sub" / "code.py").write_text("def hello():\n    return 1\n")
        self.forbidden = tmp / "forbidden"
        self.forbidden.mkdir()
        (self.forbidden / "key").write_text("private")
        self.updates: list[dict[str, Any]] = []

    def ctx(self, autonomy: str = "supervised") -> ToolContext:
        policy = SecurityPolicy(workspace_dir=str(self.ws),
                                forbidden_paths=(str(self.forbidden), "/etc"),
                                autonomy=autonomy, workspace_only=autonomy != "full")

        async def send(update: dict[str, Any]) -> None:
            self.updates.append(update)

        async def no_client(method: str, params: dict[str, Any], wait: float) -> Any:
            raise AssertionError("no client request expected")

        return ToolContext(session_id="s", policy=policy, send_update=send,
                           client_request=no_client, shell_env=dict(os.environ))


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


TOOLS = all_tools()


async def run(name: str, args: dict[str, Any], ctx: ToolContext) -> str:
    result = await TOOLS[name].run(args, ctx)
    assert result.ok, result.output
    return result.output


def test_kinds() -> None:
    assert {n: tool_kind(n) for n in TOOLS} == {
        "shell": "execute", "file_read": "read", "file_write": "edit", "file_edit": "edit",
        "glob": "search", "content_search": "search", "deliver_file": "other",
        "ask_user": "other", "escalate_to_human": "other", "skill_load": "read", "todo": "other",
        # the session tools (offered only behind the edge)
        "sessions_spawn": "other", "sessions_send": "other", "sessions_list": "read",
        "sessions_history": "read", "session_status": "read"}
    assert tool_kind("whatever") == "other"
    assert not any("memory" in n for n in TOOLS)


# ------------------------------------------------------------------ happy paths


async def test_file_read(env: Env) -> None:
    assert await run("file_read", {"path": "hello.txt"}, env.ctx()) == "hello\nworld\nhello again\n"
    assert await run("file_read", {"path": str(env.ws / "hello.txt"), "offset": 2, "limit": 1},
                     env.ctx()) == "world\n"
    with pytest.raises(ToolError, match="not found"):
        await TOOLS["file_read"].run({"path": "nope.txt"}, env.ctx())
    with pytest.raises(ToolError, match="missing required"):
        await TOOLS["file_read"].run({}, env.ctx())


async def test_file_write_and_edit(env: Env) -> None:
    out = await run("file_write", {"path": "new/dir/f.txt", "content": "abc"}, env.ctx())
    assert "Created" in out and (env.ws / "new/dir/f.txt").read_text() == "abc"
    await run("file_edit", {"path": "hello.txt", "old_string": "world", "new_string": "there"},
              env.ctx())
    assert (env.ws / "hello.txt").read_text() == "hello\nthere\nhello again\n"
    with pytest.raises(ToolError, match="occurs 2 times"):
        await TOOLS["file_edit"].run({"path": "hello.txt", "old_string": "hello",
                                      "new_string": "x"}, env.ctx())
    await run("file_edit", {"path": "hello.txt", "old_string": "hello", "new_string": "bye",
                            "replace_all": True}, env.ctx())
    assert (env.ws / "hello.txt").read_text() == "bye\nthere\nbye again\n"
    with pytest.raises(ToolError, match="not found"):
        await TOOLS["file_edit"].run({"path": "hello.txt", "old_string": "zzz",
                                      "new_string": "x"}, env.ctx())


async def test_writes_never_follow_a_planted_temp_symlink(env: Env) -> None:
    """The temp file of an atomic write is fresh (O_EXCL): a symlink planted where a
    predictable temp name would be cannot redirect the write out of the roots."""
    import glob as globmod

    victim = env.outside / "victim.txt"
    victim.write_text("untouched")
    for pid in (os.getpid(), 0):
        (env.ws / f".hello.txt.acpgate-tmp-{pid}").symlink_to(victim)
    await run("file_write", {"path": "hello.txt", "content": "new"}, env.ctx())
    assert (env.ws / "hello.txt").read_text() == "new"
    assert victim.read_text() == "untouched"
    assert not globmod.glob(str(env.ws / ".hello.txt.*.acpgate-tmp"))  # no temp left behind


async def test_glob_and_search(env: Env) -> None:
    out = await run("glob", {"pattern": "**/*.py"}, env.ctx())
    assert out == "sub/code.py"
    listing = await run("glob", {}, env.ctx())
    assert "hello.txt" in listing and "sub/" in listing
    assert "escape" not in listing  # a symlink out of the workspace is not listed
    found = await run("content_search", {"pattern": "hel+o"}, env.ctx())
    assert "hello.txt:1: hello" in found and "sub/code.py:1: def hello():" in found
    assert "SECRET" not in await run("content_search", {"pattern": "SECRET|hello"}, env.ctx())
    assert await run("content_search", {"pattern": "hello", "glob": "*.py"},
                     env.ctx()) == "sub/code.py:1: def hello():"
    with pytest.raises(ToolError, match="invalid regular expression"):
        await TOOLS["content_search"].run({"pattern": "("}, env.ctx())


async def test_shell(env: Env) -> None:
    out = await run("shell", {"command": "pwd; echo err >&2; cat hello.txt | wc -l"}, env.ctx())
    assert out.splitlines() == ["exit code 0", str(env.ws), "err", "3"]
    failed = await TOOLS["shell"].run({"command": "exit 3"}, env.ctx())
    assert not failed.ok and failed.output == "exit code 3"
    big = await TOOLS["shell"].run({"command": "head -c 200000 /dev/zero | tr '\\0' x"},
                                   env.ctx("full"))
    assert "more bytes of output dropped" in big.output and len(big.output) < 70_000


# ------------------------------------------------------------------ refusals

READS = [
    ("file_read", lambda p: {"path": p}),
    ("glob", lambda p: {"path": p, "pattern": "*"}),
    ("content_search", lambda p: {"path": p, "pattern": "."}),
    ("deliver_file", lambda p: {"path": p}),
    ("file_write", lambda p: {"path": p, "content": "x"}),
    ("file_edit", lambda p: {"path": p, "old_string": "T", "new_string": "x"}),
    ("shell", lambda p: {"command": f"cat {p}"}),
]


def target(env: Env, case: str, tool: str) -> str:
    secret_dir = tool in ("glob", "content_search")
    if case == "traversal":
        return "../outside" if secret_dir else "../outside/secret.txt"
    if case == "symlink":
        return "escape" if secret_dir else "escape/secret.txt"
    if case == "forbidden":
        return str(env.forbidden) if secret_dir else str(env.forbidden / "key")
    raise AssertionError(case)


@pytest.mark.parametrize("tool,args", READS, ids=[t for t, _ in READS])
@pytest.mark.parametrize("case", ["traversal", "symlink", "forbidden"])
async def test_policy_refusals(env: Env, tool: str, args: Any, case: str) -> None:
    # forbidden paths apply even in full autonomy (no workspace_only there)
    ctx = env.ctx("full" if case == "forbidden" else "supervised")
    with pytest.raises(PolicyViolation):
        await TOOLS[tool].run(args(target(env, case, tool)), ctx)
    assert (env.outside / "secret.txt").read_text() == "TOP SECRET"
    assert (env.forbidden / "key").read_text() == "private"


async def test_full_autonomy_reaches_outside_but_not_forbidden(env: Env) -> None:
    ctx = env.ctx("full")
    assert await run("file_read", {"path": str(env.outside / "secret.txt")}, ctx) == "TOP SECRET"
    with pytest.raises(PolicyViolation, match="forbidden"):
        await TOOLS["file_read"].run({"path": "/etc/passwd"}, ctx)
    with pytest.raises(PolicyViolation):
        await TOOLS["shell"].run({"command": "cat /etc/hostname"}, ctx)


@pytest.mark.parametrize("tool,args", [
    ("file_write", {"path": "x.txt", "content": "x"}),
    ("file_edit", {"path": "hello.txt", "old_string": "hello", "new_string": "x",
                   "replace_all": True}),
    ("shell", {"command": "touch made-by-shell"}),
])
async def test_readonly_refuses_writes_and_shell(env: Env, tool: str, args: Any) -> None:
    with pytest.raises(PolicyViolation, match="readonly"):
        await TOOLS[tool].run(args, env.ctx("readonly"))
    assert not (env.ws / "x.txt").exists() and not (env.ws / "made-by-shell").exists()
    assert "hello" in (env.ws / "hello.txt").read_text()


async def test_readonly_still_reads(env: Env) -> None:
    assert "hello" in await run("file_read", {"path": "hello.txt"}, env.ctx("readonly"))


async def test_nul_byte_refused(env: Env) -> None:
    with pytest.raises(PolicyViolation, match="NUL"):
        await TOOLS["file_read"].run({"path": "hello\x00.txt"}, env.ctx())


async def test_write_preview_diff_and_refused_preview(env: Env) -> None:
    preview = await TOOLS["file_write"].preview({"path": "hello.txt", "content": "new"}, env.ctx())
    assert preview["content"][0]["oldText"] == "hello\nworld\nhello again\n"
    refused = await TOOLS["file_write"].preview({"path": "../outside/x", "content": "n"},
                                                env.ctx())
    assert refused == {"rawInput": {"path": "../outside/x", "content": "n"}}
    assert not (env.outside / "x").exists()
