"""`watch.stall_after: auto`: a stall threshold learnt from the job's own steps, read from
the config, computed from the progress tracker's pace, used by the coordinator's judge
(node/rules/judging.py), and said by `status` as the coordinator journaled it."""

from __future__ import annotations

import json
import re

import pytest
from snaps import judge_of
from snaps import snap as base_snap

from mntui.sessions.config import ConfigError
from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.config.settings import AUTO_UNKNOWN, Action, WatchPolicy
from mntui.sessions.launch.board import BoardView, parse_board
from mntui.sessions.node.rules.judging import Deadline
from mntui.sessions.poll import NodeState, Pace
from mntui.sessions.poll.progress import DEFAULT_PATTERN, ProgressTracker
from mntui.sessions.poll.snapshot import JobProc
from mntui.sessions.runs import RunRecord, RunStatus
from mntui.tui.cli.clusterstatus import learnt_threshold
from mntui.tui.cli.runheader import status_header

MINIMAL = "job: j\nnodes: [a]\ncommand: x\n"
AUTO = WatchPolicy(stall_after="auto", on_stall=Action.KILL_ALL)
RUNNING = (JobProc(10, 1, "S", None, 1.0, "x"), JobProc(11, 10, "S", None, 1.0, "x"))


def test_auto_is_read_from_the_config_and_a_wrong_word_is_one_line() -> None:
    assert parse_config(MINIMAL + "watch: {stall_after: auto}\n").watch.stall_after == "auto"
    assert parse_config(MINIMAL + "watch: {stall_after: 20}\n").watch.stall_after == 20.0
    with pytest.raises(ConfigError) as info:
        parse_config(MINIMAL + "watch: {stall_after: fast}\n", "c.yaml")
    assert str(info.value).startswith("c.yaml:4 watch.stall_after: expected a number > 0")
    assert "or auto, got str 'fast'" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "step, longest, seconds",
    [
        (None, None, AUTO_UNKNOWN),  # steps not known yet: the fixed default
        (0.4, 1.0, 60.0),  # a fast job: the floor
        (8.0, 9.0, 80.0),  # 10 steps
        (0.4, 45.0, 90.0),  # it paused 45 s once (an eval) and came back
    ],
)
def test_the_threshold_is_the_floor_k_steps_or_twice_the_longest_pause(
    step: float | None, longest: float | None, seconds: float
) -> None:
    assert AUTO.stall_threshold(step, longest) == seconds
    assert WatchPolicy(stall_after=20).stall_threshold(step, longest) == 20.0


def feed_steps(tracker: ProgressTracker, node: str, times: list[float], per: int = 1) -> None:
    for i, t in enumerate(times):
        tracker.feed(node, [f"step {i * per}"], t)


def test_pace_is_learnt_from_finished_gaps_only() -> None:
    t = ProgressTracker(re.compile(DEFAULT_PATTERN))
    feed_steps(t, "a", [0.0, 1.0, 2.0])
    assert t.pace() is None  # two gaps: not enough yet
    feed_steps(t, "a", [0.0, 1.0, 2.0, 3.0, 4.0])
    feed_steps(t, "b", [0.0, 1.0, 2.0, 3.0, 4.0], per=4)  # a poll sees 4 steps at a time
    t.feed("a", [], 60.0)  # a hang in progress is no finished gap
    pace = t.pace()
    assert pace is not None and pace.longest_gap == 1.0
    assert pace.step_interval == pytest.approx((1.0 + 0.25) / 2)
    bunched = ProgressTracker(re.compile(DEFAULT_PATTERN))  # 3 steps a second, polled at 2 Hz
    for i, step in enumerate([0, 1, 3, 4, 6, 7, 9]):
        bunched.feed("a", [f"step {step}"], i * 0.5)
    assert bunched.pace() == Pace(pytest.approx(1 / 3), 0.5, 6)  # type: ignore[arg-type]


def test_the_judge_stalls_at_the_learnt_threshold() -> None:
    j = judge_of(AUTO)
    assert j.stall_after == AUTO_UNKNOWN
    assert j.learn(Pace(0.35, 1.0, 12)) and j.stall_after == 60.0
    assert not j.learn(Pace(0.36, 1.1, 13))  # a move under a tenth is not news
    quiet = {"a": base_snap("a", procs=RUNNING, output_age=59.0)}
    verdicts, triggers = j.judge(quiet, 10.0)
    assert verdicts["a"].state is NodeState.RUNNING and not triggers
    assert j.deadlines(quiet, verdicts, 10.0) == (Deadline("a", NodeState.STALLED, 11.0),)
    verdicts, triggers = j.judge({"a": base_snap("a", procs=RUNNING, output_age=60.5)}, 11.5)
    assert [(t.node, t.state) for t in triggers] == [("a", NodeState.STALLED)]
    fixed = judge_of(WatchPolicy(stall_after=20))
    assert not fixed.learn(Pace(0.35, 1.0, 12)) and fixed.stall_after == 20


def test_status_shows_the_threshold_the_coordinator_journaled_while_the_run_lives() -> None:
    """node/coord/coordinator.py journals each move of the learnt threshold; `status` of the
    run says the last one, and only while the run lives."""
    from boardtext import board_text

    def view(*seconds: float) -> BoardView:
        lines = [{"t": 1.0 + i, "kind": "stall-threshold", "node": None, "data": {"seconds": s}}
                 for i, s in enumerate(seconds)]  # fmt: skip
        journal = "".join(json.dumps(e) + "\n" for e in lines).encode()
        files = {"status.json": {"at": 9.0}, "journal.jsonl": journal or None}
        return parse_board(board_text(files, now=9.0))

    rec = RunRecord("j", "r1", "c.yaml", "127.0.0.1", 29500, [], status=RunStatus.RUNNING)
    assert learnt_threshold(view()) is None
    stall = learnt_threshold(view(300.0, 60.4))
    assert stall is not None and stall.startswith("60 s (auto")
    assert f"stall threshold: {stall}" in status_header(rec, "", stall=stall)
    rec.status = RunStatus.TORN_DOWN
    assert "stall threshold" not in status_header(rec, "", stall=stall)
