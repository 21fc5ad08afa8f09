"""The edge's GC settings: startup's objects frozen, collections at the tuned thresholds."""

from __future__ import annotations

import json
import subprocess
import sys

from services.common.gc_tuning import GC_GEN0_THRESHOLD, GC_OLDER_THRESHOLD

_PROBE = """
import gc, json
from services.common.gc_tuning import tune_gc
before = gc.get_freeze_count()
tune_gc()
print(json.dumps({"threshold": gc.get_threshold(), "before": before,
                  "frozen": gc.get_freeze_count(), "enabled": gc.isenabled()}))
"""


def test_tune_gc_freezes_startup_and_sets_thresholds() -> None:
    """In a fresh interpreter (the settings are process-wide): what was alive is frozen,
    the collector stays on, with the edge's thresholds."""
    out = subprocess.run([sys.executable, "-c", _PROBE], check=True, capture_output=True,
                         text=True, timeout=60)
    got = json.loads(out.stdout)
    assert got["threshold"] == [GC_GEN0_THRESHOLD, GC_OLDER_THRESHOLD, GC_OLDER_THRESHOLD]
    assert got["before"] == 0
    assert got["frozen"] > 1000  # the modules imported, and whatever startup built
    assert got["enabled"] is True
