"""Smoke test of the benchmark harness on tiny sizes (no timing assertions).

``make bench`` is not part of ``make test``; this keeps the harness from rotting:
the firehose adapter speaks ACP, the statistics are right, and a whole
``python -m bench --quick`` run produces every row of the results page.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.stage import FIREHOSE
from bench.stats import Dist, Row, percentile
from tests.pg_cluster import missing_reason

REPO = Path(__file__).resolve().parents[2]


def test_percentile_and_dist() -> None:
    samples = [float(x) for x in range(1, 101)]
    assert percentile(samples, 50) == pytest.approx(50.5)
    assert percentile(samples, 99) == pytest.approx(99.01)
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))
    rate = Dist.of([10.0, 20.0, 30.0], higher_is_better=True)
    assert rate.median == 20.0 and rate.p99 < 11.0 and rate.n == 3
    row = Row("1", "m", "u", Dist(30.0, 30.0, 1), "b", Dist(60.0, 60.0, 1))
    assert row.ratio == pytest.approx(0.5)


def test_firehose_agent_speaks_acp() -> None:
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}},
        {"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
         "params": {"sessionId": "S", "prompt": [{"type": "text", "text": "firehose 5"}]}},
        {"jsonrpc": "2.0", "id": 4, "method": "session/load", "params": {}},
        "not json",
    ]
    stdin = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n"
    out = subprocess.run([sys.executable, str(FIREHOSE)], input=stdin, capture_output=True,
                         text=True, timeout=30, check=True).stdout.splitlines()
    msgs = [json.loads(line) for line in out]
    assert msgs[0]["result"]["protocolVersion"] == 1
    assert msgs[1]["result"]["sessionId"].startswith("fh-")
    chunks = [m["params"]["update"] for m in msgs if m.get("method") == "session/update"]
    assert len(chunks) == 5
    assert all(c["sessionUpdate"] == "agent_message_chunk" for c in chunks)
    seqs = [int(c["content"]["text"].split(":")[0]) for c in chunks]
    stamps = [int(c["content"]["text"].split(":")[1]) for c in chunks]
    assert seqs == list(range(5)) and stamps == sorted(stamps)
    assert msgs[-2] == {"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "end_turn"}}
    assert msgs[-1]["id"] == 4 and msgs[-1]["error"]["code"] == -32601


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_quick_bench_run_writes_every_row(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    # The timeout only guards against a hang: a quick run takes ~100 s on a loaded 2-core box.
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "QUICK sizes" in text and "cores" in text and "python 3." in text
    lines = text.splitlines()
    head = lines.index(next(line for line in lines if line.startswith("| # |")))
    # The main table: the run of table lines after its header (the capacity table follows
    # the notes, apart).
    table = list(itertools.takewhile(lambda line: line.startswith("|"), lines[head:]))
    rows = [line for line in table[1:] if "---" not in line]  # minus the header
    items = [r.split("|")[1].strip() for r in rows]
    assert items.count("1") == 10 and items.count("2") == 5 and items.count("3") == 6
    pg_rows = 0 if missing_reason() else 2  # the same load and append rows on PostgreSQL
    assert items.count("4") == 5 and items.count("5") == 2 + pg_rows
    assert items.count("6") == 3 + pg_rows
    assert items.count("7") == 2
    # The edge's RSS under clients that stopped reading; the event log: throughput on/off
    # over two paths, its CPU and bytes per event, the crash benchmark.
    assert items.count("36") == 6
    assert "0 events replayed twice" in text
    assert items.count("23.7") == 4  # loading a session of big prompts
    assert items.count("28") == 2  # capacity at one N: delivered updates/s, latency
    # The spread of a burst over 2 and 4 edge workers, then with one of them held up.
    assert items.count("8") == 4
    assert "`?worker=4` got 101" in text
    assert items.count("idle") == 2  # an idle acpgate acp, and per idle session
    assert "Capacity: N sessions" in text and "| 4 | " in text
    assert "2 of 2 turns replayed" in text
    assert ("PostgreSQL store" in text) is bool(pg_rows)
    assert ("Not run:" in text) is not bool(pg_rows)
    for r in rows:
        if "CPU per logged event" in r:  # a quick run's few events may take under a tick
            continue
        if "connection spread" in r:  # a few connections often split exactly evenly: 0 %
            continue
        if "CPU per idle session" in r:  # what an idle session costs: about nothing
            continue
        cells = [c.strip() for c in r.split("|")]
        if cells[-3:-1] == ["0", "**met**"]:  # a count whose target is 0, met: 0 measured
            continue
        median = r.split("|")[4].strip()
        assert median not in ("n/a", "0", "0.000"), r
    assert "(expected 20)" in text and "MISMATCH" not in text
    assert "10/10 leases closed" in text


@pytest.mark.slow
def test_v2_pair_prints_both_sizes(tmp_path: Path) -> None:
    """``python -m bench.v2_pair`` (the v1/v2 relay pair alone) runs and prints its table."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", "bench.v2_pair", "--rounds", "2",
                           "--counts", "20,50"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=110)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert [r.split("|")[1].strip() for r in rows[1:]] == ["20", "50"], proc.stdout
