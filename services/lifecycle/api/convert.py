"""The lifecycle service's records as its proto messages (the servicer's translations).

Pure: no I/O; the servicer (:mod:`services.lifecycle.api.servicer`) and nothing else
builds answers with these.
"""

from __future__ import annotations

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from services.lifecycle.attach.channel import ExitInfo
from services.lifecycle.controller import Ensured
from services.lifecycle.leases.store import LeaseRecord, LeaseState
from services.lifecycle.processes.verify import Verification
from services.lifecycle.reaping.reaper import CloseResult

__all__ = ["PB_TO_STATE", "STATE_TO_PB", "ensured_to_pb", "exit_to_pb", "lease_to_pb",
           "reap_result_to_pb", "stdout_response", "verification_to_pb"]

STATE_TO_PB = {
    LeaseState.OPEN: pb.LEASE_STATE_OPEN,
    LeaseState.CLOSING: pb.LEASE_STATE_CLOSING,
    LeaseState.CLOSED: pb.LEASE_STATE_CLOSED,
    LeaseState.LOST: pb.LEASE_STATE_LOST,
    LeaseState.WARM: pb.LEASE_STATE_WARM,
}
PB_TO_STATE = {v: k for k, v in STATE_TO_PB.items()}


def lease_to_pb(lease: LeaseRecord) -> pb.Lease:
    """A lease record as the proto ``Lease``."""
    msg = pb.Lease(
        lease_id=lease.lease_id,
        gateway_instance_id=lease.gateway_instance_id,
        session_key=lease.session_key,
        wrapper_root=lease.wrapper_root,
        wrapper_path=lease.wrapper_path,
        root_pid=lease.root_pid,
        command_hash=lease.command_hash,
        started_at=lease.started_at,
        state=STATE_TO_PB[lease.state],
        root_start_time=lease.root_start_time,
        adapter_pid=lease.adapter_pid,
        ended_at=lease.ended_at,
    )
    if lease.process_group_id is not None:
        msg.process_group_id = lease.process_group_id
    if lease.exit_code is not None:
        msg.exit_code = lease.exit_code
    if lease.exit_signal is not None:
        msg.exit_signal = lease.exit_signal
    return msg


def verification_to_pb(v: Verification) -> pb.VerifyOwnedTreeResponse:
    """A verification as the proto response."""
    return pb.VerifyOwnedTreeResponse(
        verified=v.verified,
        reason=v.reason,
        root_gone=v.root_gone,
        processes=[
            pb.OwnedProcess(
                pid=p.info.pid,
                ppid=p.info.ppid,
                pgid=p.info.pgid,
                start_time=p.info.start_time,
                cmdline=list(p.info.cmdline),
                depth=p.depth,
            )
            for p in v.processes
        ],
    )


def exit_to_pb(info: ExitInfo | None) -> pb.AdapterExit:
    """The adapter's exit for the last Attach response (-1: not known)."""
    return pb.AdapterExit(
        exit_code=info.exit_code if info else -1,
        signal=info.signal if info else 0,
        stderr_tail=info.stderr_tail if info else "",
    )


def reap_result_to_pb(r: CloseResult) -> pb.ReapResult:
    """One lease's reap as the proto ``ReapResult``."""
    return pb.ReapResult(
        lease_id=r.lease.lease_id if r.lease else "",
        state=STATE_TO_PB[r.lease.state] if r.lease else pb.LEASE_STATE_UNSPECIFIED,
        terminated_pids=list(r.terminated_pids),
        surviving_pids=list(r.surviving_pids),
        unverified_reason=r.unverified_reason,
    )


def stdout_response(lines: list[str]) -> pb.AttachResponse:
    """An ``AttachResponse`` carrying ``lines``.

    Filled with ``extend``: ``AttachResponse(stdout=Lines(lines=...))`` builds the
    ``Lines`` and then copies it into the response, line by line through a slow
    generic path (~18× the cost per line, measured; bench/PROFILE.md).
    """
    response = pb.AttachResponse()
    response.stdout.lines.extend(lines)
    return response


def ensured_to_pb(ensured: Ensured) -> pb.EnsureSessionResponse:
    """What an ensure did, as EnsureSession answers it."""
    return pb.EnsureSessionResponse(
        lease=lease_to_pb(ensured.lease), spawned=ensured.spawned, warm=ensured.warm)
