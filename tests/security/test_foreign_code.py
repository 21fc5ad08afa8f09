"""No repository's code ever runs as acpgate's own (ARCHITECTURE.md "Trust model").

``python -m services.agent`` with the session ``cwd`` as working directory puts
that directory first on ``sys.path``: a cloned repository holding
``services/agent/__main__.py`` ran in place of the built-in agent, in any
autonomy mode, with no approval. The same made ``acpgate serve`` started from a
folder with an ``acpgate/`` directory run that folder's package as its
services. From the attacker's side, with real processes:

- a session whose ``cwd`` is such a repository gets the real built-in agent
  (its answer is the demo model's), and the repository's file never runs;
- ``PYTHONPATH`` in acpgate's environment (a ``sitecustomize`` that records
  every interpreter it runs in) never reaches the built-in agent or the wrapper;
- ``acpgate serve`` started from a folder holding a hostile ``acpgate/``
  package serves normally and never imports it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from pathlib import Path

import pytest

from tests.e2e.harness import AcpProcess, child_env
from tests.gateway.wsfixtures import free_port, wait_healthy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

#: Records the interpreter it runs in (argv) to the marker file named in its environment.
RECORDER = textwrap.dedent("""
    import os, sys
    with open({marker!r}, "a") as fh:
        fh.write(" ".join(sys.argv) + "\\n")
""")


def plant(repo: Path, module: str, marker: Path) -> None:
    """A hostile ``module`` (dotted) under ``repo`` that records where it ran."""
    path = repo.joinpath(*module.split("."))
    path.mkdir(parents=True, exist_ok=True)
    for parent in [path, *path.relative_to(repo).parents]:
        if str(parent) != ".":
            (repo / parent / "__init__.py").write_text(RECORDER.format(marker=str(marker)))
    (path / "__main__.py").write_text(RECORDER.format(marker=str(marker)))


def config(tmp_path: Path) -> Path:
    """A demo built-in agent that spawns cold (no warm pool): its cwd is the session's."""
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "config.toml").write_text(textwrap.dedent("""
        [acp]
        default_agent = "demo"

        [agents.demo]
        kind = "builtin"
        provider = "demo"
        model = "demo"
        warm = 0
    """))
    return cfg


async def test_a_repositorys_services_agent_never_runs_as_the_agent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    marker = tmp_path / "foreign-code-ran"
    plant(repo, "services.agent", marker)
    # And a sitecustomize on acpgate's PYTHONPATH: it may run in acpgate itself (the user
    # started it so), never in the agent or the wrapper.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(RECORDER.format(marker=str(marker)))
    monkeypatch.setenv("PYTHONPATH", str(site))
    acp = AcpProcess(config(tmp_path), cwd=tmp_path)
    try:
        await asyncio.to_thread(acp.result, "initialize", {"protocolVersion": 1})
        sid = await asyncio.to_thread(acp.new_session, cwd=str(repo))
        result = await asyncio.to_thread(acp.result, "session/prompt",
                                         {"sessionId": sid, "prompt": "hello"})
        assert result["stopReason"] == "end_turn" and result["content"], result
    finally:
        await asyncio.to_thread(acp.close)
    ran = marker.read_text().splitlines() if marker.exists() else []
    strangers = [line for line in ran if "services.agent" in line or "wrapper" in line
                 or "services/agent" in line]
    assert strangers == [], f"foreign code ran as acpgate's own: {ran}"


async def test_serve_started_from_a_folder_with_an_acpgate_package(tmp_path: Path) -> None:
    folder = tmp_path / "clone"
    marker = tmp_path / "foreign-code-ran"
    plant(folder, "acpgate", marker)
    cfg = config(tmp_path)
    port = free_port()
    with (cfg / "config.toml").open("a") as fh:
        fh.write(f"\n[gateway]\nport = {port}\n")
    log = tmp_path / "serve.log"
    env = {k: v for k, v in child_env().items() if k != "PYTHONPATH"}
    script = Path(sys.executable).parent / "acpgate"  # the console script, as a user runs it
    with log.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            str(script), "serve", "--config-dir", str(cfg), cwd=str(folder), env=env,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=err)
    try:
        await wait_healthy(port, proc)
    finally:
        if proc.returncode is None:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 60)
    assert proc.returncode == 0, log.read_text()
    assert not marker.exists(), marker.read_text()
    assert "ImportError" not in log.read_text()
    assert os.listdir(folder) == ["acpgate"]  # nothing was written into the clone
