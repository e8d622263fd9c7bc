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


def test_clusterbench_quick_reports_every_row(tmp_path: Path) -> None:
    """bench/clusterbench.py --quick: 8 nodes, one repetition, every row reported."""
    out = tmp_path / "cluster.json"
    res = subprocess.run(
        [sys.executable, str(REPO / "bench" / "clusterbench.py"), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    (run,) = json.loads(out.read_text())["runs"]
    assert run["n"] == 8 and run["notes"] == [], run["notes"]
    baseline = {k for k in run["ms"] if "(--baseline)" in k}
    assert len(baseline) == 1 and all(not run["ms"][k] for k in baseline), run["ms"]
    measured = {k: v for k, v in run["ms"].items() if k not in baseline}
    assert measured and all(len(v) == 1 for v in measured.values()), run["ms"]
    for row in measured:
        assert f"| 8 | {row} |" in res.stdout, row
    assert "| 8 | (no baseline tree) |" in res.stdout
    window = run["window"]
    assert window["sentinels"] == 8 and window["coordinator_cpu_pct"] is not None, window
    assert "manager: processes" in res.stdout and "imports inside cluster `status`" in res.stdout
