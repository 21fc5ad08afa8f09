"""What ``acpgate ps`` reads is the operator's alone, from the attacker's side.

The live sessions, what each edge reports of them, the leases and the
processes' memory and CPU are answered only to callers holding the install's
service credential — the key file in the data dir, which nobody but acpgate's
user reads. Against a real ``acpgate serve`` with a live session: calls
without the credential, or with another install's, are refused
(``UNAUTHENTICATED``) and change nothing (a forged activity report does not
show up in ``acpgate ps``); ``acpgate ps`` run with the wrong key says the
services refused it and shows nothing.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import pytest

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2, lifecycle_pb2_grpc
from acpgate_contracts.session.v1 import session_pb2, session_pb2_grpc
from services.common.grpc_auth import GrpcSecurity, open_service_channel
from services.common.service_key import service_key_path
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def refused(call: object) -> str:
    """The status code a call ends with."""
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as exc:
        return exc.code().name
    return "OK"


async def test_ps_data_needs_the_install_credential(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with running_gateway(tmp_path / "gw") as gw:
        token = await gw.token("victim")
        client = RawClient(await gw.connect(token))
        sid = (await client.result("session/new", {"cwd": str(work)}))["sessionId"]
        run = gw.data_dir / "run"
        for credential in ("", "another-install-key-" + "0" * 40):
            # No credential at all, or another install's: a plain channel to the sockets.
            security = GrpcSecurity(token=credential)
            session_channel = (open_service_channel(security, f"unix:{run}/session.sock")
                               if credential else
                               grpc.aio.insecure_channel(f"unix:{run}/session.sock"))
            lifecycle_channel = (open_service_channel(security, f"unix:{run}/lifecycle.sock")
                                 if credential else
                                 grpc.aio.insecure_channel(f"unix:{run}/lifecycle.sock"))
            try:
                s = session_pb2_grpc.SessionServiceStub(session_channel)
                lc = lifecycle_pb2_grpc.LifecycleServiceStub(lifecycle_channel)
                forged = session_pb2.ReportActivityRequest(
                    gateway_instance_id="gw-forged", host="evil", sessions=[
                        session_pb2.SessionActivity(
                            session_id=sid, state=session_pb2.ACTIVITY_STATE_WAITING,
                            waiting_requests=7)])
                codes = [
                    await refused(s.ListLiveSessions(session_pb2.ListLiveSessionsRequest(),
                                                     timeout=10)),
                    await refused(s.ReportActivity(forged, timeout=10)),
                    await refused(lc.ListLeases(lifecycle_pb2.ListLeasesRequest(), timeout=10)),
                    await refused(lc.VerifyOwnedTree(lifecycle_pb2.VerifyOwnedTreeRequest(
                        lease_id="x", with_usage=True), timeout=10)),
                ]
            finally:
                await session_channel.close(None)
                await lifecycle_channel.close(None)
            assert codes == ["UNAUTHENTICATED"] * 4, (credential, codes)

        # What the operator sees is the edge's own report, not the forged one.
        code, out, err = await gw.cli("ps", "--json")
        assert code == 0, err
        (shown,) = [s for s in json.loads(out)["sessions"] if s["session_id"] == sid]
        assert shown["state"] != "waiting" and shown["waiting_requests"] == 0
        assert "evil" not in out

        # ps with a key that is not the install's: refused, and it shows nothing.
        key = service_key_path(gw.data_dir)
        real = key.read_text()
        key.write_text("f" * 64)
        try:
            code, out, err = await gw.cli("ps")
        finally:
            key.write_text(real)
        assert code == 1 and "refused the service credential" in err, (out, err)
        assert sid not in out
        await asyncio.wait_for(client.ws.close(), 30)
