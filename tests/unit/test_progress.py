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
    NodeProgress,
    ProgressTracker,
    describe,
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
        return {n: NodeProgress(n, s, None, None) for n, s in steps.items()}

    assert describe(prog(g369=4815, g375=4812), ranks) == (
        "rank 1 stopped at step 4812; rank 0 reached 4815"
    )
    assert describe(prog(g369=4815, g375=4812, g380=4813, g381=4815), ranks) == (
        "rank 1 stopped at step 4812; rank 2 reached 4813; ranks 0, 3 reached 4815"
    )
    many = {f"n{i}": NodeProgress(f"n{i}", 100 + i % 5, None, None) for i in range(64)}
    line = describe(many, {f"n{i}": i for i in range(64)})
    assert line == (
        "ranks 0, 5, 10, 15, 20, 25, 7 more stopped at step 100; "
        "ranks 1-3, 6-8, 11-13, 16-18, 21-23, 26-28, 21 more reached 101–103; "
        "ranks 4, 9, 14, 19, 24, 29, 6 more reached 104"
    )
    assert line.count(";") == 2  # lowest, the middle in one part, highest
    assert describe(prog(g369=7, g375=7), ranks) == "ranks 0-1 at step 7"
    assert describe(prog(g369=7, g375=None), ranks) == "rank 0 at step 7; rank 1: no step seen"
    assert describe(prog(g369=3, other=9), ranks) == "rank 0 stopped at step 3; other reached 9"
    assert describe(prog(g369=None), ranks) == ""
    assert describe({}, ranks) == ""
