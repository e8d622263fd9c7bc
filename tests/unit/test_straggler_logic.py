"""The straggler rule on tallies (node/straggle.py, the coordinator's), the finding kept
for `status`, and `doctor --pairs`' two rounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from mntui.sessions.config import Action, ConfigError, WatchPolicy, load_config
from mntui.sessions.doctor.pairs import Pair, conclude, judge_pairs, node_rows, round_one
from mntui.sessions.node.straggle import Sample, Tally, chance, name_suspect
from mntui.sessions.report import Finding, RankWait, load_finding, save_finding, slow_section

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


def test_a_slow_node_of_several_ranks_is_named_by_its_lowest_rank() -> None:
    s = name_suspect(ranks(("g1", 0.6), ("g1", 0.6), ("g2", 0.1), ("g2", 0.0)), 1, 0)
    assert s is not None and (s.rank, s.node) == (3, "g2")


def test_the_tally_keeps_a_window() -> None:
    t = Tally(window=4)
    for waiting in (True, True, True, True, False, False):
        t.add([Sample(0, "g1", waiting)])
    assert t.ranks() == (RankWait(0, "g1", 4, 2),)


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
    assert (w.sample_every, w.on_slow) == (10.0, Action.NOTIFY)


def test_a_node_throttled_inside_its_collectives_is_named_against_busy_waiters() -> None:
    # measured: node1 at half a CPU "waited" 15 of 30 samples, node0 all 30
    s = name_suspect(ranks(("g0", 1.0), ("g1", 0.5), n=30), 1, 0)
    assert s is not None and s.node == "g1"
    assert name_suspect(ranks(("g0", 0.9), ("g1", 0.6), n=30), 1, 0) is None
    assert name_suspect(ranks(("g0", 0.5), ("g1", 0.25), n=30), 1, 0) is None  # not busy
