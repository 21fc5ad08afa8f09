"""Structured logging to stderr.

stdout is the protocol in stdio mode, so every log line goes to stderr as one
JSON object: ``{"ts":…, "level":…, "logger":…, "event":…, <fields>}``. Fields
whose name contains a secret marker (token, api_key, apikey, secret, password,
authorization; not a bare "key", so ``session_key`` stays readable) are
replaced by ``"<redacted>"`` before they are written; callers must still never
pass file contents or prompts as fields.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

import orjson

_SECRET_MARKERS = ("token", "api_key", "apikey", "secret", "password", "authorization")
_FIELDS_ATTR = "acpgate_fields"


def _redact(fields: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in fields.items():
        low = key.lower()
        out[key] = "<redacted>" if any(m in low for m in _SECRET_MARKERS) else value
    return out


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line with its structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as a JSON object on one line."""
        payload: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
            "pid": record.process,
        }
        payload.update(_redact(getattr(record, _FIELDS_ATTR, {})))
        if record.exc_info and record.exc_info[0] is not None:
            payload["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(payload, default=str).decode()


class StructLogger:
    """A thin wrapper: ``log.info("event_name", key=value, …)``."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def _log(self, level: int, event: str, exc_info: bool, fields: dict[str, Any]) -> None:
        if self._logger.isEnabledFor(level):
            self._logger.log(level, event, exc_info=exc_info, extra={_FIELDS_ATTR: fields})

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


def _stderr_handler() -> logging.Handler:
    """The one JSON-to-stderr handler (created on first use, then shared)."""
    root = logging.getLogger("acpgate")
    for handler in root.handlers:
        if getattr(handler, "_acpgate", False):
            return handler
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler._acpgate = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    return handler


def setup_logging(level: str | None = None) -> None:
    """Send ``acpgate.*`` logs to stderr as JSON (level from ``ACPGATE_LOG_LEVEL``, default info)."""
    chosen = (level or os.environ.get("ACPGATE_LOG_LEVEL") or "info").upper()
    root = logging.getLogger("acpgate")
    root.setLevel(getattr(logging, chosen, logging.INFO))
    _stderr_handler()
    root.propagate = False
    logging.Formatter.converter = time.gmtime


def route_library_logs(*names: str, level: str = "warning") -> None:
    """Send third-party loggers (e.g. the MCP SDK's) to stderr as the same JSON lines.

    Without this, their warnings reach stderr through logging's last-resort
    handler as bare text, tracebacks spread over many lines.
    """
    handler = _stderr_handler()
    for name in names:
        logger = logging.getLogger(name)
        logger.setLevel(getattr(logging, level.upper(), logging.WARNING))
        if handler not in logger.handlers:
            logger.addHandler(handler)
        logger.propagate = False
