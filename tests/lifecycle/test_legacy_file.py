"""Pre-lease record files: what is read, what is refused and why.

The file format an operator migrating from a lease-less system drops into
``<data dir>/lifecycle/legacy/`` (:mod:`services.lifecycle.reaping.legacy_files`): every line is
checked, one bad line refuses the whole file with its line number (never its content),
and a file or directory someone else could have written is refused.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from services.lifecycle.reaping.legacy_files import (
    MAX_FILE_BYTES,
    MAX_RECORDS,
    ImportedRecord,
    LegacyFileError,
    mark_imported,
    parse_records,
    read_legacy_dir,
)

NOBODY = 65534


def lines(*objs: object) -> bytes:
    return "\n".join(o if isinstance(o, str) else json.dumps(o) for o in objs).encode()


def test_records_in_every_accepted_shape() -> None:
    argv = ["/opt/my agent/run", "--flag", "it's"]
    data = lines(
        {"pid": 4242, "command": "node /opt/agent/index.js --acp", "session": "ignored"},
        "",
        {"pid": 4243, "command": argv, "started_at": 1_720_000_000_000},
        {"pid": 4244, "wrapper": True},
        {"pid": 4245, "wrapper": "/srv/old/lifecycle//wrapper/", "command": "x"},
        {"pid": 4246, "command": "y", "wrapper": False, "started_at": None},
    ) + b"\n\n"
    assert parse_records(data) == (
        ImportedRecord(1, 4242, "node /opt/agent/index.js --acp"),
        ImportedRecord(3, 4243, shlex.join(argv), started_at=1_720_000_000_000),
        ImportedRecord(4, 4244, "", expects_wrapper=True),
        ImportedRecord(5, 4245, "x", "/srv/old/lifecycle/wrapper", expects_wrapper=True),
        ImportedRecord(6, 4246, "y"),
    )
    # An argv is kept so that matching gets exactly it back.
    assert shlex.split(parse_records(lines({"pid": 9, "command": argv}))[0].command) == argv


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('{"pid": 5, "command": "sk-secret-value"', "not JSON"),
        ("[5, 6]", "not a JSON object"),
        ({"command": "x"}, "pid is missing"),
        ({"pid": True, "command": "x"}, "pid must be an integer"),
        ({"pid": "77", "command": "x"}, "pid must be an integer"),
        ({"pid": 7.5, "command": "x"}, "pid must be an integer"),
        ({"pid": 1, "command": "init"}, "pid must be between"),
        ({"pid": 5_000_000, "command": "x"}, "pid must be between"),
        ({"pid": 77}, "command is missing"),
        ({"pid": 77, "command": "  "}, "command is empty"),
        ({"pid": 77, "command": []}, "command must be"),
        ({"pid": 77, "command": ["a", 5]}, "command must be"),
        ({"pid": 77, "command": ["", "a"]}, "first argument is empty"),
        ({"pid": 77, "command": "a\u0000b"}, "NUL"),
        ({"pid": 77, "command": "x" * 70_000}, "longer than"),
        ({"pid": 77, "wrapper": "relative/root"}, "absolute path"),
        ({"pid": 77, "wrapper": 1}, "wrapper must be"),
        ({"pid": 77, "command": "x", "started_at": -1}, "started_at must be between"),
        ({"pid": 77, "command": "x", "started_at": "yesterday"}, "started_at must be an integer"),
        ("[" * 100_000, "not JSON"),
    ],
)
def test_one_bad_line_refuses_the_file_naming_the_line(line: object, why: str) -> None:
    data = lines({"pid": 42, "command": "good"}, line, {"pid": 43, "command": "good too"})
    with pytest.raises(LegacyFileError) as err:
        parse_records(data)
    assert str(err.value).startswith("line 2: ") and why in str(err.value)
    assert "sk-secret-value" not in str(err.value)  # never the content


def test_limits() -> None:
    with pytest.raises(LegacyFileError, match="not UTF-8"):
        parse_records(b'{"pid": 5, "command": "\xff"}')
    with pytest.raises(LegacyFileError, match="larger than"):
        parse_records(b" " * (MAX_FILE_BYTES + 1))
    many = b"\n".join([b'{"pid": 5, "command": "x"}'] * (MAX_RECORDS + 1))
    with pytest.raises(LegacyFileError, match=f"more than {MAX_RECORDS} records"):
        parse_records(many)


def write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def legacy_dir(tmp_path: Path) -> Path:
    d = tmp_path / "legacy"
    d.mkdir(mode=0o700)
    return d


def test_dir_read_in_name_order_and_imported_files_never_again(tmp_path: Path) -> None:
    d = legacy_dir(tmp_path)
    write(d / "b.jsonl", lines({"pid": 20, "command": "b"}))
    write(d / "a.jsonl", lines({"pid": 10, "command": "a"}), mode=0o644)
    write(d / "notes.txt", b"not records")
    write(d / "old.jsonl.imported", lines({"pid": 30, "command": "c"}))
    files, refused = read_legacy_dir(d)
    assert refused == []
    assert [(f.path.name, [r.pid for r in f.records]) for f in files] == [("a.jsonl", [10]),
                                                                       ("b.jsonl", [20])]
    assert (d / "a.jsonl").stat().st_mode & 0o777 == 0o600  # tightened: records name processes
    assert files[0].digest != files[1].digest
    moved = mark_imported(files[0].path)
    assert moved.name == "a.jsonl.imported" and not files[0].path.exists()
    assert [f.path.name for f in read_legacy_dir(d)[0]] == ["b.jsonl"]
    assert mark_imported(files[0].path) == moved  # already gone: fine
    assert read_legacy_dir(tmp_path / "missing") == ([], [])


def test_files_someone_else_could_have_written_are_refused(tmp_path: Path) -> None:
    d = legacy_dir(tmp_path)
    good = lines({"pid": 10, "command": "a"})
    write(d / "loose.jsonl", good, mode=0o620)
    write(d / "open.jsonl", good, mode=0o666)
    target = write(tmp_path / "elsewhere.jsonl", good)
    (d / "link.jsonl").symlink_to(target)
    os.mkfifo(d / "fifo.jsonl")  # O_NONBLOCK: opening it never waits for a writer
    (d / "dir.jsonl").mkdir()
    theirs = write(d / "theirs.jsonl", good)
    if os.getuid() == 0:
        os.chown(theirs, NOBODY, NOBODY)
    else:
        theirs.unlink()
    files, refused = read_legacy_dir(d)
    assert files == []
    why = {r.path.name: r.why for r in refused}
    assert "writable by group or others" in why.pop("loose.jsonl")
    assert "writable by group or others" in why.pop("open.jsonl")
    assert why.pop("link.jsonl") == "is a symbolic link"
    assert why.pop("fifo.jsonl") == "not a regular file"
    assert why.pop("dir.jsonl") == "not a regular file"
    if os.getuid() == 0:
        assert why.pop("theirs.jsonl") == f"file belongs to another user (uid {NOBODY})"
    assert why == {}


def test_a_directory_someone_else_could_write_is_refused_whole(tmp_path: Path) -> None:
    d = legacy_dir(tmp_path)
    write(d / "a.jsonl", lines({"pid": 10, "command": "a"}))
    os.chmod(d, 0o777)
    files, refused = read_legacy_dir(d)
    assert files == [] and [r.why for r in refused] == [
        "directory is writable by group or others (chmod go-w)"]
    os.chmod(d, 0o700)
    link = tmp_path / "link"
    link.symlink_to(d)
    assert read_legacy_dir(link) == ([], [read_legacy_dir(link)[1][0]])
    assert read_legacy_dir(link)[1][0].why == "not a directory"
