"""The benchmark must keep running: N=2, one repetition (timings are not judged here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_bench_runs(tmp_path: Path) -> None:
    res = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "bench.py"),
            "--nodes",
            "2",
            "--reps",
            "1",
            "--out",
            str(tmp_path),
            "--app-ticks",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "| 2 | mntui: full status poll |" in res.stdout and "pdsh" in res.stdout
    (result,) = tmp_path.glob("*.json")
    data = json.loads(result.read_text())
    assert (
        data["runs"][0]["n"] == 2 and "kill-all until verified clean" in data["runs"][0]["results"]
    )
    assert data["app"]["grid"]["tick_max_ms"] > 0 and "app at 1 Hz, table" in res.stdout
