"""Config: precedence (SPEC §0), `config set` round trip, clean errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from services.common import config as cm
from services.common.config.coerce import coerce_value


def write(dir_: Path, text: str) -> None:
    dir_.mkdir(parents=True, exist_ok=True)
    (dir_ / "config.toml").write_text(text, encoding="utf-8")


def test_defaults_without_file(tmp_path: Path) -> None:
    cfg = cm.load_config(tmp_path, environ={})
    assert cfg.acp.max_sessions == 10
    assert cfg.acp.session_timeout_secs == 3600
    assert cfg.gateway.port == 42617
    assert cfg.gateway.host == "127.0.0.1"
    assert cfg.gateway.require_auth is True
    # A gateway client's mcpServers: none by default.
    assert cfg.gateway.client_mcp_servers == "none"
    assert cfg.gateway.client_mcp_allow_hosts == ()
    assert cfg.data_dir == tmp_path / "data"
    assert cfg.session_db_path == tmp_path / "data" / "sessions" / "acp-sessions.db"
    assert cfg.agent_workspace("x") == tmp_path / "agents" / "x" / "workspace"


def test_precedence_flag_beats_env_beats_file(tmp_path: Path) -> None:
    write(tmp_path, "[acp]\nmax_sessions = 3\nsession_timeout_secs = 50\ndefault_agent = 'a'\n")
    env = {"ACPGATE_acp__max_sessions": "5", "ACPGATE_acp__default_agent": "b"}
    cfg = cm.load_config(tmp_path, environ=env)
    assert cfg.acp.max_sessions == 5  # env beats file
    assert cfg.acp.session_timeout_secs == 50  # file beats default
    assert cfg.acp.default_agent == "b"
    cfg = cm.load_config(tmp_path, environ=env, overrides={"acp.max_sessions": 7})
    assert cfg.acp.max_sessions == 7  # flag beats env


def test_env_agent_override_and_dispatchability(tmp_path: Path) -> None:
    write(tmp_path, "[agents.a]\nkind = 'builtin'\nprovider = 'demo'\n")
    cfg = cm.load_config(tmp_path, environ={})
    assert not cfg.agents["a"].dispatchable  # no model
    cfg = cm.load_config(tmp_path, environ={"ACPGATE_agents__a__model": "demo"})
    assert cfg.agents["a"].dispatchable
    assert cfg.agents["a"].default_model == "demo/demo"


def test_warm_defaults_by_kind_and_bounds(tmp_path: Path) -> None:
    """[agents.<alias>] warm: 1 for a built-in agent, 0 for an acp agent unless set."""
    write(tmp_path, "[agents.b]\nkind = 'builtin'\n[agents.e]\nkind = 'acp'\ncommand = 'x'\n"
                    "[agents.f]\nkind = 'acp'\ncommand = 'x'\nwarm = 3\n"
                    "[agents.g]\nkind = 'builtin'\nwarm = 0\n")
    cfg = cm.load_config(tmp_path, environ={})
    assert {a: cfg.agents[a].warm for a in "befg"} == {"b": 1, "e": 0, "f": 3, "g": 0}
    assert cm.AgentSection(alias="x").warm == 1 and cm.AgentSection(alias="y", kind="acp").warm == 0
    assert cm.load_config(tmp_path, environ={"ACPGATE_agents__e__warm": "2"}).agents["e"].warm == 2
    for bad in ("-2", "257"):
        with pytest.raises(cm.ConfigError, match=r"\[agents.e\] warm: expected an integer in 0..256"):
            cm.load_config(tmp_path, environ={"ACPGATE_agents__e__warm": bad})


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[acp]\nmax_sessions = 'lots'\n", "[acp] max_sessions: expected integer"),
        ("[acp]\nmax_session = 3\n", "unknown key 'max_session'"),
        ("[nope]\nx = 1\n", "unknown section [nope]"),
        ("[acp\n", "invalid TOML"),
        ("[autonomy]\nlevel = 'yolo'\n", "[autonomy] level: expected one of"),
        ("[agents.a]\nkind = 'builtin'\nargs = 'x'\n", "[agents.a] args: expected array of strings"),
        ("[gateway]\nport = 70000\n", "[gateway] port"),
        ("[gateway]\nmax_connections_per_token = -1\n", "[gateway] max_connections_per_token"),
        ("[autonomy]\nallow_cwd = '/tmp'\n", "[autonomy] allow_cwd: expected array of strings"),
        ("[gateway]\nclient_mcp_servers = 'stdio'\n",
         "[gateway] client_mcp_servers: expected one of 'none', 'http', 'all'"),
        ("[gateway]\nclient_mcp_allow_hosts = ['10.0.0.0/8', 'http://x']\n",
         "[gateway] client_mcp_allow_hosts: 'http://x' is not a host name, an IP address"),
    ],
)
def test_broken_config_names_file_key_and_type(tmp_path: Path, text: str, needle: str) -> None:
    write(tmp_path, text)
    with pytest.raises(cm.ConfigError) as err:
        cm.load_config(tmp_path, environ={})
    assert needle in str(err.value)
    if "TOML" not in needle:
        assert str(tmp_path / "config.toml") in str(err.value)


def test_client_mcp_keys_from_file_and_env(tmp_path: Path) -> None:
    write(tmp_path, "[gateway]\nclient_mcp_servers = 'http'\n"
                    "client_mcp_allow_hosts = ['mcp.internal', '10.1.0.0/16', '::1']\n")
    cfg = cm.load_config(tmp_path, environ={})
    assert cfg.gateway.client_mcp_servers == "http"
    assert cfg.gateway.client_mcp_allow_hosts == ("mcp.internal", "10.1.0.0/16", "::1")
    env = {"ACPGATE_gateway__client_mcp_servers": "all",
           "ACPGATE_gateway__client_mcp_allow_hosts": "a.example, 192.168.1.5"}
    cfg = cm.load_config(tmp_path, environ=env)
    assert cfg.gateway.client_mcp_servers == "all"
    assert cfg.gateway.client_mcp_allow_hosts == ("a.example", "192.168.1.5")


def test_env_value_type_checked(tmp_path: Path) -> None:
    with pytest.raises(cm.ConfigError, match=r"environment: \[acp\] max_sessions: expected integer"):
        cm.load_config(tmp_path, environ={"ACPGATE_acp__max_sessions": "many"})


@pytest.mark.parametrize(
    ("text", "type_name", "value"),
    [
        (" 42 ", "int", 42),
        ("Yes", "bool", True),
        ("off", "bool", False),
        ("a, b,, c", "tuple[str, ...]", ("a", "b", "c")),
        ("['a, b', 'c']", "tuple[str, ...]", ("a, b", "c")),
        ("{ A = 'x' }", "Mapping[str, str]", {"A": "x"}),
    ],
)
def test_env_and_cli_text_is_parsed_to_the_declared_type(
    text: str, type_name: str, value: object
) -> None:
    assert coerce_value(text, type_name, "W", from_text=True) == value


@pytest.mark.parametrize(
    ("raw", "type_name", "message"),
    [
        ("3", "int", "W: expected integer, got '3'"),  # file values are never parsed
        (True, "int", "W: expected integer, got True"),  # a TOML bool is not an int
        ("maybe", "bool", "W: expected boolean, got 'maybe'"),
        (["a", 1], "tuple[str, ...]", "W: expected array of strings, got ['a', 1]"),
        ({"A": 1}, "Mapping[str, str]", "W: expected table of strings, got {'A': 1}"),
    ],
)
def test_file_values_must_already_have_the_declared_type(
    raw: object, type_name: str, message: str
) -> None:
    with pytest.raises(cm.ConfigError) as err:
        coerce_value(raw, type_name, "W", from_text=False)
    assert str(err.value) == message


def test_parsed_text_of_the_wrong_shape_reports_what_it_parsed_to() -> None:
    with pytest.raises(cm.ConfigError) as err:
        coerce_value("[1, 2]", "tuple[str, ...]", "W", from_text=True)
    assert str(err.value) == "W: expected array of strings, got [1, 2]"
    with pytest.raises(cm.ConfigError) as err:
        coerce_value("{ A = ", "Mapping[str, str]", "W", from_text=True)
    assert str(err.value) == "W: expected table of strings, got '{ A = '"


def test_package_reexports_every_public_name() -> None:
    # Importers keep writing `from services.common.config import X` after the split.
    for name in cm.__all__:
        assert getattr(cm, name) is not None, name
    assert {"Config", "ConfigError", "load_config", "set_value", "get_value", "show",
            "AgentSection", "DEFAULT_CONFIG_TOML", "resolve_config_dir"} <= set(cm.__all__)


def test_set_round_trip_preserves_rest_of_file(tmp_path: Path) -> None:
    write(tmp_path, "# my comment\n[acp]\nmax_sessions = 3 # keep\n\n[agents.a]\nkind = 'acp'\ncommand = 'x'\n")
    assert cm.set_value(tmp_path, "acp.default_agent", "a") == "a"
    assert cm.set_value(tmp_path, "gateway.port", "4000") == 4000
    assert cm.set_value(tmp_path, "agents.a.args", "--x, --y") == ("--x", "--y")
    assert cm.set_value(tmp_path, "gateway.tls.cert_file", "/c.pem") == "/c.pem"
    text = (tmp_path / "config.toml").read_text()
    assert "# my comment" in text and "# keep" in text
    cfg = cm.load_config(tmp_path, environ={})
    assert cfg.acp.default_agent == "a"
    assert cfg.acp.max_sessions == 3
    assert cfg.gateway.port == 4000
    assert cfg.gateway.tls.cert_file == "/c.pem"
    assert cfg.agents["a"].args == ("--x", "--y")
    assert cm.get_value(cfg, "agents.a.command") == "x"


def test_set_refuses_bad_type_and_keeps_file(tmp_path: Path) -> None:
    write(tmp_path, "[acp]\nmax_sessions = 3\n")
    before = (tmp_path / "config.toml").read_text()
    with pytest.raises(cm.ConfigError, match="expected integer"):
        cm.set_value(tmp_path, "acp.max_sessions", "three")
    with pytest.raises(cm.ConfigError, match="expected an integer ≥ 1"):
        cm.set_value(tmp_path, "acp.max_sessions", "0")
    with pytest.raises(cm.ConfigError, match="unknown key"):
        cm.set_value(tmp_path, "acp.bogus", "1")
    assert (tmp_path / "config.toml").read_text() == before


def test_default_config_is_dispatchable(tmp_path: Path) -> None:
    assert cm.ensure_default_config(tmp_path) is True
    assert cm.ensure_default_config(tmp_path) is False
    cfg = cm.load_config(tmp_path, environ={})
    assert cfg.acp.default_agent == "assistant"
    assert cfg.agents["assistant"].dispatchable
    assert cfg.agents["assistant"].provider == "demo"


def run_cli(*args: str, config_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acpgate", *args, "--config-dir", str(config_dir)]
        if args[0] not in ("config",)
        else [sys.executable, "-m", "acpgate", args[0], f"--config-dir={config_dir}", *args[1:]],
        capture_output=True, text=True, timeout=60,
    )


def test_cli_config_set_get_show_and_clean_error(tmp_path: Path) -> None:
    r = run_cli("config", "set", "acp.max_sessions", "4", config_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    r = run_cli("config", "get", "acp.max_sessions", config_dir=tmp_path)
    assert r.stdout.strip() == "4"
    r = run_cli("config", "show", config_dir=tmp_path)
    assert "max_sessions = 4" in r.stdout
    r = run_cli("config", "set", "acp.max_sessions", "x", config_dir=tmp_path)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "[acp] max_sessions: expected integer" in r.stderr
    (tmp_path / "config.toml").write_text("[acp]\nmax_sessions = [\n")
    r = run_cli("config", "get", "acp.max_sessions", config_dir=tmp_path)
    assert r.returncode == 2 and "invalid TOML" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("flag_first", [True, False])
def test_cli_config_dir_before_or_after_the_action(tmp_path: Path, flag_first: bool) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "acpgate", *args],
                              capture_output=True, text=True, timeout=60)

    d = str(tmp_path / "c")
    if flag_first:
        r = cli("config", "--config-dir", d, "set", "acp.max_sessions", "3")
    else:
        r = cli("config", "set", "acp.max_sessions", "3", "--config-dir", d)
    assert r.returncode == 0, r.stderr
    r = cli("config", "get", "acp.max_sessions", f"--config-dir={d}")
    assert r.returncode == 0 and r.stdout.strip() == "3", r.stderr
    # The first `config set` on a fresh dir kept the working default agent.
    r = cli("config", "get", "acp.default_agent", "--config-dir", d)
    assert r.stdout.strip() == "assistant"
    r = cli("token", "create", "--name", "x", "--config-dir", d)
    assert r.returncode == 0, r.stderr
    r = cli("token", "list", "--config-dir", d)
    assert r.returncode == 0 and "\tactive\tx\t" in r.stdout


def test_agent_mcp_servers_from_file_env_and_show(tmp_path: Path) -> None:
    """``[agents.<alias>] mcp_servers`` in the ACP shapes; values never shown."""
    write(tmp_path, """
[agents.a]
provider = "demo"
model = "demo"
mcp_startup_timeout_secs = 5
mcp_servers = [
  { name = "fs", command = "/usr/bin/fs-mcp", args = ["--root", "."], env = [{ name = "FS_TOKEN", value = "s3cret" }] },
  { type = "http", name = "web", url = "http://127.0.0.1:9/mcp", headers = [] },
]
""")
    agent = cm.load_config(tmp_path, environ={}).agents["a"]
    assert [s.name for s in agent.mcp_servers] == ["fs", "web"]
    assert agent.mcp_servers[0].env == (("FS_TOKEN", "s3cret"),)
    assert agent.mcp_startup_timeout_secs == 5 and agent.mcp_call_timeout_secs == 300
    shown = cm.show(cm.load_config(tmp_path, environ={}))
    assert "s3cret" not in shown and "fs-mcp" in shown
    env = {"ACPGATE_agents__a__mcp_servers": '[{name = "x", command = "/bin/x"}]'}
    assert [s.name for s in cm.load_config(tmp_path, environ=env).agents["a"].mcp_servers] == ["x"]


def test_bad_mcp_server_entry_is_a_config_error(tmp_path: Path) -> None:
    write(tmp_path, '[agents.a]\nprovider = "demo"\nmodel = "demo"\n'
                    'mcp_servers = [{ name = "fs" }]\n')
    with pytest.raises(cm.ConfigError, match=r"\[agents.a\] mcp_servers\[0\] `fs`: `command`"):
        cm.load_config(tmp_path, environ={})


def test_set_mcp_servers_round_trips(tmp_path: Path) -> None:
    write(tmp_path, '[agents.a]\nprovider = "demo"\nmodel = "demo"\n')
    cm.set_value(tmp_path, "agents.a.mcp_servers",
                 '[{name = "fs", command = "/bin/fs", env = [{name = "K", value = "v"}]}]')
    (server,) = cm.load_config(tmp_path, environ={}).agents["a"].mcp_servers
    assert server.command == "/bin/fs" and server.env == (("K", "v"),)


def test_store_section_url_env_and_checks(tmp_path: Path) -> None:
    """``[store]``: empty url = SQLite in the data dir; ``ACPGATE_store__url`` works as for every
    key; anything but a postgresql:// URL is refused without echoing it (it may hold a
    password); the lease and pool settings must be positive."""
    cfg = cm.load_config(tmp_path, environ={})
    assert (cfg.store.url, cfg.store.lease_secs, cfg.store.is_postgres) == ("", 30, False)
    env = {"ACPGATE_store__url": "postgresql://acp@db:5432/acp",
           "ACPGATE_store__password_env": "PGPASSWORD", "ACPGATE_store__lease_secs": "5"}
    cfg = cm.load_config(tmp_path, environ=env)
    assert cfg.store.is_postgres and cfg.store.url == "postgresql://acp@db:5432/acp"
    assert (cfg.store.password_env, cfg.store.lease_secs) == ("PGPASSWORD", 5)
    assert cm.load_config(tmp_path, environ={"ACPGATE_store__url": "postgres://h/d"}).store.is_postgres
    with pytest.raises(cm.ConfigError, match=r"\[store\] url: expected") as info:
        cm.load_config(tmp_path, environ={"ACPGATE_store__url": "mysql://u:hunter2@h/d"})
    assert "hunter2" not in str(info.value)
    for key in ("lease_secs", "pool_size", "connect_timeout_secs"):
        with pytest.raises(cm.ConfigError, match=rf"\[store\] {key}: expected an integer ≥ 1"):
            cm.load_config(tmp_path, environ={f"ACPGATE_store__{key}": "0"})


def test_show_never_prints_the_store_password(tmp_path: Path) -> None:
    """``config show`` prints ``[store] url`` without the password in it."""
    cfg = cm.load_config(tmp_path, environ={
        "ACPGATE_store__url": "postgresql://acp:hunter2@db/acp?sslmode=require&password=x2"})
    shown = cm.show(cfg)
    assert "hunter2" not in shown and "x2" not in shown
    assert 'url = "postgresql://acp@db/acp?sslmode=require"' in shown
