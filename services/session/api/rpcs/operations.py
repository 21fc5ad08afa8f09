"""Session RPC deciding an external adapter's client-method requests (SPEC §12).

An adapter behind the edge may ask its client to read or write a file
(``fs/*``) or to run a command (``terminal/create``). Whether the session's
policy admits that is decided here, like every other policy decision
(ARCHITECTURE rule 3): the policy of the row's alias, workspace and extra roots
(:func:`services.session.decisions.policy.policy_for`; a spawned session's autonomy capped
by its ancestors', :mod:`services.session.decisions.lineage`) and the shared path rules of
:mod:`services.common.path_policy`. The edge relays or serves the request
only after an ``allowed`` answer.
"""

from __future__ import annotations

import asyncio

import grpc

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.grpc_server import abort
from services.common.path_policy import PolicyViolation, check_read, check_write, may_run_shell
from services.common.policy import SecurityPolicy, cap_policy
from services.session.api.rpcs.base import Ctx, RpcBase
from services.session.decisions.lineage import effective_autonomy
from services.session.decisions.policy import policy_for

__all__ = ["OperationRpcs", "decide"]


def decide(policy: SecurityPolicy, operation: int, path: str) -> pb.CheckOperationResponse:
    """The answer for one operation under ``policy`` (blocking: resolves real paths)."""
    try:
        if operation == pb.OPERATION_READ:
            real = check_read(policy, path)
        elif operation == pb.OPERATION_WRITE:
            real = check_write(policy, path)
        elif operation == pb.OPERATION_EXECUTE:
            if not may_run_shell(policy):
                raise PolicyViolation("autonomy is readonly: commands are not allowed")
            real = check_read(policy, path or policy.workspace_dir)
        else:
            raise PolicyViolation("unknown operation")
    except PolicyViolation as exc:
        return pb.CheckOperationResponse(allowed=False, reason=str(exc))
    return pb.CheckOperationResponse(allowed=True, resolved_path=str(real))


class OperationRpcs(RpcBase):
    """CheckOperation."""

    async def CheckOperation(
        self, request: pb.CheckOperationRequest, context: Ctx
    ) -> pb.CheckOperationResponse:
        """Whether the session's policy admits the operation on ``path``."""
        rec = await self._get(request.session_id, context)
        if rec.agent_alias not in self._cfg.agents:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION,
                        f"agent {rec.agent_alias} is no longer configured")
        policy = policy_for(self._cfg, rec.agent_alias, rec.workspace_dir,
                            rec.additional_directories)
        # A spawned session never has more autonomy than its ancestors.
        policy = cap_policy(policy, await effective_autonomy(self._cfg, self._store, rec))
        return await asyncio.to_thread(decide, policy, request.operation, request.path)
