"""The benchmark harness's own tests (bench/), at sizes small enough for the suite."""
