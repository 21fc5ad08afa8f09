"""Landlock confinement of the shell tool's process tree (Linux ≥ 5.13, optional).

The shell's path check only sees the literal command text, so
``cat $(echo L2V0Yy9ob3N0bmFtZQ== | base64 -d)`` walks around it. When the
kernel offers Landlock, the shell is started through this file as an exec
trampoline: it builds a ruleset from a :class:`SandboxPlan`, restricts itself
(``no_new_privs`` first) and execs ``/bin/sh``; everything the shell starts
inherits the restriction and cannot lift it. A gateway client's stdio MCP
server is started the same way (``services/agent/mcp/confine.py``); the
program is looked up on the ``PATH`` of the environment it is given.

Landlock only *grants*, so "everything except the forbidden paths" is built by
granting every sibling on the way down to each forbidden path (the directories
on that way get no rule of their own, so they cannot be listed, and new entries
in them are not covered). Symlinks get no rule: access goes through the real
path, which has its own rule or none. Rights:

- every path outside the forbidden ones: read + execute; in ``full`` autonomy
  (``workspace_only`` off) also every write right;
- the session workspace and the allowed roots: everything (roots beat the
  forbidden paths they lie inside, as in the policy); a root that contains a
  forbidden path is granted the same way as ``/`` — sibling by sibling on the
  way down — so the data dir or ``~/.ssh`` inside a root stays out of reach;
- a few harmless device nodes (``/dev/null``, ``/dev/zero``, …): read + write,
  even under a forbidden ``/dev`` — shells cannot work without ``/dev/null``.

Limits (Landlock's, not ours): ``stat``/path walking is not restricted (names
and metadata of forbidden files stay visible to ``ls -l <exact path>``); a hard
link made *before* the session to a forbidden file from an allowed place stays
readable; file descriptors inherited from outside are not affected.

When this module runs as a script it must import only the standard library:
it is started with ``python -I`` in the session workspace.
"""

from __future__ import annotations

import ctypes
import json
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_SYS_CREATE_RULESET = 444  # the same number on every architecture that has Landlock
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5

#: Rights that may be granted on a non-directory.
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV

#: Device nodes that leak nothing and that shells need (``2>/dev/null``).
HARMLESS_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
                    "/dev/tty")

#: The trampoline's exit code when it cannot confine the shell (it never runs it unconfined).
SANDBOX_FAILED_EXIT = 125


def _handled(abi: int) -> int:
    """Every file-system right this Landlock ABI knows (all of them are restricted)."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


_READ = EXECUTE | READ_FILE | READ_DIR


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or disabled."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        version = int(libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0),
                                   ctypes.c_uint32(_CREATE_RULESET_VERSION)))
    except (OSError, AttributeError):
        return 0
    return max(version, 0)


@dataclass(frozen=True)
class SandboxPlan:
    """What the shell may touch, in real absolute paths (decided from the session policy)."""

    #: Read, write and execute everything below these (workspace, allowed roots).
    roots: tuple[str, ...]
    #: Nothing below these (outside the roots).
    forbidden: tuple[str, ...]
    #: Write rights everywhere outside the forbidden paths (``workspace_only`` off).
    write_everywhere: bool

    def to_json(self) -> str:
        """The trampoline's argument."""
        return json.dumps({"roots": list(self.roots), "forbidden": list(self.forbidden),
                           "writeEverywhere": self.write_everywhere})

    @classmethod
    def from_json(cls, text: str) -> SandboxPlan:
        """Parse :meth:`to_json`."""
        d = json.loads(text)
        return cls(roots=tuple(d["roots"]), forbidden=tuple(d["forbidden"]),
                   write_everywhere=bool(d["writeEverywhere"]))


def _within(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root + "/")


def make_plan(workspace_dir: str, allowed_roots: Iterable[str], forbidden_paths: Iterable[str],
              workspace_only: bool) -> SandboxPlan:
    """Real paths for the trampoline (relative forbidden paths are the workspace's).

    A forbidden path that is a root is dropped (the root wins); one inside a
    root is kept: the root is then granted around it (:func:`rules`).
    Touches the file system (``realpath``): call it off the event loop.
    """
    roots = tuple(dict.fromkeys(
        os.path.realpath(os.path.expanduser(r)) for r in (workspace_dir, *allowed_roots) if r))
    forbidden = tuple(dict.fromkeys(
        real for real in (os.path.realpath(os.path.join(workspace_dir, os.path.expanduser(f)))
                          for f in (e.strip() for e in forbidden_paths) if f)
        if real not in roots))
    return SandboxPlan(roots=roots, forbidden=forbidden, write_everywhere=not workspace_only)


def sandboxed_argv(plan: SandboxPlan, argv: Sequence[str]) -> list[str]:
    """``argv`` started through this file, which confines itself and then execs it."""
    return [sys.executable, "-I", os.path.abspath(__file__), plan.to_json(), "--", *argv]


def rules(plan: SandboxPlan, abi: int) -> list[tuple[str, int]]:
    """``(path, rights)`` pairs for the plan; paths that do not exist are left out."""
    handled = _handled(abi)
    base = _READ | (IOCTL_DEV & handled)
    if plan.write_everywhere:
        base = handled
    forbidden = set(plan.forbidden)
    on_the_way: set[str] = set()
    for path in plan.forbidden:
        parent = os.path.dirname(path)
        while True:
            on_the_way.add(parent)
            if parent == "/":
                break
            parent = os.path.dirname(parent)
    out: list[tuple[str, int]] = []

    def walk(directory: str, rights: int) -> None:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            return
        for name in names:
            path = os.path.join(directory, name)
            if path in forbidden:
                continue
            if path in on_the_way:
                walk(path, rights)
            elif not os.path.islink(path):
                out.append((path, rights))

    if not forbidden:
        out.append(("/", base))
    elif "/" not in forbidden:
        walk("/", base)
    for root in plan.roots:
        if root in on_the_way:  # a forbidden path lies inside: grant around it
            walk(root, handled)
        else:
            out.append((root, handled))
    out.extend((dev, (READ_FILE | WRITE_FILE | IOCTL_DEV) & handled) for dev in HARMLESS_DEVICES)
    return out


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def restrict_self(plan: SandboxPlan, abi: int) -> None:
    """Confine this process (and all it will start) to the plan; raises ``OSError``."""
    libc = ctypes.CDLL(None, use_errno=True)
    handled = _handled(abi)
    attr = _RulesetAttr(handled)
    ruleset = int(libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr),
                               ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0)))
    if ruleset < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    try:
        for path, rights in rules(plan, abi):
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # vanished or unreachable: nothing to grant
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    rights &= _FILE_RIGHTS
                beneath = _PathBeneathAttr(rights & handled, fd)
                if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset),
                                ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(beneath),
                                ctypes.c_uint32(0)) < 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"landlock_add_rule {path}: {os.strerror(err)}")
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(ruleset)


def main(args: Sequence[str]) -> int:
    """Trampoline: ``sandbox.py PLAN_JSON -- PROGRAM ARGS…``; never runs it unconfined.

    ``PROGRAM`` without a ``/`` is looked up on ``PATH``, as a shell would."""
    if len(args) < 3 or args[1] != "--":
        print("usage: sandbox.py PLAN_JSON -- PROGRAM [ARGS...]", file=sys.stderr)
        return SANDBOX_FAILED_EXIT
    try:
        plan = SandboxPlan.from_json(args[0])
        abi = landlock_abi()
        if abi < 1:
            raise OSError("Landlock is not available")
        restrict_self(plan, abi)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"acpgate sandbox: cannot confine the command, not running it: {exc}",
              file=sys.stderr)
        return SANDBOX_FAILED_EXIT
    program = list(args[2:])
    try:
        os.execvp(program[0], program)  # confined already: the PATH lookup is too
    except OSError as exc:
        print(f"acpgate sandbox: cannot start {program[0]}: {exc}", file=sys.stderr)
    return SANDBOX_FAILED_EXIT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
