"""Which edge worker a request belongs to, from its head alone.

Three marks name a worker, each minted by that worker:

- an ``Acp-Connection-Id`` of a worker starts ``w<k>-`` (then a random UUID: the
  unguessable part, and a connection id is still good only with its token);
- the affinity cookie (set by a WebSocket 101 and the first POST) is
  ``<host digest>-w<k>``: the host's part lets a load balancer keep a client on this
  host, the worker's part lets this host keep it on its worker;
- ``?worker=<k>`` on the URL, for a client that sets neither (what the "Session
  already active" error of a session served by a sibling names).

A mark naming this worker, a worker this host does not run, or another host is
no mark: the request is answered here, exactly as before.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Final

from services.common.remote_transport import AFFINITY_COOKIE, H_CONNECTION_ID
from services.edge.transport.exchange import HttpRequest

__all__ = ["QUERY_WORKER", "Ownership", "cookie_value", "host_digest"]

#: The URL query parameter that names a worker.
QUERY_WORKER: Final = "worker"
_CID = re.compile(r"w([1-9][0-9]{0,3})-")


def host_digest(host_instance_id: str) -> str:
    """The host's part of the affinity cookie: a digest of its instance id (16 hex)."""
    return hashlib.sha256(host_instance_id.encode()).hexdigest()[:16]


def cookie_value(host_instance_id: str, worker: int) -> str:
    """The affinity cookie's value for ``worker`` of that host (0: a lone edge's)."""
    digest = host_digest(host_instance_id)
    return f"{digest}-w{worker}" if worker else digest


@dataclass(frozen=True)
class Ownership:
    """This worker's number, how many the host runs, and the host's cookie digest."""

    worker: int
    workers: int
    host_instance_id: str

    def connection_id(self, random_part: str) -> str:
        """An ``Acp-Connection-Id`` that names this worker."""
        return f"w{self.worker}-{random_part}"

    def owner(self, request: HttpRequest) -> int:
        """The sibling ``request`` belongs to, or 0: this worker answers it."""
        for found in (self._by_connection_id(request), self._by_cookie(request),
                      self._by_query(request)):
            if found:
                return found if self._sibling(found) else 0
        return 0

    def _sibling(self, worker: int) -> bool:
        return worker != self.worker and 1 <= worker <= self.workers

    def _by_connection_id(self, request: HttpRequest) -> int:
        cid = request.headers.get(H_CONNECTION_ID)
        match = _CID.match(cid.strip()) if cid is not None else None
        return int(match.group(1)) if match else 0

    def _by_cookie(self, request: HttpRequest) -> int:
        prefix = f"{AFFINITY_COOKIE}={host_digest(self.host_instance_id)}-w"
        for header in request.headers.get_all("cookie"):
            for part in header.split(";"):
                part = part.strip()
                if part.startswith(prefix) and part[len(prefix):].isdigit():
                    return int(part[len(prefix):][:5])
        return 0

    def _by_query(self, request: HttpRequest) -> int:
        values = request.query.get(QUERY_WORKER, [])
        return int(values[0][:5]) if values and values[0].isdigit() else 0
