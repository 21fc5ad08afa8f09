"""Run an agent command with every line acpgate writes to it also appended to a log:
``python tee_stdin.py LOG COMMAND [ARGS...]`` (what a v2 agent receives, for the schema
check of the tier)."""

from __future__ import annotations

import subprocess
import sys


def main() -> int:
    log, *command = sys.argv[1:]
    child = subprocess.Popen(command, stdin=subprocess.PIPE)
    assert child.stdin is not None
    with open(log, "ab") as out:
        for line in sys.stdin.buffer:
            out.write(line)
            out.flush()
            child.stdin.write(line)
            child.stdin.flush()
    child.stdin.close()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
