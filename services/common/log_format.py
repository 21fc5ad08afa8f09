"""How one log record becomes one line: JSON (the default) or aligned text.

Both formats carry the same things — the time, the level, the process that
logged (``acp[4242]``), the logger, the event and its structured fields — and
both redact: a field whose name contains a secret marker (token, api_key,
apikey, secret, password, authorization; not a bare "key", so ``session_key``
stays readable) is written as ``"<redacted>"``. Callers must still never pass
file contents or prompts as fields.

A record is formatted on the thread that logs it (:mod:`services.common.log_output`
hands only the finished line to the writer thread), so a field's value is read
while the caller still holds it as it was.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["FIELDS_ATTR", "REDACTED", "JsonFormatter", "TextFormatter", "redact"]

_SECRET_MARKERS = ("token", "api_key", "apikey", "secret", "password", "authorization")
#: Where :class:`services.common.logs.StructLogger` puts a record's structured fields.
FIELDS_ATTR = "acpgate_fields"
REDACTED = "<redacted>"
#: Column widths of the text format (longer values push the line on, never cut it).
_LOGGER_WIDTH = 20
_EVENT_WIDTH = 26
_PROCESS_WIDTH = 16
_LOGGER_PREFIX = "acpgate."


def redact(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` with the value of every secret-named field replaced by ``<redacted>``."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        low = key.lower()
        out[key] = REDACTED if any(m in low for m in _SECRET_MARKERS) else value
    return out


def _exception_text(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    """The record's traceback as text ("" without one), computed once per record."""
    if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
        record.exc_text = formatter.formatException(record.exc_info)
    return record.exc_text or ""


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``{"ts", "level", "logger", "event", "pid", "process",
    <fields>, "exc"?}`` (``ts``: seconds since the epoch, UTC)."""

    def __init__(self, process: str = "") -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as a JSON object on one line."""
        payload: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
            "pid": record.process,
        }
        if self.process:
            payload["process"] = self.process
        payload.update(redact(getattr(record, FIELDS_ATTR, {})))
        exc = _exception_text(self, record)
        if exc:
            payload["exc"] = exc
        return orjson.dumps(payload, default=str).decode()


def _text_value(value: Any) -> str:
    """A field's value as ``key=value`` shows it: bare when it is one plain word, else
    quoted (strings) or JSON (lists, tables)."""
    if isinstance(value, str):
        if value and not any(c.isspace() or c in '"=\\' for c in value) and value.isprintable():
            return value
        return json.dumps(value, ensure_ascii=False)
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    try:
        return orjson.dumps(value, default=str).decode()
    except TypeError:
        return json.dumps(str(value), ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """Aligned columns for people: local time, level, ``process[pid]``, logger, event, then
    ``key=value`` fields; a traceback follows on indented lines."""

    def __init__(self, process: str = "") -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as one aligned line (more only for a traceback)."""
        local = time.localtime(record.created)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", local) + f".{int(record.msecs):03d}"
        who = f"{self.process or 'acpgate'}[{record.process}]"
        name = record.name.removeprefix(_LOGGER_PREFIX)
        fields = " ".join(f"{key}={_text_value(value)}"
                          for key, value in redact(getattr(record, FIELDS_ATTR, {})).items())
        line = (f"{stamp} {record.levelname:<7} {who:<{_PROCESS_WIDTH}} "
                f"{name:<{_LOGGER_WIDTH}} {record.getMessage():<{_EVENT_WIDTH}} {fields}")
        line = line.rstrip()
        exc = _exception_text(self, record)
        if exc:
            line += "\n" + "\n".join("    " + part for part in exc.splitlines())
        return line
