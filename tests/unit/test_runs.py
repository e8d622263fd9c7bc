"""Run records under concurrent writers, their permissions, and what the watchdog makes
of a record it cannot read; typed results of cluster-wide calls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.errors import UsageError, state_dir
from mntui.sessions.results import NodeError
from mntui.sessions.runs import (
    NodeRecord,
    RunRecord,
    RunStatus,
    check_run_id,
    latest,
    load_run,
)
from mntui.sessions.ssh import Cluster, Node

RUN_ID = "20261122-120000-abcd"
LOCAL = textwrap.dedent("""
    job: rec
    nodes: [{name: a, host: localhost}, {name: b, host: localhost}, {name: c, host: localhost}]
    command: sleep 1
""")


def record(run_id: str = RUN_ID) -> RunRecord:
    return RunRecord("rec", run_id, "cfg.yaml", "m", 1, [NodeRecord("a", "h", 0, "s", "t", "d")])


WRITER = textwrap.dedent("""
    import sys
    from mntui.sessions.runs import load_run
    for i in range(int(sys.argv[2])):
        rec = load_run("rec", sys.argv[1])
        rec.update(lambda r: r.note("tick", writer=sys.argv[3], i=i))
""")


def test_concurrent_writers_lose_nothing_and_readers_never_see_nothing() -> None:
    """Two processes doing read-modify-write on one record (fixed temp names made them
    fail 21 and 23 times in 300, and lost notes), while this one reads it 600 times."""
    rec = record()
    rec.create()
    n = 150
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, RUN_ID, str(n), name], stderr=subprocess.PIPE, text=True
        )
        for name in ("w1", "w2")
    ]
    reads = misses = 0
    while reads < 600 or any(w.poll() is None for w in writers):
        reads += 1
        misses += load_run("rec", RUN_ID) is None
    errors = [w.communicate(timeout=120)[1] for w in writers]
    assert [w.returncode for w in writers] == [0, 0], errors
    assert misses == 0
    final = load_run("rec", RUN_ID)
    assert final is not None and len(final.history) == 2 * n  # no lost update
    assert not list(rec.dir.glob("*.tmp"))


def test_records_are_private_and_latest_follows_create_only() -> None:
    rec = record()
    rec.create()
    assert (rec.dir.stat().st_mode & 0o777) == 0o700
    assert (rec.dir.parent.stat().st_mode & 0o777) == 0o700
    assert (rec.dir / "run.json").stat().st_mode & 0o777 == 0o600
    newer = record("20261122-130000-beef")
    newer.create()
    rec.update(lambda r: setattr(r, "status", RunStatus.TORN_DOWN))  # an old run's watchdog
    current = latest("rec")
    assert current is not None and current.run_id == newer.run_id


@pytest.mark.parametrize("bad", ["../../etc", "latest", "/tmp/x", "20261122-120000-abcd/.."])
def test_run_option_is_a_run_id_not_a_path(bad: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        check_run_id(bad)
    cfg = tmp_path / "job.yaml"
    cfg.write_text(LOCAL)
    res = subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", "-c", str(cfg), "status", "--run", bad],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "not a run id" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_group_result_keeps_exceptions_and_logs_a_bugs_traceback() -> None:
    cfg = parse_config(LOCAL)

    def op(node: Node) -> int:
        if node.name == "b":
            raise NodeError("b", "connection lost")
        if node.name == "c":
            raise ValueError("a bug")
        return len(node.run("echo hi").stdout)

    with Cluster(cfg.nodes, cfg.ssh) as cluster:
        seen: list[str] = []
        lock = threading.Lock()

        def on_result(o: object) -> None:
            with lock:
                seen.append(getattr(o, "node", ""))

        res = cluster.map(op, on_result=on_result)
    assert list(res) == ["a", "b", "c"] and sorted(seen) == ["a", "b", "c"]
    assert res.succeeded == {"a": 3} and not res.all_ok
    assert set(res.failed) == {"b", "c"}
    assert isinstance(res["b"].exception, NodeError) and res.errors["b"] == "connection lost"
    assert isinstance(res["c"].exception, ValueError)
    log = state_dir() / "errors.log"
    assert f"traceback in {log}" in res.errors["c"]
    text = log.read_text()
    assert "Traceback" in text and "ValueError: a bug" in text and "node c" in text
    assert log.stat().st_mode & 0o777 == 0o600
    assert res.where(lambda v: v > 1) == ["a"]
    assert res.map_values(str).succeeded == {"a": "3"}


def test_run_status_knows_live_from_ended() -> None:
    live = {RunStatus.LAUNCHING, RunStatus.RUNNING, RunStatus.RESTARTING}
    assert {s for s in RunStatus if s.is_live} == live
    assert {s for s in RunStatus if s.is_stopping} == {RunStatus.KILLING}
    rec = record()
    rec.create()
    loaded = load_run("rec", RUN_ID)
    assert loaded is not None and loaded.status is RunStatus.LAUNCHING
    assert json.loads((rec.dir / "run.json").read_text())["status"] == "launching"
    assert os.environ["XDG_STATE_HOME"] in str(rec.dir)  # tests never touch the user's own
