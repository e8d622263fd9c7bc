"""The straggler rule on tallies, the sampler's parsing of a node's answer, GPU throttle
reasons from a recorded real nvidia-smi answer, the finding kept for `status`, and
`doctor --pairs`' two rounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from mntui.sessions.config import Action, ConfigError, WatchPolicy, load_config
from mntui.sessions.doctor.pairs import Pair, conclude, judge_pairs, node_rows, round_one
from mntui.sessions.poll import parse_clocks, throttled
from mntui.sessions.report import (
    Finding,
    RankWait,
    capture_script,
    load_finding,
    save_finding,
    slow_section,
)
from mntui.sessions.report.stacks import Frame, NodeStacks, RankStack
from mntui.sessions.watch import Tally, name_suspect
from mntui.sessions.watch.sampler import parse_round, round_script, samples_of
from mntui.sessions.watch.straggler import Sample, chance

SMI = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi"


def ranks(*shares: tuple[str, float], n: int = 10) -> list[RankWait]:
    return [RankWait(i, node, n, round(share * n)) for i, (node, share) in enumerate(shares)]


def test_the_rank_that_waits_least_while_the_others_wait_is_named() -> None:
    s = name_suspect(ranks(("g1", 0.6), ("g2", 0.6), ("g3", 0.0), ("g4", 0.7)), 12.0, 0.0)
    assert s is not None and (s.rank, s.node) == (2, "g3")
    assert s.line == "rank 2 (g3) waits 0 % of the time, the others 60–70 %: it holds the job"


def test_a_clean_job_names_nobody() -> None:
    assert name_suspect(ranks(("g1", 0.1), ("g2", 0.0), ("g3", 0.1)), 1, 0) is None
    # everyone waits alike (a slow network, a slow shared filesystem): nobody holds the job
    assert name_suspect(ranks(("g1", 0.5), ("g2", 0.6), ("g3", 0.5)), 1, 0) is None


def test_too_few_samples_or_two_low_nodes_name_nobody() -> None:
    assert name_suspect(ranks(("g1", 0.6), ("g2", 0.0), n=3), 1, 0) is None
    assert name_suspect(ranks(("g1", 0.6), ("g2", 0.0), ("g3", 0.0)), 1, 0) is None
    # the others barely wait more than the low one: no clear odd one
    assert name_suspect(ranks(("g1", 0.3), ("g2", 0.1)), 1, 0) is None


def test_a_difference_that_may_be_luck_names_nobody() -> None:
    # The bench's one false suspect (a clean 2-node run, 8 before this rule): rank 0 had
    # waited in 2 of its first samples, rank 1 in none. Shares alone said 22 % vs 0 %.
    fluke = [RankWait(0, "g1", 9, 2), RankWait(1, "g2", 9, 0)]
    assert chance(fluke[1:], fluke) > 0.2 and name_suspect(fluke, 1, 0) is None
    assert name_suspect([RankWait(0, "g1", 10, 4), RankWait(1, "g2", 10, 0)], 1, 0) is None
    # the same shares on more samples are no luck: a real 2x straggler, 2 nodes
    real = [RankWait(0, "g1", 30, 12), RankWait(1, "g2", 30, 0)]
    assert chance(real[1:], real) < 0.001
    s = name_suspect(real, 1, 0)
    assert s is not None and s.rank == 1


def test_a_rank_still_joining_the_job_is_no_sample() -> None:
    def stack(rank: int, *names: str) -> RankStack:
        frames = [
            Frame(n, "/v/site-packages/torch/distributed/distributed_c10d.py", 9) for n in names
        ]
        return RankStack("g1", 100 + rank, rank, "S", (*frames, Frame("main", "/w/t.py", 3)))

    got = NodeStacks("g1", (stack(0, "barrier", "init_process_group"), stack(1, "all_reduce"),
                            stack(2, "compute")))  # fmt: skip
    assert samples_of(got) == [Sample(1, "g1", True), Sample(2, "g1", False)]


def test_a_slow_node_of_several_ranks_is_named_by_its_lowest_rank() -> None:
    s = name_suspect(ranks(("g1", 0.6), ("g1", 0.6), ("g2", 0.1), ("g2", 0.0)), 1, 0)
    assert s is not None and (s.rank, s.node) == (3, "g2")


def test_the_tally_keeps_a_window() -> None:
    t = Tally(window=4)
    for waiting in (True, True, True, True, False, False):
        t.add([Sample(0, "g1", waiting)])
    assert t.ranks() == (RankWait(0, "g1", 4, 2),)


def test_throttle_reasons_from_a_recorded_answer() -> None:
    gpus, bad = parse_clocks((SMI / "h100-powercap.throttle.csv").read_text())
    assert bad == 0 and len(gpus) == 1
    (g,) = throttled(gpus)
    assert (g.sm_clock, g.max_clock, g.reasons) == (1590.0, 1980.0, ("power cap (SW)",))
    # the poll's own recording has no throttle column: nothing is throttled, nothing invented
    gpus, bad = parse_clocks((SMI / "h100x8.gpu.csv").read_text())
    assert len(gpus) == 8 and throttled(gpus) == () and bad == 0


def test_a_round_parses_stacks_and_gpus_and_counts_garbage() -> None:
    nonce = "ab12cd34"
    smi = "\n".join(
        line for line in (SMI / "h100-powercap.throttle.csv").read_text().splitlines()
        if not line.startswith("#")
    )  # fmt: skip
    out = (
        "Welcome (noise from .bashrc)\n"
        f"@{nonce}RANK 4242 1 S\n@{nonce}bogus\n"
        f"@{nonce}GPU\n{smi}\nclocks_throttle_reasons.active, index\nnot-a-mask, 0\n"
    )
    stacks, held, bad = parse_round("g9", out, nonce)
    assert stacks.malformed == 1 and [s.rank for s in stacks.stacks] == [1]
    assert samples_of(stacks) == []  # a rank py-spy gave no stack for is no sample
    assert [t.line for t in held] == [
        "a GPU of g9 is throttled at 1590/1980 MHz: power cap (SW) (700 W, 71 °C)"
    ]
    assert bad == 2  # a second header is no data, and a mask that is not hex


def test_the_finding_round_trips_and_makes_the_report_section(tmp_path: Path) -> None:
    rs = ranks(("g1", 0.6), ("g2", 0.0))
    s = name_suspect(rs, 8.0, 1.0)
    save_finding(tmp_path, Finding(s, (), tuple(rs), 12))
    found = load_finding(tmp_path)
    assert found is not None and found.suspect == s
    assert slow_section(tmp_path)[1] == (
        "  straggler: rank 1 (g2) waits 0 % of the time, the other 60 %: it holds the job"
    )
    (tmp_path / "straggler.json").write_text('{"suspect": 3}')
    assert load_finding(tmp_path) is None and slow_section(tmp_path) == []


# -- doctor --pairs: the two rounds' verdicts (pure) ----------------------------------


def pair(rnd: int, a: str, b: str, lat: float | None, bw: float | None = 1.0) -> Pair:
    return Pair(rnd, a, b, lat, bw, None if lat is not None else "smoke job did not start")


def test_round_one_pairs_neighbours_and_the_odd_one_joins_node_0() -> None:
    assert round_one(["a", "b", "c", "d"]) == [("a", "b"), ("c", "d")]
    assert round_one(["a", "b", "c"]) == [("a", "b"), ("c", "a")]


def test_the_node_slow_with_a_fast_partner_is_named() -> None:
    first = judge_pairs([pair(1, "g0", "g1", 250), pair(1, "g2", "g3", 2000, 0.17)])
    assert [p.slow for p in first] == [False, True]
    second = [pair(2, "g2", "g0", 4100, 0.17), pair(2, "g3", "g1", 270)]
    judged = judge_pairs(first + second)
    v = conclude(judged[:2], judged[2:], ["g0", "g1", "g2", "g3"])
    assert v.slow_nodes == ("g2",) and v.slow_links == ()
    assert v.line.startswith("g2 is slow: all-reduce 4100 us, 0.170 GB/s with g0")
    assert [r[3] for r in node_rows(v)] == ["ok", "ok", "SLOW", "ok"]


def test_a_pair_slow_only_together_is_a_slow_link() -> None:
    first = judge_pairs([pair(1, "g0", "g1", 250), pair(1, "g2", "g3", 300, 0.2)])
    second = [pair(2, "g2", "g0", 260), pair(2, "g3", "g1", 240)]
    judged = judge_pairs(first + second)
    v = conclude(judged[:2], judged[2:], ["g0", "g1", "g2", "g3"])
    assert v.slow_nodes == () and v.slow_links == (("g2", "g3"),)
    assert "the link g2–g3 is slow" in v.line


def test_latency_noise_alone_is_no_slow_pair_and_a_failed_pair_is() -> None:
    v = judge_pairs([pair(1, "g0", "g1", 720), pair(1, "g2", "g3", 273), pair(1, "g4", "g0", None)])
    assert [p.slow for p in v] == [False, False, True]
    clean = conclude(judge_pairs([pair(1, "g0", "g1", 720), pair(1, "g2", "g3", 273)]), [], [])
    assert clean.line.startswith("no slow node or link")


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("sample_every: -1", "watch.sample_every: expected a number >= 0 and <= 3600"),
        ("sample_every: fast", "watch.sample_every: expected a number"),
        ("on_slow: kill", "watch.on_slow: expected one of kill_all, notify, got 'kill'"),
    ],
)
def test_bad_sampling_keys_are_one_line_with_file_line_and_key(
    tmp_path: Path, line: str, says: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(f"job: j\nnodes: [a]\ncommand: x\nwatch: {{{line}}}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}:4 {says}" in str(err.value) and "\n" not in str(err.value)


def test_sampling_defaults() -> None:
    w = WatchPolicy()
    assert (w.sample_every, w.on_slow) == (0.25, Action.NOTIFY)  # py-spy 4 times a second


def test_a_node_throttled_inside_its_collectives_is_named_against_busy_waiters() -> None:
    # measured: node1 at half a CPU "waited" 15 of 30 samples, node0 all 30
    s = name_suspect(ranks(("g0", 1.0), ("g1", 0.5), n=30), 1, 0)
    assert s is not None and s.node == "g1"
    # issue 40: the gap is what the rank costs the job (1 - 1/f), whatever the share of
    # the collectives: a node at 1/1.5 of a CPU waited 17 % against its partner's 40 %,
    # and a rank that holds the others 30 % of the time in a job that all-reduces a lot
    for shares in ((0.4, 0.17), (0.9, 0.6)):
        s = name_suspect(ranks(("g0", shares[0]), ("g1", shares[1]), n=60), 1, 0)
        assert s is not None and s.node == "g1"
    # the others wait little more than it (1.2x at most): uneven work, no straggler
    assert name_suspect(ranks(("g0", 0.35), ("g1", 0.2), n=60), 1, 0) is None
    assert name_suspect(ranks(("g0", 0.2), ("g1", 0.05), n=60), 1, 0) is None


def test_a_sample_never_stops_a_rank() -> None:
    """py-spy's blocking dump ptrace-stops the rank: a pause in its step, and a `t` state
    that a poll reads as frozen. Every sample reads with --nonblocking."""
    script = round_script("MNTUI_RUN=x", 2.0, "ab12cd34")
    assert "*) nb=--nonblocking ;;" in script and "*) nb= ;;" not in script
    # the teardown's capture reads a running rank whole (it is about to die anyway)
    assert "*) nb= ;;" in capture_script("MNTUI_RUN=x", 2.0, "ab12cd34")


def test_a_straggler_that_comes_and_goes_is_told_once(tmp_path: Path) -> None:
    """The sampler's judging, fed samples by hand: named, let go, named again: one notice."""
    from types import SimpleNamespace

    from mntui.sessions.watch import Sampler

    told: list[int] = []
    record = SimpleNamespace(dir=tmp_path, nodes=[])
    cfg = SimpleNamespace(watch=WatchPolicy(sample_every=0))
    sampler = Sampler(cfg, record, None, lambda f, new: new and told.append(new.rank))  # type: ignore[arg-type]
    slow = [Sample(0, "g0", True), Sample(1, "g1", False)]
    clean = [Sample(0, "g0", False), Sample(1, "g1", False)]
    for samples in [slow] * 8 + [clean] * 30 + [slow] * 30:
        sampler.judge(samples, ())
    assert told == [1]
    found = load_finding(tmp_path)
    assert found is not None and found.suspect is not None and found.suspect.rank == 1


def test_a_round_ending_after_the_sampler_stopped_leaves_the_finding_acted_on(
    tmp_path: Path,
) -> None:
    """The watchdog stops the sampler before it acts (kill_all on slow) and tears down; a
    round still under way then must not replace the named suspect with a later tally
    that names nobody: the report reads the finding the watchdog acted on."""
    from types import SimpleNamespace

    from mntui.sessions.watch import Sampler

    record = SimpleNamespace(dir=tmp_path, nodes=[])
    cfg = SimpleNamespace(watch=WatchPolicy(sample_every=0))
    sampler = Sampler(cfg, record, None)  # type: ignore[arg-type]
    for waits in [True] * 7 + [False] * 3:  # rank 0 waits 7 of 10, rank 1 never: named
        named = sampler.judge([Sample(0, "g0", waits), Sample(1, "g1", False)], ())
    assert named.suspect is not None and named.suspect.rank == 1
    sampler.stop()
    late = sampler.judge([Sample(0, "g0", False), Sample(1, "g1", True)], ())
    assert late.suspect is None  # 7 of 11 against 1 of 11 could be luck (p = 0.012)
    found = load_finding(tmp_path)
    assert found is not None and found.suspect is not None and found.suspect.rank == 1
    assert found.rounds == 10
