"""A stdio "MCP server" that probes what it can reach, for the client-MCP attack tests.

It never speaks MCP: it tries to read some files and to write one, lists the
names in its environment, writes that report (atomically) and exits — so the
agent's start of it fails after it ran, and the report says what it could do.
It is a shell script: an interpreter may live under a forbidden path (pyenv
under ``/root``), ``/bin/sh`` does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: argv: report write-target read-target...
PROBE = r"""
report=$1; target=$2; shift 2
{
  for path in "$@"; do
    if head -c 16 "$path" >/dev/null 2>&1; then echo "read=done $path"; else echo "read=denied $path"; fi
  done
  if (echo x > "$target") 2>/dev/null; then echo "write=done"; else echo "write=denied"; fi
  env | cut -d= -f1 | sed 's/^/env=/'
} > "$report.tmp"
mv "$report.tmp" "$report"
"""

#: What an attacking client sets in its server's env: loader variables, and a plain one.
CLIENT_ENV = {"LD_PRELOAD": "/nonexistent/evil.so", "PYTHONPATH": "/tmp/evil",
              "NODE_OPTIONS": "--require /tmp/evil.js", "BASH_ENV": "/tmp/evil.sh",
              "PLAIN_VAR": "kept"}
LOADER_VARS = ("LD_PRELOAD", "PYTHONPATH", "NODE_OPTIONS", "BASH_ENV")


def probe_entry(script_dir: Path, report: Path, *, write: Path, read: Sequence[Path],
                env: Mapping[str, str] = CLIENT_ENV, name: str = "probe") -> dict[str, Any]:
    """The ACP stdio ``McpServer`` entry of the probe (its script written to ``script_dir``)."""
    script = script_dir / "probe.sh"
    script.write_text(PROBE)
    return {"name": name, "command": "/bin/sh",
            "args": [str(script), str(report), str(write), *(str(p) for p in read)],
            "env": [{"name": k, "value": v} for k, v in env.items()]}


@dataclass(frozen=True)
class Report:
    """What one run of the probe could do."""

    reads: dict[str, str]
    write: str
    env: frozenset[str]

    @classmethod
    def of(cls, path: Path) -> Report:
        """Parse the report at ``path``."""
        reads: dict[str, str] = {}
        write, env = "", set()
        for line in path.read_text().splitlines():
            key, _, value = line.partition("=")
            if key == "read":
                outcome, _, target = value.partition(" ")
                reads[target] = outcome
            elif key == "write":
                write = value
            elif key == "env":
                env.add(value)
        return cls(reads, write, frozenset(env))

    def read(self, path: Path) -> str:
        """``done`` or ``denied`` for ``path``."""
        return self.reads[str(path)]
