"""A throwaway PostgreSQL cluster for tests and benchmarks: initdb, start, use, remove.

:func:`start_cluster` runs ``initdb`` in a fresh directory under ``/tmp`` and
starts ``postgres`` on a unix socket in that directory and on a loopback port
the OS chose free; :meth:`Cluster.stop` stops it and removes the directory.
The server refuses to run as root, so as root it runs as the ``postgres`` OS
user (else ``nobody``): the directory is handed to that user and every server
command runs through ``runuser``.

Authentication: the unix socket trusts the superuser (tests create databases
through it); TCP on 127.0.0.1 asks for the superuser's password (SCRAM), so a
test can prove a password given through ``[store] password_env`` is used.

When the server binaries are not installed, :func:`find_binaries` says so and
callers skip (tests) or leave the PostgreSQL rows out (the benchmark).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SUPERUSER", "Cluster", "find_binaries", "missing_reason", "start_cluster"]

SUPERUSER = "acpgate"
_BIN_NAMES = ("initdb", "pg_ctl", "postgres", "createdb", "dropdb")
#: Settings for a disposable cluster in tests: no durability, few resources.
FAST_SETTINGS: tuple[str, ...] = (
    "fsync=off", "synchronous_commit=off", "full_page_writes=off",
    "shared_buffers=32MB", "max_connections=200",
)


def find_binaries() -> dict[str, str] | None:
    """Paths of ``initdb``, ``pg_ctl``, ``postgres`` and ``createdb``, or None when any is
    missing. All come from the directory ``initdb`` really lives in (on PATH, else Debian's
    versioned dirs), so they are one version."""
    candidates = [shutil.which("initdb"), *sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                                                  reverse=True)]
    for initdb in filter(None, candidates):
        bindir = os.path.dirname(os.path.realpath(initdb))
        found = {n: shutil.which(n, path=bindir) for n in _BIN_NAMES}
        if all(found.values()):
            return {n: str(p) for n, p in found.items()}
    return None


def missing_reason() -> str:
    """Why no cluster can be started here ("" when one can)."""
    if find_binaries() is None:
        return ("PostgreSQL server binaries (initdb, pg_ctl, postgres, createdb) are not "
                "installed: not on PATH nor in /usr/lib/postgresql/*/bin")
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_user() -> pwd.struct_passwd | None:
    """The OS user the server runs as when we are root (None: run as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' user exists")


@dataclass
class Cluster:
    """A running throwaway cluster; :meth:`dsn` names one of its databases."""

    root: Path
    port: int
    password: str
    bins: dict[str, str]
    user: pwd.struct_passwd | None
    _names: int = field(default=0, repr=False)
    #: The server's options (``pg_ctl -o``), to start it again the same way.
    options: str = field(default="", repr=False)

    @property
    def socket_dir(self) -> Path:
        """The directory holding the unix socket (libpq's ``host=``)."""
        return self.root

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def dsn(self, database: str = "postgres", *, tcp: bool = False, password: bool = False,
            schema: str = "", port: int = 0) -> str:
        """A ``postgresql://`` URL: over the unix socket (trusted) unless ``tcp`` (to ``port``
        when given: a stand-in in front of the server); ``schema`` first on the search path."""
        secret = f":{self.password}" if password else ""
        options = f"search_path={schema}" if schema else ""
        if tcp:
            query = f"?{options}" if options else ""
            return (f"postgresql://{SUPERUSER}{secret}@127.0.0.1:{port or self.port}/{database}"
                    f"{query}")
        query = f"?host={self.socket_dir}&port={self.port}" + (f"&{options}" if options else "")
        return f"postgresql://{SUPERUSER}{secret}@/{database}{query}"

    def new_name(self) -> str:
        """A database or schema name not used before in this cluster."""
        self._names += 1
        return f"t{self._names}_{secrets.token_hex(3)}"

    def run(self, argv: Sequence[str], **kw: object) -> subprocess.CompletedProcess[str]:
        """Run a server command as the server's user (checked, output captured)."""
        cmd = list(argv)
        if self.user is not None:
            cmd = ["runuser", "-u", self.user.pw_name, "--", *cmd]
        return subprocess.run(cmd, check=True, capture_output=True, text=True,
                              timeout=120, **kw)  # type: ignore[call-overload,no-any-return]

    def create_database(self, name: str) -> None:
        """``CREATE DATABASE name`` (through the trusted socket; blocking)."""
        self.run([self.bins["createdb"], "-h", str(self.socket_dir), "-p", str(self.port),
                  "-U", SUPERUSER, name])

    def recreate_database(self, name: str) -> None:
        """Drop ``name`` if it exists, then create it empty (blocking): a fixed name
        (a compose file's ``POSTGRES_DB``) used by several tests on one cluster."""
        self.run([self.bins["dropdb"], "-h", str(self.socket_dir), "-p", str(self.port),
                  "-U", SUPERUSER, "--if-exists", "--force", name])
        self.create_database(name)

    def log_tail(self, lines: int = 40) -> str:
        """The end of the server log, for a failure message."""
        with contextlib.suppress(OSError):
            return "\n".join((self.root / "server.log").read_text().splitlines()[-lines:])
        return ""

    def halt(self) -> None:
        """Stop the server (fast: clients are disconnected), keeping its data: an outage."""
        self.run([self.bins["pg_ctl"], "-D", str(self.data_dir), "-m", "fast", "-w", "-t",
                  "60", "stop"])

    def start_again(self) -> None:
        """Start a halted server on the same socket, port and data."""
        self.run([self.bins["pg_ctl"], "-D", str(self.data_dir), "-l",
                  str(self.root / "server.log"), "-o", self.options, "-w", "-t", "60", "start"])

    def stop(self) -> None:
        """Stop the server (immediate) and remove its directory; a second call is harmless."""
        if (self.data_dir / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self.run([self.bins["pg_ctl"], "-D", str(self.data_dir), "-m", "immediate",
                          "-w", "-t", "30", "stop"])
        shutil.rmtree(self.root, ignore_errors=True)


def start_cluster(settings: Sequence[str] = FAST_SETTINGS) -> Cluster:
    """initdb + start a cluster in a new ``/tmp`` directory (RuntimeError if binaries are
    missing or the server does not start; nothing is left behind then)."""
    bins = find_binaries()
    if bins is None:
        raise RuntimeError(missing_reason())
    user = _server_user()
    # /tmp, not $TMPDIR: a short path (unix socket names are limited to ~107 bytes),
    # and every parent traversable by the server's user.
    root = Path(tempfile.mkdtemp(prefix="acpg-pg-", dir="/tmp"))
    cluster = Cluster(root=root, port=_free_port(), password=secrets.token_urlsafe(18),
                      bins=bins, user=user)
    try:
        pwfile = root / "pwfile"
        pwfile.write_text(cluster.password + "\n")
        if user is not None:
            os.chown(root, user.pw_uid, user.pw_gid)
            os.chown(pwfile, user.pw_uid, user.pw_gid)
        pwfile.chmod(0o600)
        cluster.run([bins["initdb"], "-D", str(cluster.data_dir), "-U", SUPERUSER,
                     "--pwfile", str(pwfile), "--auth-local=trust",
                     "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync"])
        pwfile.unlink()
        cluster.options = " ".join([f"-k {root}", "-c listen_addresses=127.0.0.1",
                                    f"-p {cluster.port}", *(f"-c {s}" for s in settings)])
        try:
            cluster.start_again()
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"postgres did not start: {exc.stderr}\n{cluster.log_tail()}") from None
    except BaseException:
        cluster.stop()
        raise
    return cluster


@contextlib.contextmanager
def running_cluster(settings: Sequence[str] = FAST_SETTINGS) -> Iterator[Cluster]:
    """:func:`start_cluster` as a context manager that always removes the cluster."""
    cluster = start_cluster(settings)
    try:
        yield cluster
    finally:
        cluster.stop()
