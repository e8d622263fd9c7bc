"""Naming the rank that hangs the job: stacks folded across ranks (consensus.py), Flight
Recorder dumps read without torch's reader (flightrec.py), and the conclusion a hang's
report leads with (verdict.py). Pure: stacks are built here, dumps are real ones
recorded from a 2-rank gloo run (tests/data/flight_recorder/README.md)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from mntui.sessions.poll import NodeState
from mntui.sessions.report.consensus import Role, Wait, consensus, fold_nodes, waits_in
from mntui.sessions.report.flightrec import MAX_DUMP, load, read
from mntui.sessions.report.frdump import Asked
from mntui.sessions.report.stacks import Frame, RankStack, parse_capture
from mntui.sessions.report.verdict import conclude

FR = Path(__file__).parents[1] / "data" / "flight_recorder"
LIB = "/v/lib/python3.11/site-packages/torch/distributed"
WRAP = Frame("wrapper", f"{LIB}/c10d_logger.py", 83)


def coll(name: str, line: int) -> tuple[Frame, ...]:
    return (Frame(name, f"{LIB}/distributed_c10d.py", 3245), WRAP,
            Frame("train_step", "/w/train.py", line), Frame("<module>", "/w/train.py", 90))  # fmt: skip


ALL_REDUCE = coll("all_reduce", 66)
DATA = (Frame("next_batch", "/w/data.py", 41), Frame("train_step", "/w/train.py", 60))


def ranks(spec: dict[int, tuple[str, str, tuple[Frame, ...]]]) -> list[RankStack]:
    return [RankStack(node, 100 + r, r, state, frames) for r, (node, state, frames) in spec.items()]


def dumps(kind: str) -> dict[tuple[str, str], bytes]:
    return {(f"n{r}", f"rank_{r}"): (FR / kind / f"rank_{r}").read_bytes() for r in (0, 1)}


def test_the_rank_outside_a_collective_is_named_first_and_the_rest_folded() -> None:
    node = {0: "g369", 1: "g375", **{r: f"g{374 + r}" for r in range(2, 8)}}
    spec = {r: (node[r], "S", DATA if r == 1 else ALL_REDUCE) for r in range(8)}
    c = consensus(ranks(spec))
    assert c.headline == (
        "rank 1 (g375) is not in a collective: in `next_batch` (data.py:41); "
        "ranks 0,2-7 (g[369,376-381]) wait in `all_reduce` (train.py:66)"
    )
    assert [(g.role, g.ranks) for g in c.culprits] == [(Role.OUTSIDE, (1,))]


def test_waits_in_names_the_collective_and_the_users_line_not_a_lookalike() -> None:
    wait = waits_in(ALL_REDUCE)
    assert wait is not None and (wait.collective, wait.site) == ("all_reduce", "train.py:66")
    assert waits_in(DATA) is None
    # The user's own function called `all_reduce` is not torch's.
    assert waits_in((Frame("all_reduce", "/w/mylib.py", 3), *DATA)) is None
    functional = (Frame("wait_tensor", f"{LIB}/_functional_collectives.py", 9), *DATA)
    assert (
        waits_in(functional) == waits_in(functional)
        and waits_in(functional).collective == "wait_tensor"
    )  # type: ignore[union-attr]


def test_under_ddp_the_backward_is_where_ranks_wait_for_a_peer() -> None:
    graph = "/v/lib/python3.11/site-packages/torch/autograd/graph.py"
    backward = (Frame("_engine_run_backward", graph, 829),
                Frame("backward", "/v/lib/python3.11/site-packages/torch/_tensor.py", 625),
                Frame("train_step", "/w/train.py", 72))  # fmt: skip
    wait = waits_in(backward)
    assert wait is not None and (wait.collective, wait.site) == ("backward", "train.py:72")
    spec = {r: (f"n{r}", "S", DATA if r == 2 else backward) for r in range(4)}
    c = consensus(ranks(spec))
    assert c.headline.startswith("rank 2 (n2) is not in a collective: in `next_batch`")
    assert c.headline.endswith("ranks 0-1,3 (n[0-1,3]) wait in `backward` (train.py:72)")
    ddp = "/v/lib/python3.11/site-packages/torch/nn/parallel/distributed.py"
    sync = (Frame("DistributedDataParallel._sync_buffers", ddp, 2410),
            Frame("DistributedDataParallel.forward", ddp, 1700), Frame("step", "/w/t.py", 9))  # fmt: skip
    assert waits_in(sync) == Wait("DDP _sync_buffers", Frame("step", "/w/t.py", 9))


def test_another_collective_is_a_mismatch_and_a_tie_goes_by_the_usual_line() -> None:
    four = ranks(
        {r: (f"n{r}", "S", coll("barrier", 70) if r == 3 else ALL_REDUCE) for r in range(4)}
    )
    c = consensus(four)
    assert c.headline.startswith(
        "rank 3 (n3) is in a different collective: `barrier` (train.py:70)"
    )
    two = ranks({0: ("n0", "S", ALL_REDUCE), 1: ("n1", "S", coll("barrier", 70))})
    assert consensus(two).headline.startswith("ranks wait in different collectives")
    settled = consensus(two, usual=frozenset({"train.py:66"}))
    assert [g.ranks for g in settled.culprits] == [(1,)], settled.headline


def test_a_stopped_rank_comes_first_even_inside_the_collective() -> None:
    c = consensus(ranks({0: ("n0", "S", ALL_REDUCE), 1: ("n1", "T", ALL_REDUCE)}))
    assert c.headline.startswith("rank 1 (n1) is stopped (state T), in `all_reduce` (train.py:66)")


def test_a_healthy_job_has_no_culprit_and_a_missing_node_is_named() -> None:
    healthy = consensus(ranks({0: ("n0", "S", DATA), 1: ("n1", "R", DATA)}))
    assert not healthy.culprits and healthy.headline.startswith("no rank waits in a collective")
    lost = consensus(ranks({0: ("n0", "S", ALL_REDUCE)}), {"n1": "unreachable"}, {"n1": [1]})
    assert lost.headline.startswith("rank 1 (n1): no stacks (unreachable)")
    assert consensus([]).headline == ""


def test_node_names_clustershell_cannot_parse_are_listed_as_they_are() -> None:
    assert fold_nodes(["a[b", "c"]) == "a[b,c"
    assert fold_nodes(["n1", "n2", "n3"]) == "n[1-3]"


def test_a_real_gloo_dump_names_the_rank_that_never_entered_the_collective() -> None:
    r = read(dumps("sleep"), world=2)
    assert r.culprits == (1,) and not r.malformed
    assert "collective #4 all_reduce (default_pg, 1×float32" in r.findings[0]
    assert (
        "rank 1 (n1) never entered it (last entered: #3); rank 0 (n0) waiting since"
        in r.findings[0]
    )


def test_a_real_gloo_mismatch_is_named_with_both_ops() -> None:
    r = read(dumps("barrier"), world=2)
    assert r.culprits == (1,), r.findings
    assert r.findings[0].startswith("collective #4 (default_pg) mismatch: rank 0 (n0) all_reduce")
    assert "rank 1 (n1) barrier no tensor" in r.findings[0]
    four = {**dumps("barrier"), ("n2", "rank_2"): dumps("barrier")[("n0", "rank_0")]}
    assert read(four, world=3).findings[1].startswith("collective #4 all_reduce (default_pg")


class Boom:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("this must never run",))


def test_a_dump_is_data_never_code_and_bad_ones_are_counted() -> None:
    assert load(pickle.dumps(Boom())) is None  # a global is refused, nothing is called
    assert load(b"\x80\x05garbage") is None and load(b"") is None
    assert load(pickle.dumps({"entries": []})) == {"entries": []}
    assert load(b"x" * (MAX_DUMP + 1)) is None
    files = {**dumps("sleep"), ("n1", "rank_2"): pickle.dumps(Boom()), ("n1", "notes"): b"x"}
    r = read(files, world=4)
    assert r.malformed == ("n1/notes", "n1/rank_2") and r.culprits == (1,)
    assert "no dump from ranks 2-3" in r.findings and "2 dump(s) unreadable" in r.findings[-1]


def test_the_conclusion_uses_both_and_an_unreachable_node_leads() -> None:
    two = ranks({0: ("n0", "S", ALL_REDUCE), 1: ("n1", "S", DATA)})
    c = conclude(("n0", NodeState.STALLED, "no output"), two, {}, {}, read(dumps("sleep"), 2))
    assert c is not None and c.culprits[0].ranks == (1,) and c.culprits[0].nodes == ("n1",)
    assert c.headline.endswith("the Flight Recorder agrees"), c.headline
    only_fr = conclude(None, [], {}, {}, read(dumps("sleep"), 2))
    assert only_fr is not None and only_fr.culprits[0].ranks == (1,)
    gone = conclude(("n1", NodeState.UNREACHABLE, "no answer for 5s"),
                    ranks({0: ("n0", "S", ALL_REDUCE)}), {"n1": "skipped"}, {"n1": [1]}, None)  # fmt: skip
    assert gone is not None and gone.headline.startswith("rank 1 (n1) became unreachable")
    assert gone.culprits[0].nodes == ("n1",)
    assert conclude(None, [], {}, {}, None) is None
    same = ranks({0: ("n0", "S", ALL_REDUCE), 1: ("n1", "S", ALL_REDUCE)})
    hung = conclude(("n0", NodeState.STALLED, "no output"), same, {}, {}, None)
    live = conclude(None, same, {}, {}, None)
    assert hung is not None and hung.headline.endswith(
        "no rank stands out (a peer outside the job, or the network?)"
    )
    assert live is not None and live.headline.endswith("no rank stands out") and not live.culprits


def test_a_capture_says_how_many_dumps_were_asked_for_and_written() -> None:
    out = "@N1RANK 10 0 T\n@N1NOSPY\n@N1ASKED 3 DUMPED 2\n@N1ASKED x\n"
    got = parse_capture("n0", out, "N1")
    assert got.asked == Asked(3, 2) and got.missing is not None and got.malformed == 1
    assert parse_capture("n0", "@N1RANK 10 0 S\n", "N1").asked is None


@pytest.mark.parametrize("how", ["sleep", "barrier"])
def test_the_fixtures_are_real_torch_dumps(how: str) -> None:
    d = load((FR / how / "rank_0").read_bytes())
    assert d is not None and {"version", "pg_config", "pg_status", "entries"} <= set(d)


def synthetic(
    rank_ops: list[tuple[int, str, str, list[int], bool]], status: dict[str, dict[str, int]]
) -> bytes:
    """A dump in torch 2.13's layout: (seq, op, dtype, shape, completed) per entry."""
    entries = [
        {"collective_seq_id": seq, "profiling_name": f"gloo:{op}", "input_dtypes": [dtype],
         "input_sizes": [shape], "retired": done, "state": "scheduled", "is_p2p": False,
         "process_group": ("0", "default_pg"), "time_created_ns": 1795504222984179551,
         "frames": [{"name": "main", "filename": "/w/train.py", "line": 66}]}
        for seq, op, dtype, shape, done in rank_ops
    ]  # fmt: skip
    return pickle.dumps(
        {"version": "2.10", "pg_config": {}, "pg_status": status, "entries": entries}
    )


def test_a_rank_that_entered_the_collective_with_another_size_is_named() -> None:
    waiting = {"0": {"last_enqueued_collective": 2, "last_started_collective": -1,
                     "last_completed_collective": 1}}  # fmt: skip
    good = synthetic(
        [(1, "all_reduce", "Float", [4], True), (2, "all_reduce", "Float", [4], False)], waiting
    )
    odd = synthetic(
        [(1, "all_reduce", "Float", [4], True), (2, "all_reduce", "Double", [8], False)], waiting
    )
    r = read({("a", "rank_0"): good, ("b", "rank_1"): odd, ("c", "rank_2"): good}, world=3)
    assert r.culprits == (1,), r.findings
    assert r.findings[0] == (
        "collective #2 (default_pg) mismatch: 2 ranks 0,2 (a,c) all_reduce 4×float32 (train.py:66); "
        "rank 1 (b) all_reduce 8×float64 (train.py:66)"
    )
