"""A gateway client's session params are checked before any slot is (SPEC §3, §8; ACP cwd).

A real ``acpgate serve``. A relative ``cwd`` means nothing to a gateway client (the
server's working directory is not its own): session/new, fork, load and resume answer
-32602 "cwd must be an absolute path" before anything is taken, while ``"."`` stays
SPEC §3's placeholder (the agent workspace). A request with bad params over the token's
share gets its params' error, not -32001: a fork naming another workspace, a session/new
naming a directory that does not exist.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.common.protocol import MSG_CWD_NOT_ABSOLUTE, MSG_FORK_CWD, SESSION_LIMIT
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


async def error_of(client: RawClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    _, resp = await client.call(method, params)
    assert "error" in resp, resp
    return dict(resp["error"])


async def test_relative_cwds_and_bad_params_over_the_share(tmp_path: Path) -> None:
    work = tmp_path / "work"
    elsewhere = tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    async with running_gateway(tmp_path, max_sessions=1) as gw:
        client = RawClient(await gw.connect(await gw.token("laptop")))
        placeholder = await client.result("session/new", {"cwd": "."})
        assert placeholder["workspaceDir"] != str(Path.cwd()), placeholder
        sid = placeholder["sessionId"]
        assert "echo: hi" in await client.say(sid, "hi")
        for method, params in (("session/new", {"cwd": "work"}),
                               ("session/new", {"workspaceDir": "../work"}),
                               ("session/fork", {"sessionId": sid, "cwd": "work"}),
                               ("session/load", {"sessionId": sid, "cwd": "work"}),
                               ("session/resume", {"sessionId": sid, "cwd": "./work"})):
            error = await error_of(client, method, params)
            cwd = params.get("cwd", params.get("workspaceDir"))
            assert error == {"code": -32602, "message": MSG_CWD_NOT_ABSOLUTE.format(cwd=cwd)}, \
                (method, error)

        # The one slot is taken: params still answer first, then the limit.
        moved = await error_of(client, "session/fork", {"sessionId": sid, "cwd": str(elsewhere)})
        assert moved["code"] == -32602, moved
        assert moved["message"] == MSG_FORK_CWD.format(
            workspace=placeholder["workspaceDir"], cwd=elsewhere), moved
        missing = await error_of(client, "session/new", {"cwd": str(tmp_path / "nope")})
        assert missing["code"] == -32602 and "not a usable directory" in missing["message"]
        unknown = await error_of(client, "session/new", {"agentAlias": "ghost"})
        assert unknown["code"] == -32602 and "ghost" in unknown["message"], unknown
        assert (await error_of(client, "session/fork", {"sessionId": sid}))["code"] == \
            SESSION_LIMIT
        assert (await error_of(client, "session/new", {"cwd": str(work)}))["code"] == \
            SESSION_LIMIT
        await client.ws.close()
