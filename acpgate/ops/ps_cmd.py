"""``acpgate ps [--leases] [--json]``: the live sessions (and leases) of this install.

Text: a header naming what serves the install, then one line per live session
(id, agent, owner, state, age, idle time, title) with its lease and log under
it and its process tree (wrapper, adapter, the adapter's children: PID, RSS,
CPU time, command line); ``--leases`` adds every live lease, warm ones too.
``--json`` prints the same facts for scripts. Exit 0 — also when nothing runs
—, 1 when no service of the install could be reached or asked.
"""

from __future__ import annotations

import os
import sys
import time

from acpgate.ops.client import OpsError, relative_home
from acpgate.ops.ps import LeaseView, PsReport, SessionView, gather
from acpgate.ops.render import as_json, cpu, cut, duration, size, table, terminal_width
from services.common.config import Config

__all__ = ["render_ps", "run_ps"]


def _age(report: PsReport, ms: int) -> str:
    return duration((report.now - ms) / 1000) if ms else "-"


def _command(argv: list[str]) -> str:
    """A command line as a person scans it: the program by its name, not its path."""
    return " ".join([os.path.basename(argv[0]), *argv[1:]]) if argv else "?"


def _processes(lease: LeaseView, width: int) -> list[str]:
    rows = [[str(p.pid), ("  " * max(0, p.depth - 1)) + p.role, size(p.rss_bytes),
             cpu(p.cpu_seconds), _command(p.command)] for p in lease.processes]
    lines = table(["PID", "ROLE", "RSS", "CPU", "COMMAND"], rows, indent="    ")
    return [cut(line, width) for line in lines]


def _session_lines(s: SessionView, width: int) -> list[str]:
    lines = []
    lease = s.lease
    where = f"on {s.served_by}"
    if lease is None:
        lines.append(f"    no lease of it found {where}")
    else:
        state = lease.state if lease.verified else f"{lease.state}, unverified: {lease.why}"
        lines.append(f"    lease {lease.lease_id} ({state}) {where}")
    if s.log:
        lines.append(f"    log {relative_home(s.log)}")
    if s.waiting_requests:
        lines.append(f"    {s.waiting_requests} question(s) to the client waiting")
    if lease is not None and lease.processes:
        lines += _processes(lease, width)
    return lines


def render_ps(report: PsReport, *, with_leases: bool = False) -> str:
    """The text ``acpgate ps`` prints."""
    width = terminal_width()
    served = ", ".join(f"{v.name} {v.gateway}".rstrip() for v in report.services
                       if not v.error) or "nothing"
    out = [f"acpgate ps · {relative_home(report.config_dir)} · served by {served}"]
    out += [f"  unreachable: {v.name}: {v.error}" for v in report.services if v.error]
    out += [f"  {v.name}: sessions in memory only, lost when it stops ({v.store_in_memory})"
            for v in report.services if v.store_in_memory]
    if not report.services:
        out.append("no acpgate service runs for this config dir (`acpgate serve`, or an "
                   "editor's `acpgate acp`)")
    out.append("")
    if not report.sessions:
        out.append("no live sessions")
    else:
        rows = [[s.session_id, s.agent, s.owner, s.state, str(s.clients),
                 _age(report, s.created_at), _age(report, s.last_activity), s.title or "-"]
                for s in report.sessions]
        header, *lines = table(["SESSION", "AGENT", "OWNER", "STATE", "CLIENTS", "AGE", "IDLE",
                                "TITLE"], rows)
        out.append(header)
        for s, line in zip(report.sessions, lines, strict=True):
            out.append(cut(line, width))
            out += _session_lines(s, width)
    if with_leases:
        out += ["", *_lease_table(report, width)]
    return "\n".join(out)


def _lease_table(report: PsReport, width: int) -> list[str]:
    if not report.leases:
        return ["no live leases"]
    rows = [[x.lease_id, x.state, x.session_id or x.session_key, str(x.root_pid or "-"),
             str(x.adapter_pid or "-"), size(x.rss_bytes), cpu(x.cpu_seconds),
             _age(report, x.started_at), x.instance_id] for x in report.leases]
    header = ["LEASE", "STATE", "SESSION/POOL", "WRAPPER", "ADAPTER", "RSS", "CPU", "AGE",
              "INSTANCE"]
    return [cut(line, width) for line in table(header, rows)]


async def run_ps(cfg: Config, *, with_leases: bool, as_json_out: bool) -> int:
    """Gather and print; the exit code."""
    try:
        report = await gather(cfg, with_leases=with_leases)
    except OpsError as exc:
        print(f"acpgate: {exc}", file=sys.stderr)
        return 1
    report.now = int(time.time() * 1000)
    if as_json_out:
        print(as_json(report))
    else:
        print(render_ps(report, with_leases=with_leases))
    # Nothing to show because nothing answered is a failure a script must be able to see.
    return 0 if any(not v.error for v in report.services) else 1
