"""acpgate's own logs: the text format, redaction, the plan per process, the
shared rotating file (real processes writing at once) and the writer thread."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from services.common.config import ConfigError, load_config
from services.common.log_file import SharedRotatingFile, rotated_paths
from services.common.log_format import FIELDS_ATTR, JsonFormatter, TextFormatter
from services.common.log_output import LogPlan, plan_logging, start_logging, stop_logging
from services.common.logs import CountedWarning, get_logger

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-live-0123456789abcdef"


@pytest.fixture(autouse=True)
def _logging_handed_back() -> object:
    """Other tests capture ``acpgate.*`` records through the root logger (caplog)."""
    yield None
    stop_logging()


def record(event: str, level: int = logging.INFO, **fields: object) -> logging.LogRecord:
    rec = logging.LogRecord("acpgate.edge.stdio", level, __file__, 1, event, None, None)
    setattr(rec, FIELDS_ATTR, fields)
    return rec


def test_text_lines_are_aligned_local_time_level_process_event_fields() -> None:
    fmt = TextFormatter("acp")
    a = fmt.format(record("session_created", session_id="s-1", alias="assistant"))
    b = fmt.format(record("x", logging.WARNING, why="two words", n=3, ok=True, gone=None,
                          paths=["/a", "/b"]))
    # Local time, to the millisecond, then the level, process[pid], logger, event.
    stamp = a[:23]
    assert stamp[4] == "-" and stamp[10] == " " and stamp[19] == "."
    assert a.split()[2] == "INFO" and b.split()[2] == "WARNING"
    assert f"acp[{os.getpid()}]" in a and "edge.stdio" in a and "acpgate.edge" not in a
    # The fields start in the same column whatever the event's length.
    assert a.index("session_id=") == b.index("why=")
    assert a.endswith("session_id=s-1 alias=assistant")
    assert b.endswith('why="two words" n=3 ok=true gone=null paths=["/a","/b"]')


def test_both_formats_redact_secret_fields_and_keep_session_keys() -> None:
    fields = {"token": SECRET, "api_key": SECRET, "Authorization": f"Bearer {SECRET}",
              "db_password": SECRET, "client_secret": SECRET,
              "session_key": "agent:a:acp:1"}
    for fmt in (TextFormatter("serve"), JsonFormatter("serve")):
        line = fmt.format(record("e", **fields))
        assert SECRET not in line, line
        assert line.count("<redacted>") == 5 and "agent:a:acp:1" in line


def test_a_traceback_follows_its_text_line_indented_and_sits_in_json() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        rec = record("failed")
        rec.exc_info = sys.exc_info()
    text = TextFormatter().format(rec)
    first, *rest = text.splitlines()
    assert "failed" in first and rest and all(line.startswith("    ") for line in rest)
    assert "ValueError: boom" in rest[-1]
    assert "ValueError: boom" in json.loads(JsonFormatter().format(rec))["exc"]


def test_a_stdio_command_is_quiet_on_stderr_unless_a_level_is_asked(tmp_path: Path) -> None:
    cfg = load_config(tmp_path, environ={})
    acp = plan_logging(cfg, "acp", environ={})
    assert acp.stderr_level == logging.WARNING and acp.file_level == logging.INFO
    assert acp.file == tmp_path / "data" / "logs" / "acpgate.log" and not acp.text
    assert plan_logging(cfg, "serve", environ={}).stderr_level == logging.INFO
    asked = plan_logging(cfg, "acp", environ={"ACPGATE_LOG_LEVEL": "info",
                                               "ACPGATE_LOG_FORMAT": "text"})
    assert asked.stderr_level == logging.INFO and asked.text
    (tmp_path / "config.toml").write_text('[logging]\nlevel = "debug"\nfile = "none"\n')
    cfg = load_config(tmp_path, environ={})
    configured = plan_logging(cfg, "acp", environ={})
    assert configured.stderr_level == configured.file_level == logging.DEBUG
    assert configured.file is None
    # The bridge writes a file only when one is named.
    assert plan_logging(load_config(tmp_path / "b", environ={}), "bridge", environ={},
                        file_by_default=False).file is None
    with pytest.raises(ConfigError, match="ACPGATE_LOG_LEVEL: expected one of"):
        plan_logging(cfg, "acp", environ={"ACPGATE_LOG_LEVEL": "loud"})
    with pytest.raises(ConfigError, match="ACPGATE_LOG_FORMAT"):
        plan_logging(cfg, "acp", environ={"ACPGATE_LOG_FORMAT": "xml"})


def test_records_are_written_by_the_writer_thread_never_the_caller(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    writers: list[threading.Thread] = []
    emit = SharedRotatingFile.emit

    def recording(self: SharedRotatingFile, rec: logging.LogRecord) -> None:
        writers.append(threading.current_thread())
        emit(self, rec)

    monkeypatch.setattr(SharedRotatingFile, "emit", recording)
    log_file = tmp_path / "logs" / "a.log"
    start_logging(LogPlan(process="t", stderr_level=logging.ERROR, file=log_file))
    try:
        get_logger("t").info("written_elsewhere", n=1)
    finally:
        stop_logging()  # drains and closes the file
    assert writers and threading.current_thread() not in writers
    (line,) = log_file.read_text().splitlines()
    assert json.loads(line)["event"] == "written_elsewhere"
    assert (log_file.stat().st_mode & 0o777, log_file.parent.stat().st_mode & 0o777) == (
        0o600, 0o700)


WRITER = textwrap.dedent("""
    import logging, sys
    from pathlib import Path
    from services.common.log_file import SharedRotatingFile
    handler = SharedRotatingFile(Path(sys.argv[1]), 4096, 3)
    name = sys.argv[2]
    for i in range(int(sys.argv[3])):
        handler.emit(logging.makeLogRecord({"msg": f"{name} {i:05d} " + "x" * 40}))
    handler.close()
""")


def test_several_processes_share_one_rotating_file_without_torn_lines(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "shared.log"
    lines = 400
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), name, str(lines)],
                              cwd=REPO) for name in ("alpha", "beta", "gamma")]
    assert [p.wait(60) for p in procs] == [0, 0, 0]
    files = [p for p in rotated_paths(path, 3) if p.exists()]
    assert len(files) == 4, "rotated, keeping three"
    assert not path.with_name("shared.log.4").exists()
    kept: dict[str, list[int]] = {"alpha": [], "beta": [], "gamma": []}
    line_bytes = len("alpha 00000 " + "x" * 40) + 1
    for file in reversed(files):  # oldest first
        size = file.stat().st_size
        assert size <= 4096
        if file != path:  # rotated only once full: no write went to a file given up early
            assert size > 4096 - line_bytes
        for line in file.read_text().splitlines():
            # Every line whole: one writer's, never two spliced together.
            name, number, tail = line.split(" ")
            assert len(number) == 5 and tail == "x" * 40
            kept[name].append(int(number))
    # No write of any writer was lost between rotations: what is kept of each writer is
    # a run of consecutive lines up to its last (the oldest went with the dropped files).
    finished = [numbers for numbers in kept.values() if numbers]
    assert finished
    for numbers in finished:
        assert sorted(numbers) == list(range(numbers[0], lines)), numbers


def test_no_format_asked_means_text_on_a_terminal_json_elsewhere(tmp_path: Path) -> None:
    cfg = load_config(tmp_path, environ={})
    on_tty = plan_logging(cfg, "serve", environ={}, stderr_tty=True)
    assert on_tty.stderr_text and not on_tty.text
    assert not plan_logging(cfg, "serve", environ={}, stderr_tty=False).stderr_text
    # What is asked for wins over the terminal, either way.
    asked_json = plan_logging(cfg, "serve", environ={"ACPGATE_LOG_FORMAT": "json"},
                              stderr_tty=True)
    assert not asked_json.stderr_text and not asked_json.text
    (tmp_path / "config.toml").write_text('[logging]\nformat = "json"\n')
    configured = plan_logging(load_config(tmp_path, environ={}), "serve", environ={},
                              stderr_tty=True)
    assert not configured.stderr_text and not configured.text
    asked_text = plan_logging(cfg, "serve", environ={"ACPGATE_LOG_FORMAT": "text"},
                              stderr_tty=False)
    assert asked_text.text


def test_text_on_stderr_keeps_json_in_the_file(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    log_file = tmp_path / "logs" / "a.log"
    start_logging(LogPlan(process="t", file=log_file, stderr_text=True))
    try:
        get_logger("t").info("both_ways", n=1, api_key="sk-hidden")
        try:
            raise ValueError("boom")
        except ValueError:
            get_logger("t").exception("with_traceback")
    finally:
        stop_logging()
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert "INFO" in first and "both_ways" in first and "n=1" in first
    assert "sk-hidden" not in err and "ValueError: boom" in err
    assert not first.startswith("{")
    lines = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [r["event"] for r in lines] == ["both_ways", "with_traceback"]
    assert lines[0]["api_key"] == "<redacted>" and "ValueError: boom" in lines[1]["exc"]


def test_a_counted_warning_is_logged_at_powers_of_two(caplog: pytest.LogCaptureFixture) -> None:
    """A warning a peer repeats at will: a thousand of them are ten lines, each with
    the count so far and the subject's fields, none with a traceback."""
    told = CountedWarning(get_logger("test"), "odd_thing", session_id="s1")
    with caplog.at_level(logging.WARNING, logger="acpgate.test"):
        for _ in range(1000):
            try:
                raise ValueError("bad")
            except ValueError:
                told(error="ValueError")
    lines = [r for r in caplog.records if r.name == "acpgate.test"]
    assert [getattr(r, FIELDS_ATTR)["count"] for r in lines] == [2 ** i for i in range(10)]
    assert all(getattr(r, FIELDS_ATTR)["session_id"] == "s1" and not r.exc_info
               and r.levelno == logging.WARNING for r in lines)
    assert told.count == 1000
