"""``[gateway] public_url`` (across hosts): checked when the config loads.

The URL is sent to every client that attaches to one of this host's sessions through
another host, so it must be an address a client can reconnect to (ws, wss, http or
https, with a host) and never a token-bearing string: userinfo, a query or a fragment
is refused at load, with a message that does not repeat the value.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common import config as cm

SECRET = "s3cr3t-token"


@pytest.mark.parametrize("url", [
    "wss://a.example.com/acp",
    "ws://10.0.0.5:42617/acp",
    "https://gateway.example.com/team/acp",
    "http://[::1]:8080/acp",
])
def test_a_reachable_url_is_kept(tmp_path: Path, url: str) -> None:
    cfg = cm.load_config(tmp_path, environ={"ACPGATE_gateway__public_url": url})
    assert cfg.gateway.public_url == url


def test_the_default_is_none_and_a_file_value_is_read(tmp_path: Path) -> None:
    assert cm.load_config(tmp_path, environ={}).gateway.public_url == ""
    (tmp_path / "config.toml").write_text(
        '[gateway]\npublic_url = "wss://a.example.com/acp"\n', encoding="utf-8")
    assert cm.load_config(tmp_path, environ={}).gateway.public_url == "wss://a.example.com/acp"


@pytest.mark.parametrize(("url", "why"), [
    (f"wss://alice:{SECRET}@a.example.com/acp", "userinfo"),
    (f"wss://{SECRET}@a.example.com/acp", "userinfo"),
    (f"https://a.example.com/acp?token={SECRET}", "query"),
    (f"https://a.example.com/acp#{SECRET}", "fragment"),
    (f"ftp://a.example.com/{SECRET}", "ws://, wss://, http:// or https://"),
    (f"a.example.com/{SECRET}", "ws://, wss://, http:// or https://"),
    (f"wss:///{SECRET}", "no host"),
    (f"wss://a.example.com:99999/{SECRET}", "not a URL"),
    (f"wss://a.example.com/ {SECRET}", "whitespace"),
])
def test_a_url_clients_could_not_use_or_that_carries_a_secret_is_refused(
        tmp_path: Path, url: str, why: str) -> None:
    with pytest.raises(cm.ConfigError) as err:
        cm.load_config(tmp_path, environ={"ACPGATE_gateway__public_url": url})
    message = str(err.value)
    assert "[gateway] public_url" in message and why in message, message
    assert SECRET not in message  # never echoed: it may be a credential
