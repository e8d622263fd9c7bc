"""The rule that says a run the cluster watches lost its main (recover/mainloss.py), on
inputs recorded from real runs (tests/data/mainloss: the coordinator's chain.json of
the integration test's run before its main was lost, node1's lost.json after, and the
chain.json of a main that broke twice in a row, with the `main_here` flag the coordinator
writes since that recording), and the next attempt's placement
from this machine (recover/mainswap.plan_next: the coordinator's rule, main included)."""

from __future__ import annotations

import base64
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from mntui.sessions.config import RestartPolicy
from mntui.sessions.launch.board import SWAP_NOTE, board_dir
from mntui.sessions.launch.chains import guard_chain
from mntui.sessions.node.restarts import AttemptEnd
from mntui.sessions.poll import NodeState
from mntui.sessions.recover.mainlook import MALFORMED, parse_lost
from mntui.sessions.recover.mainloss import Call, Look, judge_main
from mntui.sessions.recover.mainswap import Next, keep_clean, plan_next, quarantined
from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus
from mntui.sessions.watch.standbyhint import LOST_NOTE, standby_hint

DATA = Path(__file__).resolve().parents[1] / "data" / "mainloss"


def _json(name: str) -> dict[str, Any]:
    data = json.loads((DATA / name).read_text())
    assert isinstance(data, dict)
    return data


RUNNING = _json("chain-running.json")
LOST = _json("lost-node1.json")
GAVE_UP = _json("chain-main-gave-up.json")
STARTED = RUNNING["attempts"][0]["started_at"]
BASE = Look("node0", ("node1",), STARTED, 5.0, None, RUNNING, {})


def test_a_main_that_answers_is_watched_by_the_cluster() -> None:
    assert judge_main(BASE).call is Call.WATCH


def test_a_silent_main_alone_proves_nothing() -> None:
    """This machine cut off (a laptop): no worker answers either, so nothing is done."""
    v = judge_main(replace(BASE, silent=60.0))
    assert v.call is Call.WATCH and "no worker answers" in v.why, v


def test_a_silent_main_is_lost_once_every_reached_worker_lost_it() -> None:
    waiting = judge_main(replace(BASE, silent=6.0, lost={"node1": None}))
    assert waiting.call is Call.WATCH and "waiting for node1" in waiting.why, waiting
    lost = judge_main(replace(BASE, silent=6.0, lost={"node1": LOST}))
    assert lost.call is Call.LOST and "node1 lost it too" in lost.why, lost
    early = judge_main(replace(BASE, silent=4.0, lost={"node1": LOST}))
    assert early.call is Call.WATCH, "not before unreachable_after"


def test_a_lost_json_of_an_earlier_attempt_is_not_this_ones() -> None:
    later = replace(BASE, silent=9.0, started_at=LOST["lost_at"] + 1, lost={"node1": LOST})
    assert judge_main(later).call is Call.WATCH


def test_an_unreached_worker_is_waited_for() -> None:
    """It may still hear the main: one worker's word (maybe cut off itself) is not enough."""
    look = replace(BASE, workers=("node1", "node3"), silent=6.0, lost={"node1": LOST})
    v = judge_main(look)
    assert v.call is Call.WATCH and "node3 cannot be reached" in v.why, v
    both = judge_main(replace(look, lost={"node1": LOST, "node3": LOST}))
    assert both.call is Call.LOST, both


def test_the_coordinator_giving_the_main_up_is_this_machines_to_act_on() -> None:
    v = judge_main(replace(BASE, chain=GAVE_UP))
    assert v.call is Call.GIVEN_UP and "broke twice in a row" in v.why, v
    over = judge_main(replace(BASE, chain={**RUNNING, "status": "gave-up", "why": "max"}))
    assert over.call is Call.OVER


def test_the_words_of_a_chains_end_never_decide_a_main_swap() -> None:
    """Only the coordinator's flag does: a `why` carrying the same words is read."""
    words = {k: v for k, v in GAVE_UP.items() if k != "main_here"}
    assert judge_main(replace(BASE, chain=words)).call is Call.OVER


POLICY = RestartPolicy(max=2, backoff=1)
NPROCS = {"node0": 1, "node1": 1, "node2": 1}


def _lost(k: int = 0) -> AttemptEnd:
    return AttemptEnd(k, "r", NodeState.UNREACHABLE, "node0", (), 0.0, "node0 lost")


def test_a_lost_main_is_replaced_by_the_first_spare_that_fits() -> None:
    args = (["node0", "node1"], {"node0"}, set(), ["node2"], {"node2"}, NPROCS)
    nxt = plan_next(POLICY, [_lost()], *args)
    assert nxt.layout == ("node2", "node1") and nxt.left == 1, nxt
    assert nxt.said == ("node0 is lost: replaced by spare node2 (rank 0)",)


def test_no_spare_or_no_restart_left_ends_the_chain_in_one_line() -> None:
    none = plan_next(
        POLICY, [_lost()], ["node0", "node1"], {"node0"}, set(), ["node2"], set(), NPROCS
    )
    assert none.layout is None and "no spare can take rank 0" in none.why, none
    assert "node2: its sentinel is not connected" in none.why, none
    spent = plan_next(POLICY, [_lost(0), _lost(1), _lost(2)], ["node0", "node1"], {"node0"}, set(),
                      ["node2"], {"node2"}, NPROCS)  # fmt: skip
    assert spent.layout is None and spent.why.startswith("no restart:"), spent


def _record(run: str, **kw: Any) -> RunRecord:
    nodes = [
        NodeRecord(n, n, i, "s", "t", f".mntui/runs/j/{run}/{n}")
        for i, n in enumerate(("node2", "node1"))
    ]
    rec = RunRecord("j", run, "c.yaml", "127.0.0.1", 29500, nodes, status=RunStatus.RUNNING, **kw)
    rec.create()
    return rec


def test_status_says_what_to_do_when_the_main_is_silent() -> None:
    """Nothing attached: the command that would stand by; attached: that it does; the
    stand-by found no way on: why, and what is left to do."""
    rec = _record("20260101-000000-aaaa", chain="20260101-000000-aaaa", watch_port=1)
    assert "`mntui watch` restarts the job on a spare" in standby_hint(rec)
    with guard_chain(rec) as guard:
        assert guard is not None
        assert "this machine stands by" in standby_hint(rec)
    rec.note(LOST_NOTE, why="no restart: the main node0 is lost and no spare can take rank 0")
    rec.status = RunStatus.TORN_DOWN
    said = standby_hint(rec)
    assert "could not replace it: no restart: the main node0 is lost" in said, said


def test_a_main_put_in_from_here_has_its_own_coordinators_board() -> None:
    """The new main's coordinator writes in its own attempt's dir, not the chain's first;
    its later attempts (records the cluster's restarts make) keep that dir too."""
    rec = _record("20260101-000100-bbbb", chain="20260101-000000-aaaa", attempt=1)
    assert board_dir(rec) == ".mntui/runs/j/20260101-000000-aaaa/node2"
    rec.note(SWAP_NOTE, main="node2", run=rec.run_id)
    assert board_dir(rec) == ".mntui/runs/j/20260101-000100-bbbb/node2"


def test_the_chains_quarantines_are_taken_only_in_shape_and_in_time() -> None:
    """chain.json is node output: a list, a string or an ended quarantine keeps nothing
    out (and raises nothing); a quarantine in shape and in time does."""
    first = _record("20260101-000200-cccc", chain="20260101-000200-cccc", watch_port=1)
    now = time.time()
    for bad in ([{"node": "node1"}], "node1", {"node1": {"at": now - 100, "until": now - 10}}):
        assert quarantined(first, {"quarantined": bad}) == set(), bad
    held = {"node1": {"at": now, "until": now + 60, "why": "broke twice"}}
    assert quarantined(first, {"quarantined": held}) == {"node1"}


def test_a_lost_json_cut_or_garbled_is_malformed_not_none_there() -> None:
    """A worker that wrote lost.json said something: a cut one (a bounded read of a big
    file) is counted malformed and named, never taken as "nothing lost"."""
    whole = json.dumps(LOST)
    line = "LOST " + base64.b64encode(whole[: len(whole) // 2].encode()).decode()
    assert parse_lost(line) == (True, MALFORMED)
    assert parse_lost("LOST " + base64.b64encode(b"[1]").decode()) == (True, MALFORMED)
    assert parse_lost("NONE") == (True, None)
    assert parse_lost("LOST " + base64.b64encode(whole.encode()).decode()) == (True, LOST)
    v = judge_main(replace(BASE, silent=6.0, lost={"node1": None}, malformed=("node1",)))
    assert v.call is Call.WATCH and "lost.json of node1 is malformed" in v.why, v


def test_no_next_attempt_on_a_node_the_old_one_was_not_stopped_on() -> None:
    nxt = Next(("node2", "node1"), "restart 1 of 2", said=("node0 is lost",))
    assert keep_clean(nxt, ["node0"]) == nxt, "a node the next attempt leaves out"
    refused = keep_clean(nxt, ["node1"])
    assert refused.layout is None and "not stopped clean on node1" in refused.why, refused
