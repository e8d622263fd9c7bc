"""The straggler over time (issue 40): the coordinator's rule (node/rules/waitline.py) on two
kinds of input. Generated: a step model of a synchronous job (every rank computes, the
fast ones wait in the all-reduce for the slowest) sampled as the sentinels sample it,
4 times a second in rounds of 10 s; a rank 2x or 1.5x slower from the start or from
mid-run must be named within the issue's 30 / 60 s with its onset, and clean but
uneven runs (jitter, a rank that logs more, a data loader that stalls once) must name
nobody over 5 minutes. Recorded: real `py-spy record` files of a gloo job's ranks (one
waiting for the other), read by the one test of a wait (waits.record_waits)."""

from __future__ import annotations

import json
import random
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

import pytest

from mntui.sessions.node.rules import waitline
from mntui.sessions.node.rules.straggle import Suspect
from mntui.sessions.node.rules.waitline import Timeline, judge
from mntui.sessions.node.rules.waits import record_waits

SPY = Path(__file__).resolve().parents[1] / "data" / "py-spy"
ROUND, RATE = 10.0, 4  # the sentinels' round and the default 4 samples a second


def steps(
    ranks: int,
    seconds: float,
    seed: int,
    slow: int | None = None,
    factor: float = 1.0,
    onset: float = 0.0,
    jitter: float = 0.1,
    stall: tuple[int, float, float] | None = None,
) -> Job:
    """Per rank: the times its state changes and whether it waits from then on; and the
    job's steps as its log says them. A step: each rank computes 0.1 s (x factor for
    `slow` from `onset`, jittered, + a stall once of (rank, at, for)), then all meet in a
    10 ms all-reduce that ends after the slowest."""
    rng = random.Random(seed)
    out: dict[int, tuple[list[float], list[bool]]] = {r: ([], []) for r in range(ranks)}
    log: list[tuple[float, int]] = []
    t, stalled = 0.0, False
    while t < seconds:
        work = {r: 0.1 * max(0.2, 1 + rng.gauss(0, jitter)) for r in range(ranks)}
        if slow is not None and t >= onset:
            work[slow] *= factor
        if stall is not None and not stalled and t >= stall[1]:
            work[stall[0]] += stall[2]
            stalled = True
        end = t + max(work.values()) + 0.01
        for r in range(ranks):
            out[r][0].extend((t, t + work[r]))
            out[r][1].extend((False, True))
        t = end
        log.append((t, len(log) + 1))
    return Job(out, log)


@dataclass
class Job:
    ranks: dict[int, tuple[list[float], list[bool]]]
    steps: list[tuple[float, int]]  # (time, step) as the log says them


def sampled(
    job: Job, seconds: float, per_node: int = 1, seed: int = 0, log: bool = True
) -> tuple[Suspect | None, float]:
    """Rounds as the sentinels take them, judged after each as the coordinator does
    (with the job's steps from its log, or none); the first suspect and when (model
    seconds), or (None, seconds)."""
    rng = random.Random(seed)
    line = Timeline()
    t = 0.0
    while t + ROUND <= seconds:
        for r, (times, waits) in job.ranks.items():
            n = int((ROUND - 1) * RATE)
            bits = ""
            for i in range(n):
                k = bisect_right(times, t + 0.3 + (i + rng.random() * 0.5) / RATE) - 1
                bits += "1" if waits[k] else "0"
            line.add(r, f"g{r // per_node}", t, t + ROUND - 0.5, bits)
        t += ROUND
        line.prune(t)
        found = judge(line, t, 1e9 + t, [x for x in job.steps if x[0] <= t] if log else ())
        if found is not None:
            return found, t
    return None, seconds


@pytest.mark.parametrize("seed", range(4))
def test_a_rank_twice_slower_from_the_start_is_named_within_30_s(seed: int) -> None:
    found, at = sampled(steps(2, 120, seed, slow=1, factor=2.0), 120, seed=seed)
    assert found is not None and (found.rank, found.node) == (1, "g1"), found
    assert at <= 30 and found.mine.share < 0.1 and found.others[0].share > 0.4


@pytest.mark.parametrize("seed", range(4))
def test_a_rank_turned_1_5x_slower_mid_run_is_named_within_60_s_with_its_onset(
    seed: int,
) -> None:
    onset = 63.0
    found, at = sampled(steps(4, 200, seed, slow=2, factor=1.5, onset=onset), 200, seed=seed)
    assert found is not None and found.rank == 2, found
    assert at - onset <= 60
    assert found.since is not None and abs((found.since - 1e9) - onset) <= 3 * waitline.BIN


def test_one_slow_gpu_of_a_node_of_four_is_named_against_its_node_mates() -> None:
    """The node's other ranks wait with every other node's: the slow rank alone is low."""
    job = steps(8, 120, 5, slow=6, factor=2.0)
    found, at = sampled(job, 120, per_node=4)
    assert found is not None and (found.rank, found.node) == (6, "g1") and at <= 30


def test_a_node_slowed_as_a_whole_is_named_by_its_lowest_rank() -> None:
    job = steps(4, 120, 7, slow=3, factor=2.0)
    job.ranks[2] = job.ranks[3]  # both ranks of node g1 as slow (a CPU quota on the node)
    found, _ = sampled(job, 120, per_node=2)
    assert found is not None and found.node == "g1" and found.rank in (2, 3)


@pytest.mark.parametrize(
    "what",
    [
        {"ranks": 2, "jitter": 0.15},  # plain, noisy
        {"ranks": 4, "jitter": 0.2},
        {"ranks": 2, "slow": 0, "factor": 1.1, "jitter": 0.05},  # a rank that logs more
        {"ranks": 2, "stall": (1, 60.0, 8.0)},  # a data loader that stalls once
        {"ranks": 2, "stall": (1, 65.0, 10.0), "jitter": 0.05},
    ],
    ids=["plain", "4 ranks", "logs more", "stall 8 s", "stall 10 s"],
)
@pytest.mark.parametrize("seed", range(3))
def test_clean_but_uneven_work_names_nobody_in_five_minutes(what: dict, seed: int) -> None:
    found, _ = sampled(steps(seconds=300, seed=seed, **what), 300, seed=seed)
    assert found is None, found


@pytest.mark.parametrize("seed", range(3))
def test_without_the_logs_steps_a_short_stall_is_still_no_straggler(seed: int) -> None:
    """A job that prints no step (or rarely): the waits alone must tell a 5 s stall."""
    job = steps(2, 300, seed, stall=(1, 62.0, 5.0))
    assert sampled(job, 300, seed=seed, log=False)[0] is None
    job.steps = job.steps[::200]  # a line every ~20 s: too rare to see a stop by
    assert sampled(job, 300, seed=seed)[0] is None


def test_a_stall_stops_the_steps_a_straggler_only_slows_them() -> None:
    times = [0.2 * k for k in range(1, 200)]
    log = [(t, k) for k, t in enumerate(times, 1) if not 20.0 < t < 23.0]  # 3 s without one
    assert waitline.stopped(log, 15.0, 30.0) and waitline.stopped(log, 20.5, 26.0)
    assert not waitline.stopped(log, 21.0, 22.0)  # a second of it is no stop yet
    assert not waitline.stopped(log, 24.0, 39.0)  # after it
    slower = log + [(40.0 + 0.4 * k, 200 + k) for k in range(50)]  # 2x: no stop
    assert not waitline.stopped(slower, 40.0, 60.0)
    assert waitline.stopped(slower, 60.0, 70.0)  # no step since 59.6: stopped now
    assert not waitline.stopped(log[:4], 21.0, 26.0)  # too few steps to tell
    rare = [(20.0 * k, k) for k in range(10)]  # a line every 20 s: its pace says 80 s
    assert not waitline.stopped(rare, 100.0, 130.0)


def test_a_node_throttled_inside_its_collectives_is_named_against_busy_waiters() -> None:
    """A CPU quota stops the slow node where its quota runs out, inside the collective it
    just entered too: it "waits" half the time while its partner waits nearly always."""
    line = Timeline()
    for k in range(3):
        line.add(0, "g0", 10.0 * k, 10.0 * k + 9, "1" * 36)
        line.add(1, "g1", 10.0 * k, 10.0 * k + 9, "10" * 18)
    found = judge(line, 30.0, 1e9)
    assert found is not None and found.node == "g1"
    calm = Timeline()  # both wait most of the time: a slow network, nobody holds the job
    for k in range(3):
        calm.add(0, "g0", 10.0 * k, 10.0 * k + 9, "1110" * 9)
        calm.add(1, "g1", 10.0 * k, 10.0 * k + 9, "1101" * 9)
    assert judge(calm, 30.0, 1e9) is None


def test_a_recorded_py_spy_record_reads_as_waits_and_names_the_slow_rank() -> None:
    """Real records (py-spy 0.4, --idle --nonblocking --format speedscope, 4 a second) of
    a 2-rank gloo job whose rank 1 computes twice as long: rank 0 waits in all_reduce."""
    waiting = record_waits((SPY / "gloo-waiting-rank.speedscope.json").read_text())
    slow = record_waits((SPY / "gloo-slow-rank.speedscope.json").read_text())
    assert len(waiting) == len(slow) == 19
    assert waiting.count("1") >= 10 and slow == "0" * 19
    line = Timeline()
    alike = Timeline()
    for k in range(3):
        line.add(0, "g0", 5.0 * k, 5.0 * k + 4.75, waiting)
        line.add(1, "g1", 5.0 * k, 5.0 * k + 4.75, slow)
        alike.add(0, "g0", 5.0 * k, 5.0 * k + 4.75, waiting)
        alike.add(1, "g1", 5.0 * k, 5.0 * k + 4.75, waiting[::-1])
    found = judge(line, 15.0, 1e9)
    assert found is not None and found.rank == 1
    assert judge(alike, 15.0, 1e9) is None  # both wait alike: nobody


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        '{"shared": {"frames": 3}, "profiles": []}',
        '{"shared": {"frames": []}, "profiles": [{"samples": 7}]}',
        "[" * 100_000,
    ],
)
def test_a_record_of_another_shape_says_nothing(text: str) -> None:
    assert record_waits(text) == ""


def test_a_records_odd_samples_say_nothing() -> None:
    data = json.loads((SPY / "gloo-waiting-rank.speedscope.json").read_text())
    data["profiles"][0]["samples"] = [[3, 2, 1, 0], [99], ["x"], [3, 4], []]
    data["shared"]["frames"][4]["line"] = "12"  # not a number: a frame of no use
    assert record_waits(json.dumps(data)) == "1---" + "-"
    data["shared"]["frames"][0]["file"] = "/w/train.py"  # the user's own all_reduce
    assert record_waits(json.dumps(data))[0] == "0"
