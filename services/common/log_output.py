"""Where acpgate's own logs go: stderr, the install's log file, at which levels.

Every long-running acpgate process (``acp``, ``serve`` and its children, the
single services, ``agent``) logs to two places:

- **stderr** — for a service, at the configured level (``[logging] level``,
  ``ACPGATE_LOG_LEVEL`` over it; default info). A **stdio command** (``acp``,
  ``agent``, ``bridge``) is different: an editor reads its stderr, and some
  (Emacs' acp.el) turn every chunk into an error event, so unless a level was
  asked for it writes only warnings and errors there;
- **the log file** (``[logging] file``, default ``<data dir>/logs/acpgate.log``;
  "none" for none) — everything at the configured level, from every process of
  the install, rotated by size (:mod:`services.common.log_file`). The bridge,
  which may run on a machine that only holds a client config, writes one only
  when ``[logging] file`` names it.

Writing never happens on an event loop: a record is formatted where it is
logged (JSON or, with ``ACPGATE_LOG_FORMAT=text`` / ``[logging] format``, aligned
text; with neither, text on a stderr that is a terminal, JSON elsewhere) and queued;
one writer thread (:class:`logging.handlers.QueueListener`) puts it on stderr and into
the file, and rotates. It is drained at exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from logging.handlers import QueueHandler, QueueListener
from pathlib import Path
from typing import Any

from services.common.config import Config, ConfigError
from services.common.config.choices import LOG_FORMATS, LOG_LEVELS
from services.common.log_file import SharedRotatingFile
from services.common.log_format import FIELDS_ATTR, JsonFormatter, TextFormatter
from services.common.version import installed_version

__all__ = [
    "ENV_LOG_FORMAT",
    "ENV_LOG_LEVEL",
    "STDIO_PROCESSES",
    "LogPlan",
    "log_startup",
    "plan_logging",
    "route_library_logs",
    "setup_logging",
    "start_logging",
    "stop_logging",
]

ENV_LOG_LEVEL = "ACPGATE_LOG_LEVEL"
ENV_LOG_FORMAT = "ACPGATE_LOG_FORMAT"
#: Commands whose stderr an editor reads: warnings only there unless a level is asked for.
STDIO_PROCESSES = ("acp", "agent", "bridge")
_ROOT = "acpgate"
_MARK = "_acpgate_output"
_TEXT_ATTR = "acpgate_text_line"


@dataclass(frozen=True)
class LogPlan:
    """What one process logs where."""

    #: The process's name in every line (``acp``, ``serve``, ``session``…; "" none).
    process: str = ""
    stderr_level: int = logging.INFO
    #: The log file (None: stderr only) and what goes into it.
    file: Path | None = None
    file_level: int = logging.INFO
    file_max_bytes: int = 10 * 1024 * 1024
    file_keep: int = 5
    #: Aligned text instead of JSON lines.
    text: bool = False
    #: Aligned text on stderr only, JSON in the file (no format asked, stderr a terminal).
    stderr_text: bool = False


def _level(name: str) -> int:
    return int(getattr(logging, name.upper()))


def plan_logging(cfg: Config, process: str, *, stdio: bool | None = None,
                 file_by_default: bool = True,
                 environ: Mapping[str, str] | None = None,
                 stderr_tty: bool | None = None) -> LogPlan:
    """The plan of ``process`` under ``cfg``: ``ACPGATE_LOG_LEVEL`` / ``ACPGATE_LOG_FORMAT``
    over ``[logging]``; ``stdio`` (default: ``process`` is a stdio command) keeps stderr to
    warnings unless a level was asked for; ``file_by_default`` False writes a file only
    when ``[logging] file`` names one. With no format asked for, stderr gets text when it
    is a terminal (``stderr_tty``, default: asked of ``sys.stderr``) and JSON otherwise.
    A bad value is a ConfigError naming the variable."""
    env = os.environ if environ is None else environ
    asked = (env.get(ENV_LOG_LEVEL) or cfg.logging.level).strip().lower()
    if asked not in LOG_LEVELS:
        raise ConfigError(f"{ENV_LOG_LEVEL}: expected one of {', '.join(LOG_LEVELS[1:])}, "
                          f"got {asked!r}")
    fmt = (env.get(ENV_LOG_FORMAT) or cfg.logging.format).strip().lower()
    if fmt not in LOG_FORMATS:
        raise ConfigError(f"{ENV_LOG_FORMAT}: expected one of {', '.join(LOG_FORMATS[1:])}, "
                          f"got {fmt!r}")
    tty = _stderr_is_tty() if stderr_tty is None else stderr_tty
    level = _level(asked) if asked else logging.INFO
    quiet = process in STDIO_PROCESSES if stdio is None else stdio
    stderr_level = logging.WARNING if quiet and not asked else level
    want_file = file_by_default or bool(cfg.logging.file)
    return LogPlan(process=process, stderr_level=stderr_level,
                   file=cfg.log_file if want_file else None, file_level=level,
                   file_max_bytes=cfg.logging.file_max_bytes, file_keep=cfg.logging.file_keep,
                   text=fmt == "text", stderr_text=not fmt and tty)


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False


class _TextBeside(logging.Formatter):
    """Formats a record as JSON and keeps its text line on it too (``_TEXT_ATTR``), for a
    stderr in text beside a JSON file: both made where the record is logged."""

    def __init__(self, process: str) -> None:
        super().__init__()
        self._json = JsonFormatter(process)
        self._text = TextFormatter(process)

    def format(self, record: logging.LogRecord) -> str:
        setattr(record, _TEXT_ATTR, self._text.format(record))
        return self._json.format(record)


class _TextLine(logging.Formatter):
    """The text line :class:`_TextBeside` kept on the record."""

    def format(self, record: logging.LogRecord) -> str:
        return str(getattr(record, _TEXT_ATTR, record.getMessage()))


class _Output:
    """The handler set :func:`start_logging` installed: the queue handler on the ``acpgate``
    logger (and on routed library loggers) and the writer thread behind it."""

    def __init__(self, handler: QueueHandler, listener: QueueListener) -> None:
        self.handler = handler
        self.listener = listener
        self.stopped = False

    def stop(self) -> None:
        """Drain the queue, stop the writer thread, close its handlers (idempotent:
        ``QueueListener.stop`` is not)."""
        if self.stopped:
            return
        self.stopped = True
        self.listener.stop()
        for handler in self.listener.handlers:
            handler.close()


def _current(root: logging.Logger) -> _Output | None:
    for handler in root.handlers:
        output = getattr(handler, _MARK, None)
        if isinstance(output, _Output):
            return output
    return None


def _stop_previous(root: logging.Logger, successor: QueueHandler | None = None) -> None:
    """A second start (tests, a command that re-plans after loading its config, a reload)
    replaces the first: ``successor`` (already on ``root``) takes its place on the library
    loggers routed to it, then its records are written, its handlers closed."""
    previous = next((o for h in root.handlers if (o := getattr(h, _MARK, None)) is not None
                     and isinstance(o, _Output) and o.handler is not successor), None)
    if previous is None:
        return
    known = logging.root.manager.loggerDict.values()
    for logger in [root, *(x for x in known if isinstance(x, logging.Logger))]:
        if previous.handler in logger.handlers:
            if successor is not None and successor not in logger.handlers:
                logger.addHandler(successor)
            logger.removeHandler(previous.handler)
    atexit.unregister(previous.stop)
    previous.stop()


def stop_logging() -> None:
    """Write what is queued, close the file, and hand ``acpgate.*`` back to the root logger
    (tests that started logging in-process)."""
    root = logging.getLogger(_ROOT)
    _stop_previous(root)
    root.propagate = True
    root.setLevel(logging.NOTSET)


def start_logging(plan: LogPlan) -> None:
    """Send ``acpgate.*`` records as ``plan`` says, through one writer thread. A log file
    that cannot be opened (a read-only data dir) leaves stderr only, with one warning. A
    running output is replaced without losing a record (the new one is in place first)."""
    root = logging.getLogger(_ROOT)
    formatter: logging.Formatter = (TextFormatter(plan.process) if plan.text
                                    else _TextBeside(plan.process) if plan.stderr_text
                                    else JsonFormatter(plan.process))
    line_only = logging.Formatter("%(message)s")  # the queue handler already formatted it
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setLevel(plan.stderr_level)
    stderr.setFormatter(_TextLine() if plan.stderr_text and not plan.text else line_only)
    handlers: list[logging.Handler] = [stderr]
    levels = [plan.stderr_level]
    file_problem = ""
    if plan.file is not None:
        try:
            file = SharedRotatingFile(plan.file, plan.file_max_bytes, plan.file_keep)
        except OSError as exc:
            file_problem = f"{type(exc).__name__}: {exc.strerror or exc}"
        else:
            file.setLevel(plan.file_level)
            file.setFormatter(line_only)
            handlers.append(file)
            levels.append(plan.file_level)
    records: queue.SimpleQueue[Any] = queue.SimpleQueue()
    listener = QueueListener(records, *handlers, respect_handler_level=True)
    handler = QueueHandler(records)
    handler.setFormatter(formatter)  # prepare() formats on the logging thread
    output = _Output(handler, listener)
    setattr(handler, _MARK, output)
    listener.start()
    root.addHandler(handler)
    _stop_previous(root, handler)
    root.setLevel(min(levels))
    root.propagate = False
    atexit.register(output.stop)
    if file_problem:
        root.getChild("logs").warning("log_file_unavailable", extra={
            FIELDS_ATTR: {"file": str(plan.file), "why": file_problem}})


def setup_logging(level: str | None = None) -> None:
    """stderr only, as JSON lines, at ``level`` (default ``ACPGATE_LOG_LEVEL``, else info;
    an unknown name is info): the built-in agent behind the edge, whose stderr is its
    lease's log, and one-shot commands."""
    chosen = (level or os.environ.get(ENV_LOG_LEVEL) or "info").strip().lower()
    stderr_level = _level(chosen) if chosen in LOG_LEVELS[1:] else logging.INFO
    start_logging(LogPlan(stderr_level=stderr_level))


def route_library_logs(*names: str, level: str = "warning") -> None:
    """Send third-party loggers (e.g. the MCP SDK's) through the same output.

    Without this, their warnings reach stderr through logging's last-resort
    handler as bare text, tracebacks spread over many lines.
    """
    output = _current(logging.getLogger(_ROOT))
    if output is None:
        setup_logging()
        output = _current(logging.getLogger(_ROOT))
    assert output is not None
    for name in names:
        logger = logging.getLogger(name)
        logger.setLevel(getattr(logging, level.upper(), logging.WARNING))
        if output.handler not in logger.handlers:
            logger.addHandler(output.handler)
        logger.propagate = False


def log_startup(cfg: Config, process: str, **serves: Any) -> None:
    """The line each process writes once it runs: which process, acpgate's version, its
    PID, its config and data dirs, its log file, and what it serves where (``serves``:
    e.g. ``address="unix:/…/session.sock"``)."""
    fields = {"process": process, "version": installed_version(), "pid": os.getpid(),
              **serves, "config_dir": str(cfg.config_dir), "data_dir": str(cfg.data_dir),
              "log_file": str(cfg.log_file or "")}
    logging.getLogger(f"{_ROOT}.startup").info("startup", extra={FIELDS_ATTR: fields})
