"""Structured logging: ``log = get_logger("edge"); log.info("event_name", key=value, …)``.

stdout is the protocol in stdio mode, so no log line ever goes there. A record
is an event name plus structured fields; :mod:`services.common.log_format` makes
it a JSON object (``{"ts":…, "level":…, "logger":…, "event":…, <fields>}``) or
an aligned text line, with every secret-named field (token, api_key, apikey,
secret, password, authorization) written as ``"<redacted>"``; callers must still
never pass file contents or prompts as fields. Where the lines go — stderr, the
install's log file, at which levels — is :mod:`services.common.log_output`'s job
(``setup_logging``, ``start_logging``, ``route_library_logs`` are re-exported here).

A warning a peer can repeat at will (an agent's malformed updates) is a
:class:`CountedWarning` of its subject: logged at its 1st, 2nd, 4th, 8th… time with the
count so far, so N of them cost about log2(N) lines.
"""

from __future__ import annotations

import logging
from typing import Any

from services.common.log_format import FIELDS_ATTR, JsonFormatter, TextFormatter, redact
from services.common.log_output import route_library_logs, setup_logging, start_logging

__all__ = ["CountedWarning", "JsonFormatter", "StructLogger", "TextFormatter", "get_logger",
           "redact",
           "route_library_logs", "setup_logging", "start_logging"]


class StructLogger:
    """A thin wrapper: ``log.info("event_name", key=value, …)``."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def _log(self, level: int, event: str, exc_info: bool, fields: dict[str, Any]) -> None:
        if self._logger.isEnabledFor(level):
            self._logger.log(level, event, exc_info=exc_info, extra={FIELDS_ATTR: fields})

    def debug(self, event: str, **fields: Any) -> None:
        """Log at DEBUG."""
        self._log(logging.DEBUG, event, False, fields)

    def info(self, event: str, **fields: Any) -> None:
        """Log at INFO."""
        self._log(logging.INFO, event, False, fields)

    def warning(self, event: str, **fields: Any) -> None:
        """Log at WARNING."""
        self._log(logging.WARNING, event, False, fields)

    def error(self, event: str, **fields: Any) -> None:
        """Log at ERROR."""
        self._log(logging.ERROR, event, False, fields)

    def exception(self, event: str, **fields: Any) -> None:
        """Log at ERROR with the current exception's traceback."""
        self._log(logging.ERROR, event, True, fields)


def get_logger(name: str) -> StructLogger:
    """A structured logger named ``acpgate.<name>``."""
    return StructLogger(logging.getLogger(f"acpgate.{name}"))


class CountedWarning:
    """One warning of one subject (a session) that a peer can repeat at will: logged, never
    with a traceback, at its 1st, 2nd, 4th, 8th… occurrence with ``count`` (how many so
    far); ``fields`` (the subject's id) go on every line."""

    def __init__(self, log: StructLogger, event: str, **fields: Any) -> None:
        self._log = log
        self._event = event
        self._fields = fields
        #: How many times it happened.
        self.count = 0

    def __call__(self, **fields: Any) -> None:
        """It happened once more (``fields``: what this occurrence says)."""
        self.count += 1
        if self.count & (self.count - 1) == 0:
            self._log.warning(self._event, **self._fields, **fields, count=self.count)
