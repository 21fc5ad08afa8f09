"""Skills from the agent workspace: `skills/<name>/SKILL.md` with a front
matter name and description, listed in the system prompt, loaded with `skill_load`; a broken
skill is skipped with a log line, and no skill path leaves `skills/`."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from services.agent import front_matter
from services.agent.prompt import build_system_prompt
from services.agent.skills import (
    MAX_SKILL_BYTES,
    MAX_SKILLS,
    SkillError,
    find_skills,
    load_skill,
)
from services.common.policy import SecurityPolicy
from tests.agent.harness import ScriptedProvider, call, make_config, running_agent, say


def skill(root: Path, name: str, text: str) -> Path:
    path = root / "skills" / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def doc(description: str, body: str = "Do the thing.", name: str | None = None) -> str:
    head = f"name: {name}\n" if name is not None else ""
    return f"---\n{head}description: {description}\n---\n{body}\n"


def policy(ws: Path, agent_ws: Path, **extra: Any) -> SecurityPolicy:
    return SecurityPolicy(workspace_dir=str(ws), allowed_roots=(str(agent_ws),), **extra)


def skipped(caplog: pytest.LogCaptureFixture) -> dict[str, str]:
    return {r.acpgate_fields["skill"]: r.acpgate_fields["reason"]  # type: ignore[attr-defined]
            for r in caplog.records if r.getMessage() == "skill_skipped"}


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    ws, agent_ws = tmp_path / "project", tmp_path / "agent"
    ws.mkdir()
    agent_ws.mkdir()
    return ws, agent_ws


# ------------------------------------------------------------------ front matter


@pytest.mark.parametrize(("text", "fields", "body"), [
    ("---\nname: a\ndescription: Does a.\n---\nbody\n", {"name": "a", "description": "Does a."},
     "body\n"),
    ('\ufeff---\r\nname: "q\\"uote"\r\ndescription: \'it\'\'s\' # not a comment\r\n---\r\nB',
     {"name": 'q"uote', "description": "it's"}, "B"),
    ("---\ndescription: >\n  folded\n  lines\n\n  para\nname: x # trailing comment\n---\n",
     {"description": "folded lines\npara", "name": "x"}, ""),
    ("---\ndescription: |\n  keep\n  lines\n# a comment\nmetadata:\n  nested: {a: 1}\n"
     "allowed-tools:\n  - Read\n---\nrest", {"description": "keep\nlines",
                                               "metadata": "nested: {a: 1}",
                                               "allowed-tools": "- Read"}, "rest"),
    ("---\ndescription: plain\n  continued here\n...\nx", {"description": "plain continued here"},
     "x"),
])
def test_front_matter(text: str, fields: dict[str, str], body: str) -> None:
    assert front_matter.split(text) == (fields, body)


@pytest.mark.parametrize("text", ["", "no front matter\n", "---\nname: a\n", " ---\na: b\n---\n",
                                  "---\na: b\n  ---\n"])
def test_no_closed_front_matter(text: str) -> None:
    assert front_matter.split(text) is None


# ------------------------------------------------------------------ listing and loading


def test_listing_skips_broken_skills_with_a_log_line(
        dirs: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="acpgate")
    ws, agent_ws = dirs
    skill(agent_ws, "release", doc("Cut a release: tag, changelog, publish.", name="release"))
    skill(agent_ws, "pdf", doc("Fill PDF forms."))  # no name: the directory's
    skill(agent_ws, "nodesc", "---\nname: nodesc\n---\nbody")
    skill(agent_ws, "wrongname", doc("x", name="other"))
    skill(agent_ws, "nofront", "# just markdown\n")
    skill(agent_ws, "binary", "---\ndescription: b\n---\n\x00\x01")
    skill(agent_ws, "big", doc("big", body="x" * MAX_SKILL_BYTES))
    (agent_ws / "skills" / "empty").mkdir()
    (agent_ws / "skills" / "bad name").mkdir()
    (agent_ws / "skills" / ".git").mkdir()
    (agent_ws / "skills" / "README.md").write_text("not a skill")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "SKILL.md").write_text(doc("I live elsewhere"))
    (agent_ws / "skills" / "escape").symlink_to(outside, target_is_directory=True)
    (agent_ws / "skills" / "alias").symlink_to(agent_ws / "skills" / "pdf",
                                               target_is_directory=True)
    shelf = find_skills(agent_ws, policy(ws, agent_ws))
    # A symlinked skill that stays inside skills/ is fine (here: `pdf` under a second name).
    assert [(s.name, s.description) for s in shelf.skills] == [
        ("alias", "Fill PDF forms."), ("pdf", "Fill PDF forms."),
        ("release", "Cut a release: tag, changelog, publish.")]
    assert shelf.root == Path(os.path.realpath(agent_ws / "skills"))
    reasons = skipped(caplog)
    assert set(reasons) == {"nodesc", "wrongname", "nofront", "binary", "big", "empty",
                            "bad name", "escape"}
    assert "no `description`" in reasons["nodesc"]
    assert "names it `other`, not `wrongname`" in reasons["wrongname"]
    assert "front matter" in reasons["nofront"] and "not text" in reasons["binary"]
    assert "too large" in reasons["big"] and "no SKILL.md" in reasons["empty"]
    assert "resolves outside" in reasons["escape"]


def test_symlinked_skills_dir_and_no_skills(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    ws, agent_ws = dirs
    assert find_skills(agent_ws, policy(ws, agent_ws)).skills == ()
    elsewhere = tmp_path / "elsewhere"
    skill(elsewhere, "x", doc("x"))
    (agent_ws / "skills").symlink_to(elsewhere / "skills", target_is_directory=True)
    assert find_skills(agent_ws, policy(ws, agent_ws)).root is None
    with pytest.raises(SkillError, match=r"No skill named `x`\. Skills: none\."):
        load_skill(agent_ws, policy(ws, agent_ws), "x")


def test_policy_refusal_is_a_skip(dirs: tuple[Path, Path],
                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="acpgate")
    ws, agent_ws = dirs
    skill(agent_ws, "a", doc("a"))
    # A policy without the agent workspace among its roots (never what the session service
    # decides, but the listing must still obey the policy it gets).
    no_root = SecurityPolicy(workspace_dir=str(ws))
    assert find_skills(agent_ws, no_root).skills == ()
    assert "session policy refuses it" in skipped(caplog)["a"]


def test_load_returns_the_body(dirs: tuple[Path, Path]) -> None:
    ws, agent_ws = dirs
    skill(agent_ws, "release", doc("Cut a release.", body="1. tag\n2. publish"))
    found, body = load_skill(agent_ws, policy(ws, agent_ws), "release")
    assert found.name == "release" and body.strip() == "1. tag\n2. publish"
    assert found.directory == Path(os.path.realpath(agent_ws / "skills" / "release"))


@pytest.mark.parametrize(("name", "error"), [
    ("..", "`..` is not a skill name"),
    ("../secret", "is not a skill name"),
    ("a/b", "is not a skill name"),
    ("/etc", "is not a skill name"),
    ("missing", "No skill named `missing`. Skills: ok."),
    ("broken", "The skill `broken` cannot be used: its front matter has no `description`."),
])
def test_load_refusals(dirs: tuple[Path, Path], name: str, error: str) -> None:
    ws, agent_ws = dirs
    skill(agent_ws, "ok", doc("fine"))
    skill(agent_ws, "broken", "---\nname: broken\n---\n")
    with pytest.raises(SkillError) as info:
        load_skill(agent_ws, policy(ws, agent_ws), name)
    assert error in str(info.value)


def test_system_prompt_lists_skills_bounded(dirs: tuple[Path, Path]) -> None:
    ws, agent_ws = dirs
    pol = policy(ws, agent_ws)
    assert "## Skills" not in build_system_prompt("a", agent_ws, pol)
    for i in range(MAX_SKILLS + 1):
        skill(agent_ws, f"s{i:03d}", doc(f"Skill number {i}."))
    (agent_ws / "MEMORY.md").write_text("never read")
    prompt = build_system_prompt("a", agent_ws, pol)
    assert "## Skills" in prompt and "`skill_load`" in prompt
    assert "- `s000`: Skill number 0." in prompt and f"- `s{MAX_SKILLS - 1:03d}`" in prompt
    assert f"`s{MAX_SKILLS:03d}`" not in prompt and "… and 1 more in" in prompt
    assert "never read" not in prompt  # MEMORY.md stays unused (the seed)


# ------------------------------------------------------------------ the tool in a session


async def test_skill_load_in_a_session(tmp_path: Path) -> None:
    cfg = make_config(tmp_path)
    agent_ws = cfg.agent_workspace("a")
    skill_dir = skill(agent_ws, "release", doc("Cut a release.", body="Run `make release`.")
                      ).parent.resolve()
    (tmp_path / "ws").mkdir()
    provider = ScriptedProvider([call("skill_load", {"name": "release"}), say("done"),
                                 call("skill_load", {"name": "nope"}), say("hm")])
    async with running_agent(cfg, provider) as c:
        sid = await c.new_session(tmp_path / "ws")
        await c.prompt(sid, "release it")
        await c.prompt(sid, "again")
    assert c.requests == []  # auto-approved by default, like file_read
    system, _, tools = provider.calls[0]
    assert "- `release`: Cut a release." in system
    assert "skill_load" in [t.name for t in tools]
    loaded = provider.calls[1][1][-1]
    assert loaded.role == "tool" and not loaded.failed
    assert loaded.text.startswith("Skill `release` — Cut a release.")
    assert "Run `make release`." in loaded.text
    assert str(skill_dir) in loaded.text
    missing = provider.calls[3][1][-1]
    assert missing.failed and missing.text == "No skill named `nope`. Skills: release."


async def test_readonly_sessions_have_skills(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, autonomy="readonly")
    skill(cfg.agent_workspace("a"), "look", doc("Look around."))
    (tmp_path / "ws").mkdir()
    provider = ScriptedProvider([call("skill_load", {"name": "look"}), say("ok")])
    async with running_agent(cfg, provider) as c:
        sid = await c.new_session(tmp_path / "ws")
        await c.prompt(sid, "x")
    assert "skill_load" in [t.name for t in provider.calls[0][2]]
    assert not provider.calls[1][1][-1].failed
