"""Every wire format between acpgate's processes is listed in ``protos/README.md``.

A hand-written wire module is one that passes descriptors (``SCM_RIGHTS``) or proves its
peer with an HMAC; each must appear in the README's table, and every path the README
names must exist, so the list and the code cannot drift apart.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LISTING = REPO / "protos" / "README.md"
#: What marks a module as defining bytes another process reads.
WIRE_MARKS = ("SCM_RIGHTS", "hmac.new(", "hmac.digest(")
#: Modules that use a wire mark only to derive keys or to do the socket I/O of a listed wire.
NOT_A_WIRE = {
    "services/common/service_key.py",  # derives keys; carries nothing
    "services/common/fd_sockets.py",  # the I/O under the fd channel, listed with it
    "services/lifecycle/attach/fd_server.py",  # the lifecycle end of the fd channel
    "services/lifecycle/adapters/control_channel.py",  # the lifecycle end of the wrapper control channel
    "acpgate/serve_lock.py",  # a lock file, passed on by the serve hand-over
}


def wire_modules() -> set[str]:
    found = set()
    for top in ("services", "acpgate"):
        for path in (REPO / top).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if any(mark in text for mark in WIRE_MARKS):
                found.add(str(path.relative_to(REPO)))
    return found


def test_every_wire_module_is_listed() -> None:
    listed = LISTING.read_text(encoding="utf-8")
    missing = sorted(m for m in wire_modules() - NOT_A_WIRE if f"`{m}`" not in listed)
    assert not missing, f"wire formats not listed in protos/README.md: {missing}"


def test_every_listed_path_exists() -> None:
    listed = LISTING.read_text(encoding="utf-8")
    paths = re.findall(r"`((?:services|acpgate|acpgate_contracts)/[\w/]+\.(?:py|proto))`", listed)
    assert paths, "the listing names no paths"
    for path in paths:
        where = REPO / ("protos/" + path if path.endswith(".proto") else path)
        assert where.exists(), f"protos/README.md names {path}, which does not exist"
