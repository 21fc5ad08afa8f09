"""A shell command an agent runs gets nothing from acpgate's own services.

The session and lifecycle services listen on unix sockets the agent's shell can
reach (Landlock does not govern ``connect()`` on a socket path), and a shell
learns a lot from its environment. From the attacker's side, against a real
``acpgate serve`` and a real ``acpgate acp``, a command the built-in agent's
shell tool runs (driven by the local attacker model, autonomy ``full``: no
approval asked):

- finds no service address, credential, store password or provider key in its
  environment, and cannot read the install's service key file;
- connects to both services' sockets anyway and is refused every call
  (``UNAUTHENTICATED``): no other token's sessions listed, no history read, no
  session deleted, no process spawned — health checks answer SERVING, nothing
  more;
- connects to the lifecycle service's fd socket too, asks for an
  adapter's pipes with a made-up grant and no credential, and is refused without a
  descriptor (``tests/security/test_fd_channel.py`` has the rest of that door);
- even a caller that holds the credential (the operator's own tools) cannot make
  the lifecycle service run a command the session service did not resolve and
  seal: an unsealed or re-sealed launch spec is ``PERMISSION_DENIED`` and nothing
  starts.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest

from acpgate_contracts.launch.v1 import launch_pb2
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2, lifecycle_pb2_grpc
from acpgate_contracts.session.v1 import session_pb2, session_pb2_grpc
from services.agent.sandbox import landlock_abi
from services.common.config import DEFAULT_FORBIDDEN_PATHS, load_config
from services.common.service_key import service_key_path
from tests.e2e.harness import AcpProcess
from tests.gateway.stack import RawClient
from tests.launches import DATA_PATH_ENV, config_environ, dial, sealed
from tests.security.fake_model import RESULT_MARKER, attacker_model_server
from tests.security.gateway_stack import running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

#: What the attacker's shell command runs: reads its environment and the key file, then
#: calls every service socket it can find without a credential. Prints one JSON object.
PROBE = textwrap.dedent('''
    import glob, json, os, socket, sys
    import grpc
    from acpgate_contracts.launch.v1 import launch_pb2
    from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as lpb, lifecycle_pb2_grpc as lgrpc
    from acpgate_contracts.session.v1 import session_pb2 as spb, session_pb2_grpc as sgrpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    data_dir, victim, marker, *socket_dirs = sys.argv[1:]
    out = {"env": dict(os.environ), "calls": {}}
    try:
        out["key"] = open(os.path.join(data_dir, "run", "service.key")).read()
    except OSError as exc:
        out["key_error"] = type(exc).__name__
    # Landlock may hide a directory's listing, not its entries: try the well-known names too.
    names = ("session.sock", "lifecycle.sock", "s.sock", "l.sock", "lifecycle.fds.sock",
             "l.fds.sock")
    found = sorted({p for d in socket_dirs
                    for p in [*glob.glob(os.path.join(d, "*.sock")),
                              *(os.path.join(d, n) for n in names)] if os.path.exists(p)})
    sockets = [p for p in found if not p.endswith(".fds.sock")]
    out["sockets"] = sockets
    out["fd_sockets"] = {}
    for path in (p for p in found if p.endswith(".fds.sock")):
        # The pipes of any adapter, on a made-up grant and without the credential.
        sock = socket.socket(socket.AF_UNIX)
        sock.settimeout(5)
        try:
            sock.connect(path)
            sock.sendall(json.dumps({"v": 1, "lease_id": "x", "generation": 1,
                                     "grant": "0" * 32, "proof": "0" * 64}).encode() + b"\\n")
            data, fds, _, _ = socket.recv_fds(sock, 4096, 4)
            out["fd_sockets"][path] = {"answer": data.decode(errors="replace"), "fds": len(fds)}
        except OSError as exc:
            out["fd_sockets"][path] = {"error": type(exc).__name__}
        finally:
            sock.close()
    forged = launch_pb2.LaunchSpec(command="/bin/sh", args=["-c", "touch " + marker])
    sealed = launch_pb2.SealedLaunch(spec=forged.SerializeToString(), seal=b"0" * 32)

    def code(call):
        try:
            call()
            return "OK"
        except grpc.RpcError as exc:
            return exc.code().name

    for path in sockets:
        ch = grpc.insecure_channel("unix:" + path)
        s, l = sgrpc.SessionServiceStub(ch), lgrpc.LifecycleServiceStub(ch)
        out["calls"][path] = {
            "health": code(lambda: health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(), timeout=5)),
            "list": code(lambda: s.ListSessions(spb.ListSessionsRequest(), timeout=5)),
            "history": code(lambda: list(s.GetHistory(
                spb.GetHistoryRequest(session_id=victim), timeout=5))),
            "delete": code(lambda: s.DeleteSession(
                spb.DeleteSessionRequest(session_id=victim), timeout=5)),
            "ensure": code(lambda: l.EnsureSession(lpb.EnsureSessionRequest(
                session_key="agent:x:acp:evil", launch=sealed), timeout=5)),
            "leases": code(lambda: l.ListLeases(lpb.ListLeasesRequest(), timeout=5)),
            # What acpgate ps reads and what the edges report.
            "live": code(lambda: s.ListLiveSessions(spb.ListLiveSessionsRequest(), timeout=5)),
            "report": code(lambda: s.ReportActivity(spb.ReportActivityRequest(
                gateway_instance_id="forged"), timeout=5)),
            "usage": code(lambda: l.VerifyOwnedTree(lpb.VerifyOwnedTreeRequest(
                lease_id="x", with_usage=True), timeout=5)),
        }
    print("PROBE" + json.dumps(out))
''')

#: Names whose presence in an agent's environment would hand it a door or a key.
NEVER_IN_ENV = ("ACPGATE_services__session_addr", "ACPGATE_services__lifecycle_addr",
                "ACPGATE_services__token_env", "ACPGATE_SVC_TOKEN", "ACPGATE_PG_PASSWORD",
                "ACPGATE_store__password_env", "ATTACKER_PROVIDER_KEY", "UNRELATED_SECRET")


#: The default forbidden paths without ``/root``: the probe runs acpgate's own Python, which
#: on some machines (root with pyenv) lives under ``/root``; acpgate's config and data dirs
#: stay forbidden whatever this list says.
FORBIDDEN = [p for p in DEFAULT_FORBIDDEN_PATHS if p != "/root"]


#: Which service each probed call belongs to.
SERVICE_OF = {"list": "session", "history": "session", "delete": "session",
              "live": "session", "report": "session",
              "ensure": "lifecycle", "leases": "lifecycle", "usage": "lifecycle"}


def probe_result(tool_output: str) -> dict[str, Any]:
    """The probe's JSON object out of what the model reported."""
    assert "PROBE{" in tool_output, tool_output
    return dict(json.loads(tool_output.split("PROBE", 1)[1].strip().splitlines()[0]))


def assert_got_nothing(result: dict[str, Any], key: str, marker: Path) -> None:
    """Every service call refused; no credential anywhere; nothing spawned."""
    env = result["env"]
    for name in NEVER_IN_ENV:
        assert name not in env, f"{name} reached the agent's shell"
    assert key not in json.dumps(env), "the service key reached the agent's shell"
    if landlock_abi() >= 1:
        assert "key" not in result and result["key_error"] == "PermissionError", result
    assert len(result["sockets"]) == 2, "the probe must reach both services' sockets"
    # The lifecycle's fd socket, where there is one (not with data_path = "grpc").
    fd_sockets = 0 if config_environ().get(DATA_PATH_ENV) == "grpc" else 1
    assert len(result["fd_sockets"]) == fd_sockets, "the probe must reach the fd socket"
    for path, got in result["fd_sockets"].items():
        assert got.get("fds") == 0 and '"ok":false' in got["answer"], (path, got)
    refused_by = {"session": set(), "lifecycle": set()}
    for path, calls in result["calls"].items():
        assert calls["health"] == "OK", (path, calls)  # health only says SERVING
        for name, got in calls.items():
            if name == "health":
                continue
            # The other service's methods are unknown on this socket; its own are refused.
            assert got in ("UNAUTHENTICATED", "UNIMPLEMENTED"), (path, calls)
            if got == "UNAUTHENTICATED":
                refused_by[SERVICE_OF[name]].add(path)
    assert all(refused_by.values()), f"both services must have refused the probe: {result}"
    assert not marker.exists(), "a forged launch spec ran"


def probe_command(probe: Path, data_dir: Path, victim: str, marker: Path,
                  socket_dirs: list[str]) -> str:
    """The shell command that runs the probe with acpgate's own interpreter, aimed at the
    sockets of this install only (other acpgate processes may run on the machine). The
    paths are spelled so that no literal path check sees them, as an attacker would."""
    dirs = " ".join(hidden(d) for d in socket_dirs)
    return f"{sys.executable} {probe} {hidden(str(data_dir))} {victim} {marker} {dirs} 2>&1"


def hidden(path: str) -> str:
    """``path`` spelled so that no literal path check can see it."""
    return f"$(echo {base64.b64encode(path.encode()).decode()} | base64 -d)"


async def tool_output(client: RawClient, sid: str, prompt: str) -> str:
    """What the shell the attacker asked for printed (as the model reported it)."""
    result = await client.result("session/prompt", {"sessionId": sid, "prompt": prompt})
    content = str(result["content"])
    assert RESULT_MARKER in content, content
    return content.split(RESULT_MARKER, 1)[1]


async def test_a_gateway_agents_shell_gets_nothing_from_the_service_sockets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A token holder's agent, autonomy full, attacks the services of ``acpgate serve``."""
    # acpgate's own environment carries what an agent must never see: a provider key, a
    # store password variable, an unrelated secret of the operator's shell (and serve pins
    # the service addresses into its children's environment).
    monkeypatch.setenv("ATTACKER_PROVIDER_KEY", "sk-provider-key-0123456789")
    monkeypatch.setenv("ACPGATE_PG_PASSWORD", "store-password-0123456789")
    monkeypatch.setenv("UNRELATED_SECRET", "operator-shell-secret")
    project = tmp_path / "project"
    project.mkdir()
    probe = project / "probe.py"
    probe.write_text(PROBE)
    marker = tmp_path / "forged-spawn-ran"
    async with running_gateway(tmp_path / "gw", autonomy="full",
                               autonomy_extra=f"forbidden_paths = {json.dumps(FORBIDDEN)}") as gw:
        key = service_key_path(gw.data_dir).read_text().strip()
        victim_token, attacker_token = await gw.token("victim"), await gw.token("attacker")
        victim = RawClient(await gw.connect(victim_token))
        victim_sid = (await victim.result("session/new", {"agentAlias": "demo"}))["sessionId"]
        await victim.result("session/prompt", {"sessionId": victim_sid,
                                               "prompt": "the victim's secret plans"})
        attacker = RawClient(await gw.connect(attacker_token))
        sid = (await attacker.result("session/new", {"cwd": str(project)}))["sessionId"]
        out = await tool_output(attacker, sid, "shell " + probe_command(
            probe, gw.data_dir, victim_sid, marker, [str(gw.data_dir / "run")]))
        result = probe_result(out)
        assert_got_nothing(result, key, marker)
        assert "the victim's secret plans" not in out
        # The victim's session is untouched: still there, history whole.
        await victim.result("session/close", {"sessionId": victim_sid})
        messages, resp = await victim.call("session/load", {"sessionId": victim_sid})
        assert "result" in resp, resp
        assert "the victim's secret plans" in json.dumps(messages)
        await attacker.ws.close()
        await victim.ws.close()


async def test_an_embedded_acp_agents_shell_gets_nothing_from_its_sockets(
        tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    probe = project / "probe.py"
    probe.write_text(PROBE)
    marker = tmp_path / "forged-spawn-ran"
    async with attacker_model_server() as model:
        cfg_dir = tmp_path / "cfg"
        cfg_dir.mkdir()
        (cfg_dir / "config.toml").write_text(textwrap.dedent(f"""
            [acp]
            default_agent = "attacker"

            [autonomy]
            level = "full"
            forbidden_paths = {json.dumps(FORBIDDEN)}

            [agents.attacker]
            kind = "builtin"
            provider = "openai"
            model = "attacker"
            base_url = "{model.url}/v1"
            max_retries = 0

            [agents.demo]
            kind = "builtin"
            provider = "demo"
            model = "demo"
        """))
        acp = AcpProcess(cfg_dir)
        try:
            await asyncio.to_thread(acp.result, "initialize", {"protocolVersion": 1})
            own = await asyncio.to_thread(acp.new_session, agentAlias="demo")
            sid = await asyncio.to_thread(acp.new_session, cwd=str(project))
            data_dir = cfg_dir / "data"
            key = service_key_path(data_dir).read_text().strip()
            # The embedded services' private sockets, which serve other clients too.
            socket_dirs = await asyncio.to_thread(_socket_dirs_of, acp.proc.pid)
            assert len(socket_dirs) == 1, socket_dirs
            command = probe_command(probe, data_dir, own, marker, socket_dirs)
            result = await asyncio.to_thread(
                acp.result, "session/prompt", {"sessionId": sid, "prompt": "shell " + command})
            out = str(result["content"]).split(RESULT_MARKER, 1)[1]
            assert_got_nothing(probe_result(out), key, marker)
        finally:
            await asyncio.to_thread(acp.close)


def _socket_dirs_of(pid: int) -> list[str]:
    """The ``/tmp/acpg-*`` dirs whose sockets process ``pid`` listens on."""
    dirs = set()
    for conn in psutil.Process(pid).net_connections(kind="unix"):
        path = str(conn.laddr or "")
        if "/acpg-" in path:
            dirs.add(os.path.dirname(path))
    return sorted(dirs)


async def test_only_launch_specs_the_session_service_sealed_are_run(tmp_path: Path) -> None:
    """The operator's credential is no licence to run commands: the lifecycle service runs
    only what the session service resolved from configuration (its seal)."""
    marker = tmp_path / "forged-spawn-ran"
    async with running_gateway(tmp_path / "gw") as gw:
        cfg = load_config(gw.config_dir, environ={})
        address = f"unix:{gw.data_dir}/run/lifecycle.sock"
        forged = ["/bin/sh", "-c", f"touch {marker}"]
        spec = launch_pb2.LaunchSpec(command=forged[0], args=forged[1:])
        async with dial(cfg, address) as channel:
            stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
            attempts = {
                "no launch": launch_pb2.SealedLaunch(),
                "unsealed": launch_pb2.SealedLaunch(spec=spec.SerializeToString()),
                "another key": sealed(b"another install's seal key", forged[0], forged[1:]),
                # The seal of a real spec, with another spec under it.
                "swapped": _swapped(await _real_launch(cfg, gw.data_dir), spec),
            }
            for what, launch in attempts.items():
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.EnsureSession(lifecycle_pb2.EnsureSessionRequest(
                        session_key="agent:x:acp:evil", launch=launch))
                assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, what
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.KeepWarm(lifecycle_pb2.KeepWarmRequest(
                        pool="evil", launch=launch, count=1))
                assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, what
                call = stub.Attach(iter([lifecycle_pb2.AttachRequest(open=lifecycle_pb2.AttachOpen(
                    ensure=lifecycle_pb2.EnsureSessionRequest(session_key="agent:x:acp:evil2",
                                                             launch=launch)))]))
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    async for _ in call:
                        pass
                assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, what
            leases = await stub.ListLeases(lifecycle_pb2.ListLeasesRequest())
            assert not any("evil" in x.session_key for x in leases.leases)
        await asyncio.sleep(0.5)
        assert not marker.exists()


async def _real_launch(cfg: Any, data_dir: Path) -> launch_pb2.SealedLaunch:
    """A launch spec the install's session service sealed (what the edge passes on)."""
    async with dial(cfg, f"unix:{data_dir}/run/session.sock") as channel:
        agent = await session_pb2_grpc.SessionServiceStub(channel).ResolveAgent(
            session_pb2.ResolveAgentRequest(explicit_alias="demo"))
    assert agent.launch.seal
    return agent.launch


def _swapped(real: launch_pb2.SealedLaunch, spec: launch_pb2.LaunchSpec) -> launch_pb2.SealedLaunch:
    return launch_pb2.SealedLaunch(spec=spec.SerializeToString(), seal=real.seal)
