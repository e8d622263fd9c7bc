"""The straggler on the cluster (issue 30): the one rule, moved into the node package and
re-exported where the manager had it; the sentinel's `waits` frames read strictly; the
coordinator's tally, finding, journal and kill trigger on a real board; a sentinel's
round on real processes (py-spy on a live one, a forked child left out)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.launch.clusterwatch import watch_config
from mntui.sessions.node.board.coordstate import Board
from mntui.sessions.node.coord.slowness import FILE, SlowWatch
from mntui.sessions.node.rules import straggle, waits
from mntui.sessions.node.rules.states import NodeState
from mntui.sessions.node.sentinel import spysample
from mntui.sessions.node.wire.facts import ProcFact
from mntui.sessions.node.wire.watchcfg import BadWatchFile, WatchConfig, parse, to_json
from mntui.sessions.report import RankWait, finding_of, slow_section
from mntui.sessions.report.stacks import Frame

RUN = "20261125-101010-abcd"
C10D = "/v/site-packages/torch/distributed/distributed_c10d.py"


def _cfg(watch: str = "") -> WatchConfig:
    text = f"job: j\nnodes: [n0, n1]\ncommand: x\nwatch: {{where: cluster{watch}}}\n"
    return watch_config(parse_config(text), RUN, "n0", f"j/{RUN}/n0", "j-n0", ("n0", "n1"),
                        "10.0.0.1", None)  # fmt: skip


def test_a_sample_is_a_wait_a_work_or_nothing() -> None:
    user = Frame("step", "/w/train.py", 9)
    assert waits.sample_of((Frame("all_reduce", C10D, 3), user)) is True
    assert waits.sample_of((user,)) is False
    assert waits.sample_of(()) is None  # a failed dump is no evidence of work
    assert waits.sample_of((Frame("init_process_group", C10D, 3), user)) is None  # joining


def test_the_watch_file_carries_the_straggler_settings_and_refuses_odd_ones() -> None:
    wc = _cfg(", sample_every: 2, on_slow: kill_all, slow_fraction: 0.3, slow_after: 60")
    back = parse(json.loads(to_json(wc)))
    assert back == wc and (back.sample_every, back.on_slow) == (2.0, "kill_all")
    assert (back.slow_fraction, back.slow_after) == (0.3, 60.0)
    for bad in ({"on_slow": "reboot"}, {"sample_every": -1}, {"slow_fraction": 2.0}):
        with pytest.raises(BadWatchFile, match="sample_every, on_slow or slow_"):
            parse({**json.loads(to_json(wc)), **bad})
    old = {k: v for k, v in json.loads(to_json(wc)).items() if k != "sample_every"}
    assert parse(old).sample_every == 0  # a launch that sent none: no samples


@pytest.mark.parametrize(
    ("bad", "took"),
    [
        (None, 9.0),
        ("0:1", 9.0),
        ({"0": "1"}, 9.0),
        ([[0, "1"]] * 2, 9.0),  # a rank twice in one round
        ([[0, 1]], 9.0),  # its verdicts are a string
        ([[0, True]], 9.0),  # the old frame's boolean
        ([[True, "0"]], 9.0),  # a rank is no boolean
        ([[-1, "1"]], 9.0),
        ([[1 << 30, "1"]], 9.0),
        ([[0.0, "1"]], 9.0),
        ([[0, "1", "x"]], 9.0),
        ([[[0], "1"]], 9.0),
        ([[0, ""]], 9.0),  # no sample at all
        ([[0, "01x"]], 9.0),  # a verdict that is none of ours
        ([[0, "1" * (waits.MAX_SAMPLES + 1)]], 9.0),
        ([[i, "1"] for i in range(spysample.MAX_RANKS + 1)], 9.0),
        ([[0, "1"]], None),  # how long the round took
        ([[0, "1"]], 0),
        ([[0, "1"]], -3.0),
        ([[0, "1"]], True),
        ([[0, "1"]], float("inf")),
        ([[0, "1"]], spysample.MAX_TOOK + 1),
    ],
)
def test_a_waits_frame_of_another_shape_is_malformed(bad: Any, took: Any) -> None:
    with pytest.raises(spysample.Malformed):
        spysample.from_wire(bad, took)


def test_a_good_waits_frame_is_read() -> None:
    assert spysample.from_wire([[3, "0-1"], [1, "1"]], 9) == (9.0, [(1, "1"), (3, "0-1")])
    assert spysample.from_wire(spysample.wire([(0, "10")]), 9.5) == (9.5, [(0, "10")])
    assert spysample.rate_of(0.25) == 4 and spysample.rate_of(10) == 1
    assert spysample.rate_of(0.001) == spysample.MAX_RATE


@pytest.fixture
def board(tmp_path: Path) -> Board:
    return Board(_cfg(", on_slow: kill_all"), str(tmp_path / "coord"))


def _frame(*pairs: tuple[int, str], run: str = RUN, took: float = 9.0) -> dict[str, Any]:
    return {"k": "waits", "run": run, "took": took, "ranks": [list(p) for p in pairs]}


def _rounds(slow: SlowWatch, start: float, bits: dict[int, str], n: int) -> list[Any]:
    """`n` rounds of 10 s from `start`, each rank's verdicts `bits`, rank r on node n<r>;
    the triggers of the last judgement that gave any."""
    got: list[Any] = []
    for k in range(n):
        t = start + 10.0 * (k + 1)
        for rank, b in bits.items():
            assert slow.heard(f"n{rank}", _frame((rank, b)), now=t)
        got = slow.judge(t) or got
    return got


def test_the_coordinator_names_the_rank_that_never_waits_and_asks_for_the_kill(
    board: Board,
) -> None:
    slow = SlowWatch(board.cfg, board)
    assert not slow.heard("n0", {"k": "snap"})  # the board's, not ours
    board.steps.update({"n0": (100, 10.0), "n1": (100, 10.0)})
    assert _rounds(slow, 0.0, {0: "0001000100" * 4, 1: "0100000001" * 4}, 3) == []  # clean
    assert slow.heard("n1", _frame((1, "1" * 40), run="20261125-101011-abcd"), now=31.0)
    for k in range(3):  # the steps the sentinels read in their logs: half the pace now
        board.steps.update({"n0": (100 + 10 * k, 1.0), "n1": (100 + 10 * k, 1.0)})
        slow.judge(31.0 + k)
    (t,) = _rounds(slow, 30.0, {0: "0110" * 10, 1: "0" * 40}, 3)
    assert (t.node, t.state, t.action) == ("n1", NodeState.RUNNING, "kill_all")
    assert t.why.startswith("straggler: rank 1 (n1) waits 0 % of the time, the other ")
    assert ", since " in t.why and t.why.endswith(": it holds the job")
    assert _rounds(slow, 60.0, {0: "0110" * 10, 1: "0" * 40}, 1) == []  # named once
    saved = json.loads((Path(board.out) / FILE).read_text())
    found = finding_of(saved["finding"])
    assert saved["run"] == RUN and found is not None and found.suspect is not None
    s = found.suspect
    assert s.since is not None and s.named_at - 25 <= s.since <= s.named_at - 5
    assert found.lines[0].startswith("straggler: rank 1 (n1) waits 0 % of the time")
    journal = [json.loads(x) for x in (Path(board.out) / "journal.jsonl").read_text().splitlines()]
    named = [j for j in journal if j["kind"] == "straggler"]
    assert len(named) == 1 and named[0]["data"]["line"] == t.why.removeprefix("straggler: ")


def test_hostile_frames_are_counted_and_never_believed(board: Board) -> None:
    slow = SlowWatch(board.cfg, board)
    for bad in ({"k": "waits", "run": RUN, "took": 9.0}, _frame((0, "1"), (0, "0")),
                {"k": "waits", "run": RUN, "took": 9.0, "ranks": [[0, "yes"]]},
                _frame((0, "1"), took=-1.0)):  # fmt: skip
        assert slow.heard("n0", bad, now=1.0)
    assert board.malformed == 4 and slow.malformed == 4
    assert slow.judge(1.0) == [] and not (Path(board.out) / FILE).exists()


def test_a_clean_job_names_nobody_and_a_new_attempt_starts_over(board: Board) -> None:
    slow = SlowWatch(board.cfg, board)
    mixed = {0: "0100000100" * 4, 1: "0001000010" * 4, 2: "1000000001" * 4}
    assert _rounds(slow, 0.0, mixed, 12) == []
    found = finding_of(json.loads((Path(board.out) / FILE).read_text())["finding"])
    assert found is not None and found.suspect is None and found.rounds == 12
    assert {r.rank for r in found.ranks} == {0, 1, 2}
    board.new_attempt(1, "20261125-101011-abcd")
    slow.heard("n0", _frame((0, "1")), now=200.0)  # the attempt before's
    slow.judge(200.0)
    assert slow.line.rounds == 0 and slow.run == board.run


def test_a_moment_is_judged_once_every_node_has_reached_it(board: Board) -> None:
    """The sentinels' rounds end together but arrive one by one: nothing is judged until
    every rank has been sampled further (a node whose sentinel went quiet for STALE s
    holds nobody up)."""
    slow = SlowWatch(board.cfg, board)
    slow.heard("n0", _frame((0, "1" * 36)), now=10.0)
    slow.heard("n1", _frame((1, "0" * 36)), now=10.2)
    slow.judge(10.2)
    assert slow.line.rounds == 1
    slow.heard("n0", _frame((0, "1" * 36)), now=20.0)
    slow.judge(20.0)
    assert slow.line.rounds == 1  # node1's round of this moment is on its way
    slow.heard("n1", _frame((1, "0" * 36)), now=20.3)
    slow.judge(20.3)
    assert slow.line.rounds == 2
    for t in (30.0, 40.0, 50.0):  # node1 went quiet
        slow.heard("n0", _frame((0, "1" * 36)), now=t)
        slow.judge(t)
    assert slow.line.rounds == 3 and slow.line.live() == [0]  # judged at 50: n1 left out


def test_a_node_slow_by_its_steps_is_journaled_not_killed(board: Board) -> None:
    wc = _cfg(", slow_after: 5")
    slow = SlowWatch(wc, board)
    board.steps.update({"n0": (100, 4.0), "n1": (40, 1.0)})
    assert slow.judge(0.0) == [] and slow.judge(6.0) == []
    journal = (Path(board.out) / "journal.jsonl").read_text()
    assert (
        '"kind": "slow"' in journal and "n1 is slow (node rank 1): below 0.5x the median" in journal
    )


def test_the_coordinators_finding_is_the_reports() -> None:
    ranks = [RankWait(0, "n0", 10, 7), RankWait(1, "n1", 10, 0)]
    s = straggle.name_suspect(ranks, 9.0, 1.0)
    assert s is not None
    s = replace(s, since=1_700_000_000.0, step=0.21, step_before=0.1)
    data = straggle.finding_json(s, ranks, 10, 2)
    found = finding_of(json.loads(json.dumps(data)))
    assert found is not None and found.suspect == s and found.malformed == 2
    at = time.strftime("%H:%M:%S", time.localtime(1_700_000_000.0))
    assert found.lines == [
        "straggler: rank 1 (n1) waits 0 % of the time, the other 70 %, a step 0.21 s "
        f"(was 0.10 s), since {at}: it holds the job"
    ]
    bad = {**data, "suspect": {**data["suspect"], "rank": 5}}  # named, not among the ranks
    assert finding_of(bad) is None and finding_of({"suspect": None}) is None
    # the node's numbers are data: an onset or a step time out of range is none
    odd = {**data, "suspect": {**data["suspect"], "since": float("inf"), "step": -1.0}}
    found = finding_of(json.loads(json.dumps(odd)))
    assert found is not None and found.suspect is not None
    assert (found.suspect.since, found.suspect.step, found.suspect.step_before) == (None, None, 0.1)


def test_slow_section_reads_the_finding(tmp_path: Path) -> None:
    ranks = [RankWait(0, "n0", 10, 7), RankWait(1, "n1", 10, 0)]
    data = straggle.finding_json(straggle.name_suspect(ranks, 9.0, 1.0), ranks, 10, 0)
    (tmp_path / "straggler.json").write_text(json.dumps(data))
    assert slow_section(tmp_path)[1].startswith("  straggler: rank 1 (n1) waits 0 %")


@pytest.fixture
def rank() -> Iterator[subprocess.Popen[bytes]]:
    """A real `rank` (RANK=3 in its environment, py-spy on its PATH) with a forked child
    that inherits it, as a DataLoader worker does; killed by its PID."""
    env = {k: v for k, v in os.environ.items() if k != "RANK"}
    env["RANK"] = "3"
    env["PATH"] = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    code = "import os,time\nif os.fork() == 0:\n    time.sleep(60)\nelse:\n    time.sleep(60)\n"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(x) for x in text.split()]


def test_a_sentinels_round_samples_the_rank_not_its_forked_child(
    rank: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    from fakecluster import wait_for

    wait_for(lambda: _children(rank.pid), 10, what="the rank's forked child")
    (child,) = _children(rank.pid)
    try:
        procs = [ProcFact(rank.pid, os.getpid(), "S"), ProcFact(child, rank.pid, "S")]
        ranks, paths = spysample.ranks_of(procs)
        assert ranks == {rank.pid: 3} and paths
        if spysample.find_spy(paths) is None:
            pytest.skip("no py-spy in the venv")
        (got,) = spysample.one_round(procs, 1, 4, str(tmp_path))
        assert got[0] == 3 and got[1] and set(got[1]) == {"0"}  # in time.sleep: working
        assert not list(tmp_path.iterdir())  # py-spy's file read and removed
    finally:
        os.kill(child, 9)


def _board(straggler: object, now: float) -> str:
    from boardtext import board_text

    nodes = {n: {"state": "running", "why": "", "connected": True} for n in ("n0", "n1")}
    status = {"run": RUN, "at": now, "nodes": nodes}
    return board_text({"status.json": status, "straggler.json": straggler}, now=now)


def test_status_of_a_cluster_run_shows_the_coordinators_straggler(
    tmp_path: Path,
) -> None:
    """The board's finding is synced into the run's directory and said in its status;
    one about nodes not of this run is never believed."""
    import time

    from mntui.sessions.launch.board import parse_board
    from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus
    from mntui.tui.cli.clusterstatus import board_status

    nodes = [NodeRecord(n, "localhost", r, f"j-{n}", f"j/{RUN}/{n}", f".mntui/runs/j/{RUN}/{n}")
             for r, n in enumerate(["n0", "n1"])]  # fmt: skip
    record = RunRecord("j", RUN, "cfg.yaml", "localhost", 1, nodes)
    record.status, record.watch_port = RunStatus.RUNNING, 29501
    record.create()
    ranks = [RankWait(0, "n0", 10, 7), RankWait(1, "n1", 10, 0)]
    finding = straggle.finding_json(straggle.name_suspect(ranks, 9.0, 1.0), ranks, 10, 0)
    said: list[str] = []
    now = time.time()

    def say(text: str = "", **_: object) -> None:
        said.extend(text.splitlines())

    stranger = {**finding, "ranks": [{**finding["ranks"][0], "node": "n9"}, finding["ranks"][1]]}
    view = parse_board(_board({"v": 1, "run": RUN, "finding": stranger}, now))
    board_status(record, view, False, say, None, 0)
    assert not [x for x in said if x.startswith("straggler: ")], said
    view = parse_board(_board({"v": 1, "run": RUN, "finding": finding}, now))
    board_status(record, view, False, say, None, 0)
    line = "straggler: rank 1 (n1) waits 0 % of the time, the other 70 %: it holds the job"
    assert line in said, said
    said.clear()
    board_status(record, view, True, say, 2, 0)
    assert json.loads("\n".join(said))["straggler"]["suspect"]["node"] == "n1"


def test_what_the_coordinator_journaled_reads_as_what_happened_while_away() -> None:
    from mntui.sessions.watch.fromcluster import EVENTS, _event

    line = "rank 1 (n1) waits 0 % of the time, the other 70 %: it holds the job"
    named = {"kind": "straggler", "node": "n1", "data": {"line": line, "action": "kill_all"}}
    slow = {"kind": "slow", "node": "n1", "data": {"line": "n1 is slow: \x1b[2Jbelow 0.5x"}}
    assert {"straggler", "slow"} <= EVENTS
    assert _event(named) == f"straggler: {line} (on_slow: kill_all)"
    assert _event(slow) == "n1 is slow: below 0.5x"  # node text, made safe


def test_a_webhook_notifications_fate_and_a_workers_respawn_read_as_what_happened() -> None:
    """The coordinator's `notified` line (node/notice/notifysend.py) and a worker's sentinel
    started again by its guard (node/sentinel/guard.py, journaled by the coordinator)."""
    from mntui.sessions.watch.fromcluster import EVENTS, _event

    sent = {"kind": "notified", "node": None,
            "data": {"id": "a1", "webhook": "sent", "why": None, "event": "failure"}}  # fmt: skip
    failed = {"kind": "notified", "node": None,
              "data": {"id": "a2", "webhook": "failed", "why": "connection\nrefused\x1b[31m"}}  # fmt: skip
    again = {"kind": "respawn", "node": "n1", "data": {"who": "sentinel", "by": "guard"}}
    assert {"notified", "respawn"} <= EVENTS
    assert _event(sent) == "the webhook notification of the failure event: sent"  # issue 38
    assert _event(failed) == "the webhook notification: failed (connection refused)"  # a 2.x one
    assert _event(again) == "n1's sentinel died and was started again"


def test_a_straggler_torn_down_is_the_attempts_why_not_a_clean_log(board: Board) -> None:
    """A straggler's log has no error and no exit code: the attempt's first failure says
    what the judge saw (the chain's end, the report's `attempt N ended` line), while a
    node whose own log broke first still wins over the judge's why."""
    from mntui.sessions.node.board.teardown import blame
    from mntui.sessions.node.rules.judging import NodeTrigger

    why = "straggler: rank 1 (n1) waits 0 % of the time, the other 50 %: it holds the job"
    t = NodeTrigger("n1", NodeState.RUNNING, why, "kill_all")
    clean = {"at": None, "exit_code": None, "rank": None, "cause": None, "summary": None,
             "secondary": False, "mistake": False}  # fmt: skip
    first = blame(board, {"n0": {"cause": clean}, "n1": {"cause": clean}}, t)
    assert first is not None and (first.node, first.why) == ("n1", why)
    broke = dict(clean, at=1.0, exit_code=1, summary="RuntimeError: boom")
    first = blame(board, {"n0": {"cause": broke}, "n1": {"cause": clean}}, t)
    assert first is not None and (first.node, first.why) == ("n0", "RuntimeError: boom")


def test_a_node_whose_sentinel_never_came_is_unreachable_after_the_start_grace(
    board: Board,
) -> None:
    """Issue 38, item 2: a launch cut short (this machine gone after the main started)
    leaves workers whose sentinels never come; the coordinator's judge sees them silent
    once the start's grace (the launch's ready_timeout and more) is over, and tears the
    attempt down after `unreachable_after` as for any silent node."""
    grace = board.cfg.start_grace
    before, _ = board.facts(board.start + grace - 1.0)
    assert before == {}  # still starting: nothing to judge yet
    after, _ = board.facts(board.start + grace + 1.0)
    assert set(after) == {"n0", "n1"}
    assert all("its sentinel never connected" in str(f) for f in after.values()), after
