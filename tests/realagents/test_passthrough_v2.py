"""Transparent on ACP v2 too: codex-acp 2.6, driven by the TypeScript SDK's v2 client
directly and through ``acpgate acp``.

``ts_v2_compare.mjs`` (the official SDK's ``experimental/v2`` client, which checks every
message it reads against its v2 types) runs the same steps on the adapter over stdio and
on ``acpgate acp`` with the adapter as its default agent (``protocol = "auto"``: acpgate
offers 2 and the adapter answers 2), each with its own copy of the adapter's state and the
same fake model provider: initialize, session/new, the mode option set to the one that
asks before a shell command, a prompt, a prompt whose shell tool asks permission, a
prompt cancelled mid-stream, session/close. Results, errors, each turn's update kinds,
text and idle ``state_update``, the permission requests and the run's update kinds must
agree but for acpgate's documented additions (:data:`ADDITIONS`); anything else is named.
Skipped unless the codex-acp 2.x package and node are installed.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import child_env
from tests.realagents.adapters import CODEX
from tests.realagents.compare import _diff, _ids, _strip_meta, _uncounted
from tests.realagents.fake_models import SLOW_TRIGGER, TOOL_TRIGGER, FakeModelServer

pytestmark = pytest.mark.timeout(480)

SCRIPT = Path(__file__).with_name("ts_v2_compare.mjs")
PACKAGE = Path("node_modules") / "@agentclientprotocol" / "codex-acp" / "package.json"
RUN_WAIT = 300.0

#: What acpgate adds on v2, taken out before comparing (each as docs/protocol.md says):
ADDITIONS = (
    # initialize: acpgate's own info; _meta.zeroclaw (its limits); acpgate's
    # capabilities without a v2 marker, under capabilities.session._meta.acpgate (fork).
    "initialize.info",
    "initialize._meta.zeroclaw",
    # _meta.acpgate anywhere (event ids, the session's workspace dir), data.acpgate of errors.
    "_meta.acpgate",
    # The prompt's messageId is acpgate's (the agent's is per run anyway), and so are the
    # turn's running state and the echoed user message: acpgate reports them first, before
    # the agent's first update (the order within a turn is not compared, the kinds are).
    "messageId",
)
#: Kinds compared over the whole run only: the mode option's echo of set_config_option comes
#: when the agent sends it, after the answer (at times within the next turn, at times not).
RUN_ONLY_KINDS = frozenset({"config_option_update"})
#: What the tool's output names per run (codex's exec chunk id).
PER_RUN_TEXT = re.compile(r"Chunk ID: [0-9a-f]+")
#: The mode in which codex-acp asks before running a shell command.
ASK_MODE = CODEX.ask_mode
#: The cancelled turn's token counts depend on when the cancel lands.
CANCELLED = "prompt cancelled"


def _run(npm_dir: Path, argv: list[str], cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    done = subprocess.run(
        [node, str(SCRIPT), str(npm_dir), str(cwd), ASK_MODE, TOOL_TRIGGER, SLOW_TRIGGER,
         "--", *argv], capture_output=True, text=True, timeout=RUN_WAIT, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _comparable(run: dict[str, Any], ids: tuple[str, ...]) -> dict[str, Any]:
    """One run less :data:`ADDITIONS` and what varies per run (ids, token counts of the
    cancelled turn)."""
    out = copy.deepcopy(run)
    init = out["steps"].get("initialize", {})
    init.pop("info", None)
    meta = init.get("_meta")
    if isinstance(meta, dict):
        meta.pop("zeroclaw", None)
    for step in out["steps"].values():
        if isinstance(step, dict):
            step.pop("messageId", None)
    turns = {}
    for name, turn in out.pop("turns").items():
        idle = turn["idle"] or {}
        turns[name] = {"kinds": sorted(set(turn["kinds"]) - RUN_ONLY_KINDS),
                       "text": PER_RUN_TEXT.sub("Chunk ID: <per-run>", turn["text"]),
                       "idle": _uncounted(idle, ("quota",)) if name == CANCELLED else idle}
    out["turns"] = turns
    out["kinds"] = sorted(out["kinds"])
    out.pop("sessionId", None)
    return dict(_ids(_strip_meta(out), ids))


def differences(direct: dict[str, Any], through: dict[str, Any]) -> list[str]:
    ids = (direct.get("sessionId", ""), through.get("sessionId", ""))
    found: list[str] = []
    _diff("", _comparable(direct, ids), _comparable(through, ids), found)
    return found


def test_v2_direct_and_through_acpgate_agree(npm_dir: Path, model_server: FakeModelServer,
                                             tmp_path: Path) -> None:
    package = npm_dir / PACKAGE
    if not package.exists() or not json.loads(package.read_text())["version"].startswith("2."):
        pytest.skip("@agentclientprotocol/codex-acp 2.x is not installed")
    runs = {}
    for side in ("direct", "through"):
        (tmp_path / side / "ws").mkdir(parents=True)
        (tmp_path / side / "state").mkdir()
    env = CODEX.env(model_server.url, tmp_path / "direct" / "state")
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TMPDIR", "TZ")}
    runs["direct"] = _run(npm_dir, CODEX.argv(npm_dir), tmp_path / "direct" / "ws",
                          {**base, **env})
    cfg = tmp_path / "through" / "cfg"
    cfg.mkdir()
    (cfg / "config.toml").write_text(
        f'[acp]\ndefault_agent = "{CODEX.alias}"\nsession_timeout_secs = 120\n\n'
        + CODEX.config_entry(npm_dir, model_server.url, tmp_path / "through" / "state")
        + 'protocol = "auto"\n')
    runs["through"] = _run(npm_dir, [sys.executable, "-m", "acpgate", "acp", "--config-dir",
                                     str(cfg)], tmp_path / "through" / "ws", child_env())

    direct, through = runs["direct"], runs["through"]
    assert direct["steps"]["initialize"]["protocolVersion"] == 2
    assert through["steps"]["initialize"]["protocolVersion"] == 2
    assert through["turns"]["prompt tool"]["idle"]["stopReason"] == "end_turn"
    assert through["turns"][CANCELLED]["idle"]["stopReason"] == "cancelled"
    assert through["permissions"], "the tool asked permission"
    diffs = differences(direct, through)
    assert not diffs, "v2 direct vs through acpgate:\n" + "\n".join(diffs)
