"""An address another process already serves: the error, and who that process is.

``acpgate serve`` and ``acpgate edge`` refuse a gateway port that is taken, and a
service refuses a unix socket another live process serves (never removing it):
each says so in one sentence a person can act on, naming the holder's PID when the
kernel lets us see it (``psutil.net_connections``: sockets of processes of other
users are not attributed without privileges, and then the PID is left out).

Blocking (the lookups scan ``/proc``): run off the event loop.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable

import psutil

from services.common.config import ConfigError

__all__ = ["AddressInUse", "port_holder", "port_in_use", "socket_holder", "socket_in_use",
           "socket_is_served"]

#: How long a probe of a unix socket waits for its connect.
PROBE_TIMEOUT_SECS = 0.5

#: Listening addresses that cover every address of their family.
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})


class AddressInUse(ConfigError):
    """Another process serves the address; the message names it (reported like a
    configuration problem: one line, no traceback, a non-zero exit)."""


def _topmost(pids: Iterable[int]) -> int | None:
    """Of the processes sharing one socket (a parent and the children it handed it to),
    the one whose parent is not among them: the process a person started."""
    found = set(pids)
    tops = []
    for pid in found:
        try:
            parent = psutil.Process(pid).ppid()
        except psutil.Error:
            parent = 0
        if parent not in found:
            tops.append(pid)
    return min(tops or found) if found else None


def _by_pid(pid: int | None) -> str:
    return f" (by pid {pid})" if pid else ""


def port_holder(host: str, port: int) -> int | None:
    """The PID listening on TCP ``port`` at ``host`` (or on every address), if visible."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    pids = []
    for conn in conns:
        if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.pid is None:
            continue
        ip, listening_port = conn.laddr[0], conn.laddr[1]
        if listening_port == port and (ip == host or ip in _WILDCARDS or host in _WILDCARDS):
            pids.append(conn.pid)
    return _topmost(pids)


def port_in_use(host: str, port: int, address: str = "") -> AddressInUse:
    """``port <port> on <host> is in use (by pid N)``: the error for a taken gateway port
    (``address``: the one of ``host``'s addresses that could not be bound, default ``host``)."""
    holder = port_holder(address or host, port)
    return AddressInUse(f"port {port} on {host or '*'} is in use{_by_pid(holder)}")


def socket_is_served(path: str) -> bool:
    """Whether a live process listens on the unix socket at ``path``: a connect that
    succeeds, or fails any other way than a refusal or a missing file (a full backlog,
    a timeout: someone is there). A dead listener's socket file refuses."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT_SECS)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError:
        return True
    finally:
        probe.close()
    return True


def socket_holder(path: str) -> int | None:
    """The PID serving the unix socket at ``path``, if visible."""
    try:
        conns = psutil.net_connections(kind="unix")
    except (psutil.Error, OSError):
        return None
    return _topmost(c.pid for c in conns if c.laddr == path and c.pid is not None)


def socket_in_use(path: str) -> AddressInUse:
    """``unix socket <path> is in use (by pid N)``: the error for a socket a live process
    serves (it is left as it is)."""
    return AddressInUse(f"unix socket {path} is in use{_by_pid(socket_holder(path))}: another "
                        "acpgate process serves it (it was left as it is)")
