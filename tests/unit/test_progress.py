"""Progress from log lines: the default pattern on the lines common trainers print,
rates over a fake clock, straggler episodes, the report's wording."""

from __future__ import annotations

import re
import time

import pytest

from mntui.sessions.config import compile_pattern
from mntui.sessions.poll.progress import (
    DEFAULT_PATTERN,
    MAX_STEP,
    STOP_AFTER,
    NodeProgress,
    ProgressTracker,
    describe,
    stop_after,
    stopped,
)

PATTERN = compile_pattern(DEFAULT_PATTERN)

# Lines in the formats the trainers print (their logging format strings), with the step
# a person reading them would name.
PROGRESS_LINES = [
    ("step 120 loss 2.3", 120),
    ("Iter 40/1000", 40),
    ("Epoch 3 step 120", 120),
    ("[rank1]: step 7", 7),
    # karpathy/nanoGPT train.py
    ("iter 2000: loss 1.7311, time 31.42ms, mfu 12.31%", 2000),
    ("step 2000: train loss 1.7602, val loss 1.8857", 2000),
    # build-nanogpt style
    ("step 13, loss: 2.608070135116577", 13),
    # Megatron-LM training_log
    (
        " iteration      100/  500000 | consumed samples:        51200 | elapsed time per "
        "iteration (ms): 1403.2 | learning rate: 1.500E-05 |",
        100,
    ),
    # DeepSpeed engine's log_dist, under torchrun's rank prefix
    (
        "[rank0]:[2024-03-01 10:12:31,512] [INFO] [logging.py:96:log_dist] [Rank 0] "
        "step=10, skipped=0, lr=[2.9999e-05], mom=[(0.9, 0.95)]",
        10,
    ),
    # torchtitan's colored metrics line
    (
        "[rank0]:[titan] 2025-01-09 10:00:01,234 - root - INFO - \x1b[31mstep: 12  "
        "\x1b[32mloss:  7.1234  \x1b[33mmemory: 20.11GiB(25.39%)  \x1b[34mtps: 6,123\x1b[39m",
        12,
    ),
    # the PyTorch tutorials' classic
    ("Epoch [3/10], Step [120/600], Loss: 0.2290", 120),
    ("Epoch: 2, Iteration: 300, loss 0.31", 300),
    ("global_step=4812 loss=0.91", 4812),
    # a progress bar rewriting itself: the latest state counts
    ("Epoch 1:  10%|█ | 10/100\rEpoch 2:  20%|██ | 20/100", 2),
]

NOT_PROGRESS = [
    # HF Trainer's log dict: 'epoch' is a fraction, and quoted
    "{'loss': 1.9041, 'grad_norm': 3.0521, 'learning_rate': 4.5e-05, 'epoch': 0.27}",
    "{'train_runtime': 41.2, 'train_samples_per_second': 3.1, 'epoch': 3.0}",
    # HF Trainer's banner
    "  Num Epochs = 3",
    "  Total optimization steps = 1,000",
    "  Gradient Accumulation steps = 8",
    # code and tracebacks mention steps without a number
    '  File "/work/train.py", line 41, in step',
    "    optimizer.step()",
    "Epoch 0.5",
    "warmup_step: 100",
    "step 12345678901234567",
]


@pytest.mark.parametrize(("line", "step"), PROGRESS_LINES)
def test_default_pattern_reads_trainer_lines(line: str, step: int) -> None:
    t = ProgressTracker(PATTERN)
    t.feed("n0", [line], now=0.0)
    assert t.snapshot()["n0"].step == step


@pytest.mark.parametrize("line", NOT_PROGRESS)
def test_default_pattern_ignores_non_progress(line: str) -> None:
    t = ProgressTracker(PATTERN)
    t.feed("n0", [line], now=0.0)
    assert t.snapshot()["n0"] == NodeProgress("n0", step=None, rate=None, at=None)


def test_pattern_without_step_group_refused() -> None:
    with pytest.raises(ValueError, match="no named group `step`"):
        compile_pattern(r"iter (\d+)")
    with pytest.raises(ValueError, match="not a valid regular expression"):
        compile_pattern(r"(?P<step>\d+")
    assert compile_pattern(r"it=(?P<step>\d+)").search("it=5") is not None
    with pytest.raises(ValueError):
        ProgressTracker(re.compile(r"iter (\d+)"))


def test_untrusted_lines_never_raise_and_are_capped() -> None:
    t = ProgressTracker(compile_pattern(r"s=(?P<step>\S+)"))
    t.feed("n0", ["s=abc", f"s={MAX_STEP + 1}", "s=-3", "\udcff\x00s=\x1b[2J"], now=0.0)
    assert t.snapshot()["n0"].step is None
    assert t.skipped == 3
    # a step beyond the first 4,000 characters of a line is not looked at
    t.feed("n0", ["x" * 5000 + " s=9"], now=1.0)
    assert t.snapshot()["n0"].step is None
    t.feed("n0", ["s=8 " + "x" * 5000], now=2.0)
    assert t.snapshot()["n0"].step == 8


def test_hostile_lines_cost_linear_time() -> None:
    """Lines built to make a regex backtrack; a naive `\\s*:?\\s*` pattern takes minutes
    on the first one. A bound, not a benchmark."""
    lines = [
        "step" + " " * 3990 + "x",
        "epoch " * 700,
        "epoch step " * 400,
        ("epoch 1" + " " * 190) * 20,
        "step:" + " " * 2000 + "[" + " " * 1900,
        "Epoch\r" * 2000,
    ]
    t = ProgressTracker(PATTERN)
    t0 = time.perf_counter()
    t.feed("n0", lines * 10, now=0.0)
    assert time.perf_counter() - t0 < 2.0
    assert t.snapshot()["n0"].step == 1


def test_rate_over_a_sliding_window() -> None:
    t = ProgressTracker(PATTERN, window=30.0)
    t.feed("n0", ["step 0"], now=100.0)
    assert t.snapshot()["n0"].rate is None  # one step says nothing about speed
    for s in range(1, 61):  # 2 steps/s for 60 s, one poll a second
        t.feed("n0", [f"step {2 * s - 1}", f"step {2 * s}"], now=100.0 + s)
    p = t.snapshot()["n0"]
    assert p.step == 120 and p.at == 160.0 and p.rate == pytest.approx(2.0)
    # it stops printing: polls bring no lines, the rate decays to 0 over the window
    t.feed("n0", [], now=175.0)
    assert t.snapshot()["n0"].rate == pytest.approx(1.0)
    t.feed("n0", [], now=190.0)
    p = t.snapshot()["n0"]
    assert p.rate == 0.0 and p.step == 120 and p.at == 160.0


def test_rate_early_uses_the_time_seen_so_far() -> None:
    t = ProgressTracker(PATTERN, window=30.0)
    t.feed("n0", ["step 10"], now=0.0)
    t.feed("n0", ["step 20"], now=5.0)
    assert t.snapshot()["n0"].rate == pytest.approx(2.0)


def test_a_late_line_from_another_local_rank_is_no_setback() -> None:
    t = ProgressTracker(PATTERN)
    t.feed("n0", ["[rank1]: step 101", "[rank0]: step 100"], now=0.0)
    t.feed("n0", ["[rank0]: step 101"], now=1.0)
    p = t.snapshot()["n0"]
    assert p.step == 101 and p.at == 0.0


def _run(
    t: ProgressTracker, steps: dict[str, float], rates: dict[str, float], start: int, end: int
) -> dict[int, list[str]]:
    """Each second from `start` to `end`: every node prints its step and advances it by
    its rate, then slow() is asked; returns what it found, by time."""
    found: dict[int, list[str]] = {}
    for now in range(start, end + 1):
        for node, rate in rates.items():
            t.feed(node, [f"step {int(steps[node])}"], now=float(now))
            steps[node] += rate
        hit = t.slow(float(now), fraction=0.5, after=10.0)
        if hit:
            found[now] = hit
    return found


def test_slow_after_the_delay_once_per_episode_rearmed_after_recovery() -> None:
    t = ProgressTracker(PATTERN, window=30.0)
    steps = {"a": 0.0, "b": 0.0, "c": 0.0}
    # c runs at a fifth of the others' speed: below half the median from t=1 on
    found = _run(t, steps, {"a": 10.0, "b": 10.0, "c": 2.0}, 0, 40)
    assert found == {11: ["c"]}  # after 10 s below the bar, and only once
    # c recovers; once its windowed rate is back over the bar it is re-armed
    found = _run(t, steps, {"a": 10.0, "b": 10.0, "c": 10.0}, 41, 80)
    assert found == {}
    found = _run(t, steps, {"a": 10.0, "b": 10.0, "c": 1.0}, 81, 140)
    assert list(found.values()) == [["c"]]
    (when,) = found
    assert 91 <= when <= 120


def test_slow_needs_two_nodes_with_a_rate_and_a_continuous_episode() -> None:
    t = ProgressTracker(PATTERN)
    for now in range(60):
        t.feed("a", [f"step {now}"], now=float(now))
        t.feed("b", [], now=float(now))  # never prints a step: no rate, not compared
        assert t.slow(float(now), fraction=0.5, after=5.0) == []


def test_describe_wording() -> None:
    ranks = {"g369": 0, "g375": 1, "g380": 2, "g381": 3}

    def prog(**steps: int | None) -> dict[str, NodeProgress]:
        """The last step of each node; g375 advanced last 60 s ago, the others a second
        ago (the clock is 100)."""
        return {
            n: NodeProgress(n, s, None, None if s is None else 40.0 if n == "g375" else 99.0)
            for n, s in steps.items()
        }

    assert describe(prog(g369=4815, g375=4812), ranks, 100.0) == (
        "rank 1 stopped at step 4812; rank 0 reached 4815"
    )
    assert describe(prog(g369=4815, g375=4812, g380=4813, g381=4815), ranks, 100.0) == (
        "rank 1 stopped at step 4812; ranks 0, 2-3 reached 4813–4815"
    )
    many = {
        f"n{i}": NodeProgress(f"n{i}", 100 + i % 5, None, 10.0 if i % 5 == 0 else 99.0)
        for i in range(64)
    }
    line = describe(many, {f"n{i}": i for i in range(64)}, 100.0)
    assert line == (
        "ranks 0, 5, 10, 15, 20, 25, 7 more stopped at step 100; "
        "ranks 1-4, 6-9, 11-14, 16-19, 21-24, 26-29, 27 more reached 101–104"
    )
    assert line.count(";") == 1  # the stopped, then everyone else in one part
    assert describe(prog(g369=7, g375=7), ranks, 100.0) == "ranks 0-1 at step 7"
    assert describe(prog(g369=7, g375=None), ranks) == "rank 0 at step 7; rank 1: no step seen"
    assert describe(prog(g375=3, other=9), ranks, 100.0) == (
        "rank 1 stopped at step 3; other reached 9"
    )
    assert describe(prog(g369=None), ranks) == ""
    assert describe({}, ranks) == ""


def test_a_rank_one_step_behind_and_advancing_is_not_stopped() -> None:
    """Issue 29: 32 healthy ranks, one poll behind rank 0, were "stopped at step 93".
    Stopped: behind, and no step for STOP_AFTER s (or STOP_STEPS of the job's steps)."""
    names = [f"n{i}" for i in range(32)]
    ranks = {n: i for i, n in enumerate(names)}
    t = ProgressTracker(PATTERN)
    for now in range(1, 120):  # every rank steps once a second; rank 0's line comes first
        for i, n in enumerate(names):
            t.feed(n, [f"step {now if i % 3 == 0 else now - 1}"], now=float(now))
    steps = t.snapshot(119.0)
    assert not any(stopped(p, 119, 119.0, t.pace()) for p in steps.values())
    assert describe(steps, ranks, 119.0, t.pace()) == "ranks 0-31 at steps 118–119"
    # `mntui status` and the agent describe a job as of the latest advance by default
    assert describe(steps, ranks) == "ranks 0-31 at steps 118–119"

    # rank 5 prints nothing more while the others go on: stopped once STOP_AFTER is over
    for now in range(120, 140):
        for n in names:
            t.feed(n, [] if n == "n5" else [f"step {now}"], now=float(now))
        lines = describe(t.snapshot(float(now)), ranks, float(now), t.pace())
        pace = t.pace()
        assert pace is not None and stop_after(pace) == STOP_AFTER  # 1 s a step: the floor
        if now - 119 < STOP_AFTER:
            assert "stopped" not in lines, (now, lines)
        else:
            assert lines == f"rank 5 stopped at step 118; ranks 0-4, 6-31 reached {now}"


def test_a_slow_job_is_not_stopped_between_two_of_its_steps() -> None:
    """At a minute a step, a rank a step behind for 30 s has not stopped; 5 minutes has."""
    t = ProgressTracker(PATTERN, window=600.0)
    for k in range(6):
        for n in ("a", "b"):
            t.feed(n, [f"step {k}"], now=60.0 * k + (2.0 if n == "b" else 0.0))
    t.feed("a", ["step 6"], now=360.0)
    pace = t.pace()
    assert pace is not None and stop_after(pace) == pytest.approx(300.0, rel=0.05)
    ranks = {"a": 0, "b": 1}
    assert describe(t.snapshot(390.0), ranks, 390.0, pace) == "ranks 0-1 at steps 5–6"
    assert describe(t.snapshot(700.0), ranks, 700.0, pace) == (
        "rank 1 stopped at step 5; rank 0 reached 6"
    )
