"""Gateway tokens are compared in constant time and never logged (SPEC §11).

Against a real ``acpgate serve`` logging at debug: tokens presented every way
a client can (header, subprotocol, query), good, bad, near misses, revoked,
and a plain GET with the token in the query — not one of the secrets, nor
their SHA-256 digests, appears in any process's log, nor in ``acpgate token
list``. In process: every check compares the presented digest with every
active digest (``hmac.compare_digest``, equal lengths, no early exit), so the
time does not depend on which token matched, or how much of one.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus

from services.edge import tokens as tokens_module
from services.edge.tokens import TokenStore
from tests.gateway.stack import RawClient
from tests.gateway.wsfixtures import http_get
from tests.security.gateway_stack import Gateway, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def attempts(gw: Gateway, secret: str) -> list[bool]:
    """Connect with ``secret`` as header, subprotocol and query: which were let in."""
    from websockets.asyncio.client import connect
    from websockets.typing import Subprotocol

    tries: list[dict[str, Any]] = [
        {"additional_headers": {"Authorization": f"Bearer {secret}"}},
        {"subprotocols": [Subprotocol(f"bearer.{secret}")]},
        {"query": secret},
    ]
    out = []
    for kw in tries:
        url = gw.url + (f"?token={kw.pop('query')}" if "query" in kw else "")
        try:
            ws = await connect(url, proxy=None, **kw)
        except InvalidStatus as exc:
            assert exc.response.status_code == 401
            out.append(False)
            continue
        assert (await RawClient(ws).result("initialize", {}))["protocolVersion"] == 1
        await ws.close()
        out.append(True)
    return out


async def test_no_token_ever_reaches_a_log(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, log_level="debug") as gw:
        good, doomed = await gw.token("good"), await gw.token("doomed")
        near_miss = good.secret[:-1] + ("A" if good.secret[-1] != "A" else "B")
        forged = "acpg_" + "x" * 43
        assert await attempts(gw, good.secret) == [True, True, True]
        assert await attempts(gw, near_miss) == [False, False, False]
        assert await attempts(gw, forged) == [False, False, False]
        await gw.revoke(doomed)
        assert await attempts(gw, doomed.secret) == [False, False, False]
        # Not a WebSocket handshake at all, the token in the query.
        status, _, _ = await http_get(f"http://127.0.0.1:{gw.port}/acp?token={good.secret}")
        assert status >= 400
        _, listing, _ = await gw.cli("token", "list")
        secrets = [good.secret, doomed.secret, near_miss, forged]
        digests = [hashlib.sha256(s.encode()).hexdigest() for s in secrets]
        text = gw.log.read_text(errors="replace")
        assert any(e.get("event") == "ws_unauthorized" for e in gw.events())  # it did log
        for needle in (*secrets, *digests):
            assert needle not in text and needle not in listing
        assert good.token_id in listing  # ids are fine to show


def test_every_check_compares_with_every_active_token(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    store = TokenStore(tmp_path / "tokens.db")
    minted = [store.create(f"t{i}") for i in range(5)]
    store.revoke(minted[2][0])
    compared: list[tuple[str, str]] = []
    real_compare = hmac.compare_digest

    def counting(a: str, b: str) -> bool:
        compared.append((a, b))
        return real_compare(a, b)

    monkeypatch.setattr(tokens_module.hmac, "compare_digest", counting)
    for secret, expected in [(minted[0][1], minted[0][0]), (minted[4][1], minted[4][0]),
                             (minted[2][1], None), ("acpg_nope", None), ("x", None)]:
        compared.clear()
        assert store.identify(secret) == expected
        # Four active tokens, four comparisons — whichever matched, wherever it sits.
        assert len(compared) == 4
        assert all(len(a) == len(b) == 64 for a, b in compared)  # digests, never the secret
        assert all(secret not in (a, b) for a, b in compared)


def test_a_presented_token_never_shows_in_its_repr() -> None:
    from services.edge.transport.auth import extract_token

    token = extract_token("Bearer acpg_secret-value", [], "/acp")
    assert token is not None and "acpg_secret-value" not in repr(token)
