"""The kill's request-and-wait script on the main (launch/coordkill.py), run by `sh`.

Why: its exit status is read as whether ssh worked (`_asked`): a script that failed at
its last command made a cold `mntui kill` ask again over another connection and wait
its whole grace a second time.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from mntui.sessions.launch.board import parse_board
from mntui.sessions.launch.coordkill import answer_script

RUN_DIR = ".mntui/runs/j/r/n0"


def _run(home: Path) -> subprocess.CompletedProcess[str]:
    script = answer_script(RUN_DIR, "00ff", 0.2)
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True)


def test_no_decision_yet_is_an_answer_not_a_failure(tmp_path: Path) -> None:
    (tmp_path / RUN_DIR / "coord").mkdir(parents=True)
    res = _run(tmp_path)  # no coordinator, no decision.json
    assert res.returncode == 0, res.stderr
    view = parse_board(res.stdout.partition("@BOARD\n")[2])
    assert view.decision is None and not view.alive


def test_the_decision_comes_back_whole(tmp_path: Path) -> None:
    coord = tmp_path / RUN_DIR / "coord"
    coord.mkdir(parents=True)
    decision = {"request": "00ff", "ended_at": 5.0, "kill": {"n0": {"killed": [1]}}}
    (coord / "decision.json").write_text(json.dumps(decision))
    res = _run(tmp_path)
    assert res.returncode == 0, res.stderr
    assert parse_board(res.stdout.partition("@BOARD\n")[2]).decision == decision
    res = _run(tmp_path / "nowhere")  # no run dir at all: still an answer
    assert res.returncode == 0 and "ALIVE no" in res.stdout


def test_a_kills_decision_writes_its_attempts_last_clock_and_only_its_own() -> None:
    """The ledger is exact right after `mntui kill`: the coordinator's decision carries
    the attempt's step clock (node/board/teardown.py), written into the attempt's record; a
    decision of another run writes nothing there."""
    from mntui.sessions.launch.coordkill import _note_last_steps
    from mntui.sessions.runs import RunRecord, load_run

    run = "20261126-101010-abcd"
    rec = RunRecord("ck", run, "/x.yaml", "127.0.0.1", 1, [])
    rec.create()
    clock = {"first_step_at": 100.0, "first_step": 1, "last_step": 90, "last_step_at": 190.0,
             "gpus": 0, "gpu_nodes": 0}  # fmt: skip

    def steps() -> list[dict[str, object]]:
        saved = load_run("ck", run)
        assert saved is not None
        return [h for h in saved.history if h.get("what") == "steps"]

    _note_last_steps(rec, {"run": "20261126-101011-abcd", "steps": clock})
    assert steps() == []
    _note_last_steps(rec, {"run": run, "steps": {"last_step": "x"}})  # nothing it knows
    assert steps() == []
    _note_last_steps(rec, {"run": run, "steps": clock})
    (note,) = steps()
    assert note["last_step_at"] == 190.0 and note["last_step"] == 90


def test_a_fifo_the_job_planted_never_blocks_the_request(tmp_path: Path) -> None:
    """The job runs as the same user: a FIFO where the request used to be written
    (`coord/kill.tmp`) blocked `mntui kill`'s shell on the main for ever; the request is
    now a file of its own, renamed over whatever `coord/kill` was."""
    from mntui.sessions.launch.coordkill import request_script

    coord = tmp_path / RUN_DIR / "coord"
    coord.mkdir(parents=True)
    os.mkfifo(coord / "kill.tmp")
    os.mkfifo(coord / "kill")
    (coord / "status.json").write_text("{}")
    env = {**os.environ, "HOME": str(tmp_path), "MNTUI_RUN": "j/r/n0/coord"}
    coordinator = subprocess.Popen(["sleep", "60"], env=env)  # a live process, its tag
    try:
        (tmp_path / RUN_DIR / "coord.pid").write_text(f"{coordinator.pid}\n")
        res = subprocess.run(
            ["sh", "-c", request_script(RUN_DIR, 2.0, "00ff")],
            env={**os.environ, "HOME": str(tmp_path)}, capture_output=True, text=True,
            timeout=10,
        )  # fmt: skip
    finally:
        coordinator.kill()
        coordinator.wait()
    assert "COORD asked" in res.stdout, res.stdout + res.stderr
    assert json.loads((coord / "kill").read_text())["id"] == "00ff"
    assert [p.name for p in coord.iterdir() if p.name.startswith(".kill.")] == []
