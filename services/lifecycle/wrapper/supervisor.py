"""The adapter wrapper: a tiny, standard-library-only supervisor (SPEC §13).

Run by the lifecycle service as ``python -I -S <wrapper path> OPTIONS -- COMMAND ARGS``
(``python -m services.lifecycle.wrapper.supervisor`` works too). It

- starts the adapter in its own process group, with the wrapper's stdin/stdout
  (the ACP channel held by the service) and its stderr piped into a bounded
  per-lease log (``<log>`` rotated to ``<log>.1``), and with
  PR_SET_PDEATHSIG = SIGTERM set before its exec, so that an adapter whose
  wrapper dies (even by SIGKILL) learns of it at once;
- reports ``{"event": "started", "adapter_pid", "pgid"}`` and later
  ``{"event": "exit", "code", "signal"}`` as JSON lines on ``--report-fd``;
- forwards SIGINT/SIGTERM/SIGHUP to the adapter's group;
- notices the death of its parent (any change of parent PID, looked at on each
  wake-up: PR_SET_PDEATHSIG wakes it at once, and a look every 30 s backs that
  up) or of the service that adopted it (its link's EOF),
  waits up to ``--adopt-secs`` for a restarted lifecycle service to re-adopt it
  over its control channel (:mod:`wrapper_control`, beside this file), then
  SIGTERMs the group and its adopted descendants, and stays alive until the
  SIGKILL fallback has fired after ``--term-grace-ms``;
- is a child subreaper, so descendants that lose their parent stay under it.

The adapter is reaped only at the very end: while it is unreaped its PID, and so
its process group id, cannot be reused, which makes every ``killpg`` here safe.
The wrapper decides no session policy.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

if __package__:  # imported as services.lifecycle.wrapper.supervisor
    from services.lifecycle.wrapper import control as wc
    from services.lifecycle.wrapper.bookkeeping import BoundedLog, proc_scan
else:  # run as a file: its standard-library parts lie beside it (spawn.WRAPPER_PARTS)
    # No __pycache__ beside them: the wrapper dir is acpgate's owner-only state.
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import wrapper_control as wc  # type: ignore[import-not-found,no-redef]
    from wrapper_log import BoundedLog, proc_scan  # type: ignore[import-not-found,no-redef]

__all__ = ["BoundedLog", "Options", "Terminator", "Wrapper", "main", "parse_args"]

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: The parent-death signal: only a wake-up, the parent PID check decides.
PDEATH_SIGNAL = signal.SIGUSR2
#: What the adapter gets when its wrapper dies: a chance to stop cleanly. One
#: that ignores it is SIGKILLed by the lifecycle service's reap (SPEC §13).
ADAPTER_PDEATH_SIGNAL = signal.SIGTERM
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Signal dispositions the adapter starts with at their defaults (Python ignores the last two).
ADAPTER_DEFAULT_SIGNALS = (*FORWARDED, PDEATH_SIGNAL, signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ)
#: How often the parent PID is looked at while orphaned (the adoption window runs).
PPID_POLL_SECS = 0.25
#: How often the loop wakes on its own while supervised: only a backstop, since every event
#: it acts on wakes it (parent death by PDEATH_SIGNAL, the adapter's or an adopted
#: descendant's exit by SIGCHLD, forwarded signals, stderr, the control channel).
SUPERVISED_POLL_SECS = 30.0
DEFAULT_STDERR_MAX_BYTES = 256 * 1024


@dataclass
class Options:
    """The wrapper's command line."""

    lease_id: str
    instance_id: str
    parent_pid: int
    term_grace_ms: int
    report_fd: int
    stderr_log: str
    stderr_max_bytes: int
    command: list[str]
    #: The adoption window (0: the seed's immediate cleanup, no control channel).
    adopt_secs: float = 0.0
    control: str = ""
    adopt_key_fd: int = -1
    #: The service's ends of the adapter's pipes the wrapper keeps (-1: none).
    hold_fds: tuple[int, int] = (-1, -1)


def parse_args(argv: Sequence[str]) -> Options:
    """Parse ``--key value`` options up to ``--``; the rest is the adapter command."""
    values: dict[str, str] = {}
    args = list(argv)
    i = 0
    while i < len(args) and args[i] != "--":
        key = args[i]
        if not key.startswith("--") or i + 1 >= len(args):
            raise ValueError(f"bad wrapper argument {key!r}")
        values[key[2:]] = args[i + 1]
        i += 2
    command = args[i + 1 :]
    if not command:
        raise ValueError("no adapter command after --")
    return Options(
        lease_id=values["lease-id"],
        instance_id=values["instance-id"],
        parent_pid=int(values["parent-pid"]),
        term_grace_ms=int(values.get("term-grace-ms", "3000")),
        report_fd=int(values.get("report-fd", "-1")),
        stderr_log=values.get("stderr-log", ""),
        stderr_max_bytes=int(values.get("stderr-max-bytes", str(DEFAULT_STDERR_MAX_BYTES))),
        command=command,
        adopt_secs=float(values.get("adopt-secs", "0")),
        control=values.get("control", ""),
        adopt_key_fd=int(values.get("adopt-key-fd", "-1")),
        hold_fds=(int(values.get("hold-stdin-fd", "-1")), int(values.get("hold-stdout-fd", "-1"))),
    )


class Terminator:
    """SIGTERM, wait up to the grace while anything is left, then SIGKILL.

    The operations are passed in, so the same policy runs against the real
    kernel here and against the simulated process table in the tests.
    """

    def __init__(
        self,
        signal_all: Callable[[int], None],
        remaining: Callable[[], bool],
        wait: Callable[[float], None],
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._signal_all = signal_all
        self._remaining = remaining
        self._wait = wait
        self._now = now

    def run(self, grace_secs: float) -> list[int]:
        """Terminate; returns the signals sent, in order."""
        sent: list[int] = [signal.SIGTERM]
        self._signal_all(signal.SIGTERM)
        deadline = self._now() + grace_secs
        while self._now() < deadline:
            if not self._remaining():
                return sent
            self._wait(min(0.05, max(0.0, deadline - self._now())))
        # Fire the fallback unconditionally: the grace is over, and a group that
        # emptied meanwhile makes SIGKILL a no-op.
        self._signal_all(signal.SIGKILL)
        sent.append(signal.SIGKILL)
        return sent


_LIBC: list[object] = []


def _prctl(option: int, arg: int) -> bool:
    try:
        import ctypes

        if not _LIBC:
            _LIBC.append(ctypes.CDLL(None, use_errno=True))
        return int(_LIBC[0].prctl(option, arg, 0, 0, 0)) == 0  # type: ignore[attr-defined]
    except (OSError, AttributeError):
        return False


def _exec_adapter(command: list[str], env: dict[str, str], err_w: int, status_w: int, parent: int) -> None:
    """In the forked child: become the adapter. Never returns.

    Own process group, stderr into the log pipe, default signal dispositions and
    an empty mask, then PR_SET_PDEATHSIG: it must be set here, between fork and
    exec, because only the adapter itself can ask for it. A wrapper that died
    before that call would never send it, hence the parent check right after.
    An exec failure is written (errno) on ``status_w``, which exec closes on success.
    """
    try:
        signal.set_wakeup_fd(-1)
        for sig in ADAPTER_DEFAULT_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        os.setpgid(0, 0)
        os.dup2(err_w, 2)
        _prctl(PR_SET_PDEATHSIG, int(ADAPTER_PDEATH_SIGNAL))
        if os.getppid() != parent:
            os._exit(1)
        os.execvpe(command[0], command, env)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.write(status_w, f"{exc.errno or 0}".encode())
    finally:
        os._exit(127)


def _spawn_adapter(command: list[str], env: dict[str, str], err_w: int) -> int:
    """Fork and exec the adapter (:func:`_exec_adapter`); its PID, or OSError as exec saw it."""
    status_r, status_w = os.pipe()  # both close-on-exec: EOF alone means the exec worked
    try:
        pid = os.fork()
        if pid == 0:
            os.close(status_r)
            _exec_adapter(command, env, err_w, status_w, os.getppid())
        os.close(status_w)
        status_w = -1
        # The child does it too; doing it here as well means the group exists
        # whichever of the two runs first (EACCES once the child has exec'd).
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        report = b""
        while chunk := os.read(status_r, 64):
            report += chunk
    finally:
        os.close(status_r)
        if status_w >= 0:
            os.close(status_w)
    if report:
        os.waitpid(pid, 0)
        errno_value = int(report)
        raise OSError(errno_value, os.strerror(errno_value))
    return pid


class Wrapper:
    """One adapter under supervision."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.me = os.getpid()
        self.adapter_pid = 0
        self.parent_dead = False
        self.pending_signals: list[int] = []
        self.log = BoundedLog(opts.stderr_log, opts.stderr_max_bytes)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)
        self._err_r = -1
        #: The control channel (None: no adoption window, the seed's behaviour).
        self.control: wc.Control | None = None
        #: Without a control channel the window is 0: the seed's immediate cleanup.
        self.window = wc.AdoptionWindow(opts.adopt_secs, time.monotonic)

    # ------------------------------------------------------------------ reporting

    def report(self, **event: object) -> None:
        """Write one JSON line to the adopter's link, else the report fd (ignored if the
        service is gone)."""
        if self.control is not None and self.control.send_event(event):
            return
        if self.opts.report_fd < 0 or os.getppid() != self.opts.parent_pid:
            return
        try:
            os.write(self.opts.report_fd, (json.dumps(event) + "\n").encode())
        except OSError:
            pass

    def note(self, text: str) -> None:
        """A line of the wrapper's own in the stderr log."""
        self.log.write(f"[acpgate-wrapper] {text}\n".encode())

    # ------------------------------------------------------------------ signals

    def _on_signal(self, signum: int, _frame: object) -> None:
        if signum in FORWARDED:
            self.pending_signals.append(signum)

    def install_signals(self) -> None:
        """Handlers only record; the main loop acts (woken through the wakeup fd)."""
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for sig in (*FORWARDED, PDEATH_SIGNAL, signal.SIGCHLD):
            signal.signal(sig, self._on_signal)
        _prctl(PR_SET_PDEATHSIG, int(PDEATH_SIGNAL))
        _prctl(PR_SET_CHILD_SUBREAPER, 1)

    def check_parent(self) -> None:
        """Any change of parent PID means the service is gone; with a control channel,
        ``parent_dead`` only once no service re-adopted it within the window (an
        adopter's link that ends opens a new window)."""
        control, window = self.control, self.window
        was = window.orphaned_at
        step = window.step(os.getppid() == self.opts.parent_pid,
                           control is not None and control.adopter is not None)
        if step == wc.SUPERVISE and was is not None:
            self.note("re-adopted by a restarted lifecycle service")
        elif step == wc.WAIT and was is None:
            self.note(f"parent gone; waiting up to {window.secs} s for adoption")
        self.parent_dead = step == wc.CLEANUP

    def status(self) -> dict[str, object]:
        """What an adopter is told of the adapter."""
        return {"adapter_pid": self.adapter_pid, "pgid": self.adapter_pid}

    # ------------------------------------------------------------------ spawn

    def spawn(self) -> bool:
        """Start the adapter in its own process group; False (reported) on failure."""
        err_r, err_w = os.pipe()
        try:
            self.adapter_pid = _spawn_adapter(self.opts.command, dict(os.environ), err_w)
        except OSError as exc:
            os.close(err_r)
            os.close(err_w)
            self.note(f"cannot start adapter {self.opts.command[0]!r}: {exc.strerror or exc}")
            self.report(event="spawn_failed", error=f"{exc.strerror or exc}: {self.opts.command[0]}")
            return False
        os.close(err_w)
        os.set_blocking(err_r, False)
        self._err_r = err_r
        self.report(event="started", adapter_pid=self.adapter_pid, pgid=self.adapter_pid)
        # The adapter holds the ACP pipes now; the wrapper lets go of its copies so
        # that the service sees EOF when the adapter's side closes.
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.close(devnull)
        return True

    # ------------------------------------------------------------------ loop helpers

    def drain_stderr(self) -> bool:
        """Copy what the adapter's stderr has ready into the log; False at EOF."""
        if self._err_r < 0:
            return False
        while True:
            try:
                chunk = os.read(self._err_r, 65536)
            except BlockingIOError:
                return True
            except OSError:
                chunk = b""
            if not chunk:
                os.close(self._err_r)
                self._err_r = -1
                return False
            self.log.write(chunk)

    def wait_events(self, timeout: float) -> None:
        """Sleep until stderr output, a signal, or ``timeout``."""
        fds = [self._wake_r] + ([self._err_r] if self._err_r >= 0 else [])
        fds += self.control.fds() if self.control is not None else []
        try:
            ready, _, _ = select.select(fds, [], [], timeout)
        except InterruptedError:
            ready = []
        if self.control is not None:
            self.control.on_ready(ready, self.status)
        if self._wake_r in ready:
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
        if self._err_r in ready:
            self.drain_stderr()

    def adapter_status(self) -> int | None:
        """The adapter's wait status if it exited, without reaping it (keeps the PGID pinned)."""
        try:
            res = os.waitid(os.P_PID, self.adapter_pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return 0
        if res is None or res.si_pid == 0:
            return None
        if res.si_code == os.CLD_EXITED:
            return res.si_status << 8
        return res.si_status & 0x7F

    def reap_adopted(self) -> None:
        """Reap exited descendants the subreaper adopted (never the adapter)."""
        while True:
            try:
                res = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if res is None or res.si_pid == 0 or res.si_pid == self.adapter_pid:
                return
            try:
                os.waitpid(res.si_pid, 0)
            except ChildProcessError:
                return

    def signal_all(self, sig: int) -> None:
        """Signal the adapter's group and every live direct child (adopted descendants)."""
        try:
            os.killpg(self.adapter_pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in proc_scan(self.me, self.adapter_pid):
            try:
                if os.getpgid(pid) != self.adapter_pid:
                    # Direct children are unreaped while we run: their PID is pinned.
                    os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def remaining(self) -> bool:
        """True while any group member or adopted descendant is still alive."""
        self.reap_adopted()
        return bool(proc_scan(self.me, self.adapter_pid))

    def terminate(self) -> None:
        """SIGTERM everything of ours, SIGKILL after the grace."""
        Terminator(self.signal_all, self.remaining, self.wait_events).run(
            self.opts.term_grace_ms / 1000.0
        )

    # ------------------------------------------------------------------ main

    def run(self) -> int:
        """Supervise until the adapter exits or the parent dies; the exit code."""
        self.install_signals()
        if os.getppid() != self.opts.parent_pid:
            self.note("parent gone before start; adapter not started")
            return 1
        if not self.spawn():
            return 127
        status: int | None = None
        while True:
            # Swap first: a handler may append while we forward.
            pending, self.pending_signals = self.pending_signals, []
            for sig in pending:
                try:
                    os.killpg(self.adapter_pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            self.check_parent()
            if self.parent_dead:
                self.note("parent died, not re-adopted; terminating the adapter group")
                self.terminate()
                break
            self.reap_adopted()
            status = self.adapter_status()
            if status is not None:
                break
            self.wait_events(PPID_POLL_SECS if self.window.orphaned_at is not None
                             else SUPERVISED_POLL_SECS)
        if status is None:
            status = self.adapter_status()
        self.drain_stderr()
        code, sig = _decode(status)
        self.report(event="exit", code=code, signal=sig)
        if not self.parent_dead and self.remaining():
            # The adapter is gone but left processes behind: no orphans.
            self.terminate()
        self.drain_stderr()
        try:
            os.waitpid(self.adapter_pid, 0)
        except ChildProcessError:
            pass
        if self.control is not None:
            self.control.close()
        self.log.close()
        if sig:
            return 128 + sig
        return code if code >= 0 else 1


def _decode(status: int | None) -> tuple[int, int]:
    """``(exit code or -1, signal or 0)`` from a wait status."""
    if status is None:
        return -1, 0
    if status & 0x7F:
        return -1, status & 0x7F
    return (status >> 8) & 0xFF, 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: ``python acpgate_wrapper.py OPTIONS -- COMMAND ARGS``."""
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
    except (ValueError, KeyError) as exc:
        sys.stderr.write(f"acpgate wrapper: {exc}\n")
        return 2
    try:
        os.set_inheritable(opts.report_fd, False)
    except OSError as exc:
        if exc.errno != errno.EBADF:
            raise
        opts.report_fd = -1
    wrapper = Wrapper(opts)
    wrapper.control = wc.open_control(opts.adopt_secs, opts.control, opts.adopt_key_fd,
                                   opts.hold_fds, opts.lease_id, opts.instance_id)
    if wrapper.control is None:
        wrapper.window.secs = 0
    return wrapper.run()


if __name__ == "__main__":
    sys.exit(main())
