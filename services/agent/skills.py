"""Skills: task instructions in the agent workspace, listed to the model, loaded when it asks.

The seed: ACP sessions inherit the agent's personality *and skills* from the
agent workspace. The layout is the convention Claude Code and others use::

    <agent workspace>/skills/<name>/SKILL.md

    ---
    name: <name>                 # optional; when given, the directory's name
    description: <what it does and when to use it>
    ---
    <the instructions: the body>

The system prompt lists every usable skill by name and description (bounded);
the ``skill_load`` tool returns one skill's body. Files beside SKILL.md
(scripts, references) are read with the normal file tools: the agent workspace
is an allowed root of every session.

A skill that cannot be used — no or broken front matter, no description, a
name that is not its directory's, a file too large or not text, a path that
resolves outside ``skills/`` (symlinks are followed and must stay inside), one
the session policy does not let the agent read — is skipped with a log line;
it never breaks the session. Everything here blocks on the file system: call
it off the event loop.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from services.agent import front_matter
from services.agent.enforce import PolicyViolation, check_read
from services.common.logs import get_logger
from services.common.policy import SecurityPolicy

log = get_logger("agent.skills")

SKILLS_DIR = "skills"
SKILL_FILE = "SKILL.md"
#: A skill's name: its directory's (no separators, no leading dot, so never ``..``).
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: Largest SKILL.md used at all; the front matter must lie in its first FRONT_MATTER_BYTES.
MAX_SKILL_BYTES = 256 * 1024
FRONT_MATTER_BYTES = 16 * 1024
#: What one listing holds at most: skills, and characters of one description.
MAX_SKILLS = 64
MAX_DESCRIPTION_CHARS = 1024
#: Directory entries of ``skills/`` looked at, at most (bounds the work of a huge dir).
MAX_ENTRIES = 512


class SkillError(Exception):
    """A skill that cannot be loaded; ``str(exc)`` is the sentence for the model."""


@dataclass(frozen=True)
class Skill:
    """One usable skill: its name, description and the real path of its SKILL.md."""

    name: str
    description: str
    path: Path

    @property
    def directory(self) -> Path:
        """The skill's directory (where the files it mentions lie)."""
        return self.path.parent


@dataclass(frozen=True)
class Shelf:
    """The usable skills of a workspace (sorted by name, at most MAX_SKILLS) and how many
    more usable ones were left out."""

    root: Path | None
    skills: tuple[Skill, ...] = ()
    left_out: int = 0


def skills_root(agent_workspace: Path) -> Path | None:
    """``<real agent workspace>/skills`` when it is a real directory (not a symlink away)."""
    root = os.path.join(os.path.realpath(agent_workspace), SKILLS_DIR)
    if os.path.realpath(root) != root or not os.path.isdir(root):
        return None
    return Path(root)


def _within(path: str, root: str) -> bool:
    return path.startswith(root + os.sep)


def _skip(name: str, reason: str) -> None:
    log.warning("skill_skipped", skill=name, reason=reason)


def _checked_file(root: Path, name: str, policy: SecurityPolicy) -> Path:
    """The real path of ``skills/<name>/SKILL.md``, inside ``skills/`` and readable under
    the session policy (SkillError says why not)."""
    real = os.path.realpath(os.path.join(root, name, SKILL_FILE))
    if not _within(real, str(root)):
        raise SkillError(f"its {SKILL_FILE} resolves outside {root}")
    try:
        info = os.stat(real)
    except FileNotFoundError:
        raise SkillError(f"it has no {SKILL_FILE}") from None
    if not stat.S_ISREG(info.st_mode):
        raise SkillError(f"its {SKILL_FILE} is not a regular file")
    if info.st_size > MAX_SKILL_BYTES:
        raise SkillError(f"its {SKILL_FILE} is too large ({info.st_size} bytes; "
                         f"limit {MAX_SKILL_BYTES})")
    try:
        return check_read(policy, real)
    except PolicyViolation as exc:
        raise SkillError(f"the session policy refuses it: {exc}") from None


def _opened_path(fd: int) -> str | None:
    """Where the kernel says an open file is (Linux ``/proc``); None where it cannot say."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _read(path: Path, limit: int) -> str:
    """Up to ``limit`` bytes of the checked file as text. The file is opened without
    following a symlink and must still be the checked path once open: a component swapped
    for a symlink since the check is refused, not followed out of ``skills/``."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        opened = os.fstat(fd)
        where = _opened_path(fd)
        if (where is not None and where != str(path)) or not stat.S_ISREG(opened.st_mode) \
                or opened.st_size > MAX_SKILL_BYTES:
            raise SkillError(f"its {SKILL_FILE} changed while it was read")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(limit)
    finally:
        os.close(fd)
    if b"\x00" in data:
        raise SkillError(f"its {SKILL_FILE} is not text")
    return data.decode("utf-8", "replace")


def _parse(name: str, text: str, path: Path) -> tuple[Skill, str]:
    """The skill and its body from the text of its SKILL.md."""
    parts = front_matter.split(text)
    if parts is None:
        raise SkillError(f"its {SKILL_FILE} does not start with a closed `---` front matter "
                         "block")
    fields, body = parts
    given = fields.get("name", "").strip()
    if given and given != name:
        raise SkillError(f"its front matter names it `{given}`, not `{name}` (its directory)")
    description = " ".join(fields.get("description", "").split())
    if not description:
        raise SkillError("its front matter has no `description`")
    return Skill(name, description[:MAX_DESCRIPTION_CHARS], path), body


def _usable(root: Path, name: str, policy: SecurityPolicy) -> Skill:
    path = _checked_file(root, name, policy)
    return _parse(name, _read(path, FRONT_MATTER_BYTES), path)[0]


def find_skills(agent_workspace: Path, policy: SecurityPolicy) -> Shelf:
    """Every usable skill of the workspace (skipped ones are logged)."""
    root = skills_root(agent_workspace)
    if root is None:
        return Shelf(None)
    try:
        with os.scandir(root) as entries:
            names = sorted(e.name for _, e in zip(range(MAX_ENTRIES), entries, strict=False)
                           if e.is_dir())
    except OSError as exc:
        log.warning("skills_unreadable", path=str(root), error=type(exc).__name__)
        return Shelf(root)
    skills: list[Skill] = []
    for name in names:
        if name.startswith("."):
            continue  # .git and the like: not skills
        if not NAME_RE.fullmatch(name):
            _skip(name, "not a skill name (letters, digits, '.', '_', '-'; at most 64)")
            continue
        try:
            skills.append(_usable(root, name, policy))
        except SkillError as exc:
            _skip(name, str(exc))
        except OSError as exc:
            _skip(name, f"unreadable ({exc.strerror or type(exc).__name__})")
    return Shelf(root, tuple(skills[:MAX_SKILLS]), max(0, len(skills) - MAX_SKILLS))


def load_skill(agent_workspace: Path, policy: SecurityPolicy, name: str) -> tuple[Skill, str]:
    """The skill ``name`` and its body, by the same rules as the listing (SkillError: why not)."""
    if not NAME_RE.fullmatch(name):
        raise SkillError(f"`{name}` is not a skill name")
    root = skills_root(agent_workspace)
    if root is None or not os.path.isdir(os.path.join(root, name)):
        shelf = find_skills(agent_workspace, policy)
        known = ", ".join(s.name for s in shelf.skills) or "none"
        raise SkillError(f"No skill named `{name}`. Skills: {known}.")
    try:
        path = _checked_file(root, name, policy)
        return _parse(name, _read(path, MAX_SKILL_BYTES), path)
    except SkillError as exc:
        raise SkillError(f"The skill `{name}` cannot be used: {exc}.") from None
    except OSError as exc:
        raise SkillError(f"The skill `{name}` cannot be read: "
                         f"{exc.strerror or type(exc).__name__}.") from None
