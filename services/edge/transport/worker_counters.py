"""``/metrics`` across edge workers: one worker's counters as a flat table,
and every worker's tables summed back into what :func:`~services.edge.transport.http.
render_metrics` renders.

Each worker sends :func:`counters_of` with its reports to the session service
(:class:`~services.edge.sessions.worker_link.WorkerLink`); the worker that answers ``/metrics``
adds the other live workers' last tables to its own current one (:func:`summed`).
Counters and gauges sum alike (sessions active, connections open: the host's are
every worker's together). What is the host's already — leases by state, the
services' health — is not in the table: the answering worker asks for it as
before.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from services.edge.metrics import Metrics
from services.edge.transport.http import GatewayGauges

__all__ = ["counters_of", "summed"]

#: Fields that are the host's own, not a worker's (asked for by whoever renders).
_HOST_WIDE = frozenset({"leases", "services_up", "worker_connections"})
#: ``name/label`` separates a labelled field's entries in the table.
_SEP = "/"


def _flatten(obj: Any, out: dict[str, int]) -> None:
    for f in dataclasses.fields(obj):
        if f.name in _HOST_WIDE:
            continue
        value = getattr(obj, f.name)
        if isinstance(value, int):
            out[f.name] = value
        elif isinstance(value, Mapping):
            for label, n in value.items():
                out[f"{f.name}{_SEP}{label}"] = int(n)


def counters_of(metrics: Metrics, gauges: GatewayGauges) -> dict[str, int]:
    """One worker's counters and gauges as ``{name: value}`` (``name/label`` for the
    labelled ones)."""
    out: dict[str, int] = {}
    _flatten(metrics, out)
    _flatten(gauges, out)
    return out


def _rebuilt(cls: type[Any], total: Mapping[str, int], **keep: Any) -> Any:
    values: dict[str, Any] = dict(keep)
    for f in dataclasses.fields(cls):
        if f.name in keep:
            continue
        labelled = {k[len(f.name) + 1:]: n for k, n in total.items()
                    if k.startswith(f.name + _SEP)}
        if labelled or f.default_factory is not dataclasses.MISSING:
            if f.name == "errors_total":  # keyed by JSON-RPC code
                values[f.name] = {int(k): n for k, n in labelled.items() if k.lstrip("-").isdigit()}
            else:
                values[f.name] = labelled
        else:
            values[f.name] = total.get(f.name, 0)
    return cls(**values)


def summed(metrics: Metrics, gauges: GatewayGauges,
           peers: Iterable[Mapping[str, int]]) -> tuple[Metrics, GatewayGauges]:
    """This worker's ``metrics`` and ``gauges`` with every peer's table added."""
    total: Counter[str] = Counter(counters_of(metrics, gauges))
    for table in peers:
        total.update(table)
    return (_rebuilt(Metrics, total),
            _rebuilt(GatewayGauges, total, leases=gauges.leases, services_up=gauges.services_up))
