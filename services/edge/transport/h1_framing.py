"""Strict HTTP/1.1 message framing, checked beside ``h11`` (request smuggling).

``h11`` is lenient where RFC 9112 lets a recipient be: it takes a request with
both ``Content-Length`` and ``Transfer-Encoding`` (the coding wins), folds
obsolete line folding into the value, collapses repeated equal
``Content-Length`` lines and takes a bare LF for CRLF. A proxy in front that
reads the same bytes otherwise sees another request boundary — request
smuggling. So the front door checks each request head (:func:`head_problem`)
and each chunked body (:class:`ChunkedCheck`) first, against the strict
grammar: whatever either refuses is answered 400 and the connection closed
(RFC 9112 §6.3), nothing after it read.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["ChunkedCheck", "head_problem", "request_head"]

#: Where ``h11`` ends a head (its own pattern: the first blank line, LF or CRLF).
_BLANK_LINE: Final = re.compile(rb"\n\r?\n")
#: RFC 9110 §5.6.2 ``token`` (a field name, a transfer coding, a chunk extension name).
_TOKEN: Final = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_DIGITS: Final = re.compile(rb"[0-9]{1,19}")
#: A chunk-size line: at most 16 hex digits, then extensions (no CR, LF or NUL in them).
_CHUNK_LINE: Final = re.compile(rb"([0-9A-Fa-f]{1,16})(?:[ \t]*;[\t\x20-\x7e\x80-\xff]*)?")
#: The longest chunk-size or trailer line taken.
MAX_LINE: Final = 8 * 1024
#: The most trailer bytes taken after the last chunk.
MAX_TRAILER: Final = 64 * 1024
_OWS: Final = b" \t"


def request_head(method: bytes, target: bytes, version: bytes,
                 fields: list[tuple[bytes, bytes]]) -> bytes:
    """A request head from its parts (header names' case as given)."""
    head = b"%s %s HTTP/%s\r\n" % (method, target, version)
    return head + b"".join(b"%s: %s\r\n" % (k, v) for k, v in fields) + b"\r\n"


def _field_problem(line: bytes) -> str | None:
    if line[:1] in (b" ", b"\t"):
        return "obsolete line folding"
    name, colon, _ = line.partition(b":")
    if not colon or not _TOKEN.fullmatch(name):
        return "bad header field name"
    return None


def head_problem(buffered: bytes) -> str | None:
    """Why the request head at the start of ``buffered`` (what ``h11`` holds unparsed
    while it waits for a request) cannot be framed unambiguously; None when it can, or
    is not complete yet (``h11`` bounds its size)."""
    end = _BLANK_LINE.search(buffered)
    if end is None or buffered[:1] in (b"\r", b"\n"):
        return None  # incomplete, or no request line: h11 refuses that itself
    head = buffered[:end.end()]
    if not head.endswith(b"\r\n\r\n"):
        return "bare LF line ending"
    lines = head[:-4].split(b"\r\n")
    if any(b"\r" in line or b"\n" in line for line in lines):
        return "bare CR or LF"
    lengths: list[bytes] = []
    codings: list[bytes] = []
    for line in lines[1:]:
        if why := _field_problem(line):
            return why
        name, _, value = line.partition(b":")
        name, value = name.lower(), value.strip(_OWS)
        if name == b"content-length":
            lengths.append(value)
        elif name == b"transfer-encoding":
            codings.extend(c.strip(_OWS).lower() for c in value.split(b","))
    if len(lengths) > 1:
        return "repeated Content-Length"
    if lengths and not _DIGITS.fullmatch(lengths[0]):
        return "bad Content-Length"
    if codings and lengths:
        return "both Content-Length and Transfer-Encoding"
    if codings and (codings != [b"chunked"] or not lines[0].endswith(b" HTTP/1.1")):
        return "a transfer coding other than one chunked, or one in HTTP/1.0"
    return None


class ChunkedCheck:
    """Reads a chunked body (RFC 9112 §7.1) strictly, as its bytes arrive, up to its end.

    :meth:`feed` is given every byte from the body's first on; bytes after the body's
    end are left alone (``done`` is True then). ``problem`` says why it refused."""

    def __init__(self) -> None:
        self._line = bytearray()
        self._left = 0  # data bytes of the current chunk still to come
        self._state = "size"  # size | data | crlf | trailer | done
        self._trailer = 0
        self.problem: str | None = None

    @property
    def done(self) -> bool:
        """True once the body ended (after its trailer's blank line)."""
        return self._state == "done"

    def feed(self, data: bytes) -> bool:
        """Take the next bytes; False once the body is malformed."""
        view = memoryview(data)
        while view and self.problem is None and self._state != "done":
            if self._state == "data":
                take = min(self._left, len(view))
                self._left -= take
                view = view[take:]
                if not self._left:
                    self._state = "crlf"
                continue
            chunk = bytes(view[:MAX_LINE + 2])
            cut = chunk.find(b"\n")
            self._line += chunk if cut < 0 else chunk[:cut + 1]
            view = view[len(chunk) if cut < 0 else cut + 1:]
            if len(self._line) > MAX_LINE + 2:
                self.problem = "line too long"
            elif cut >= 0:
                line, self._line = bytes(self._line), bytearray()
                self._line_done(line)
        return self.problem is None

    def _line_done(self, line: bytes) -> None:
        if not line.endswith(b"\r\n") or b"\r" in line[:-2]:
            self.problem = "bare CR or LF"
            return
        line = line[:-2]
        if self._state == "crlf":
            if line:
                self.problem = "chunk data longer than its size"
            self._state = "size"
        elif self._state == "size":
            match = _CHUNK_LINE.fullmatch(line)
            if match is None:
                self.problem = "bad chunk size"
                return
            self._left = int(match.group(1), 16)
            self._state = "data" if self._left else "trailer"
        elif not line:
            self._state = "done"
        else:
            self._trailer += len(line)
            if self._trailer > MAX_TRAILER:
                self.problem = "trailer too long"
            else:
                self.problem = _field_problem(line)
