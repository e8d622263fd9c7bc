"""Restarts onto spares and around quarantines on the cluster (issue 30): where the
coordinator places the next attempt (node/rules/placing.py, the supervisor's rules), what the
launch renders for a spare to take any worker's rank (one script per attempt, bounded
at 128 nodes, whatever the number of attempts), how a sentinel puts the rank in, and the records the manager writes
from the chain (watch/sparesync.py). The run on real nodes is in
tests/integration/test_cluster_restart.py."""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.launch.plan import build_plan, describe, run_record
from mntui.sessions.node.chain.swaps import layout_of, next_layout, quarantine
from mntui.sessions.node.proc import attemptscript
from mntui.sessions.node.rules.placing import Failure, QuarantineRule, past_quarantine, place, span
from mntui.sessions.node.rules.restarts import AttemptEnd
from mntui.sessions.node.rules.states import NodeState
from mntui.sessions.node.wire.chaincopy import Replica
from mntui.sessions.node.wire.watchcfg import BadWatchFile, WatchConfig, parse
from mntui.sessions.watch.sparesync import attempt_nodes

NODES = ("g0", "g1", "g2")
NPROC = dict.fromkeys(("g0", "g1", "g2", "s0", "s1"), 1)


def ended(k: int, culprit: str | None) -> AttemptEnd:
    return AttemptEnd(k, f"r{k}", NodeState.FAILED, culprit, (1,), 0.0, "died")


def test_a_worker_that_broke_twice_in_a_row_takes_the_first_ready_spare() -> None:
    once = place(NODES, [ended(0, "g1")], set(), ("s0", "s1"), {"s0", "s1"}, NPROC)
    assert once.layout == NODES and once.stop is None and once.said == ()
    twice = [ended(0, "g1"), ended(1, "g1")]
    p = place(NODES, twice, set(), ("s0", "s1"), {"s0", "s1"}, NPROC)
    assert p.layout == ("g0", "s0", "g2") and p.said == ("g1 broke twice in a row: replaced by "
                                                         "spare s0 (rank 1)",)  # fmt: skip
    # a spare whose sentinel is not connected, or of another size, is passed over
    p = place(NODES, twice, set(), ("s0", "s1"), {"s1"}, NPROC)
    assert p.layout == ("g0", "s1", "g2")
    p = place(NODES, twice, set(), ("s0",), {"s0"}, {**NPROC, "s0": 8})
    assert p.layout == NODES and p.stop is None
    assert p.said == ("g1 broke twice in a row, but no spare can take rank 1 (s0: runs 8 "
                      "process(es), not 1): it keeps rank 1",)  # fmt: skip
    # no spares in the config: no swap at all, as the supervisor
    assert place(NODES, twice, set(), (), set(), NPROC).said == ()


def test_the_main_is_never_replaced_by_the_coordinator_it_runs() -> None:
    twice = [ended(0, "g0"), ended(1, "g0")]
    p = place(NODES, twice, set(), ("s0",), {"s0"}, NPROC)
    assert p.layout == NODES and p.stop is not None
    assert p.stop == ("the main g0 broke twice in a row: only this machine can replace it "
                      "(`mntui quarantine g0`, then `mntui launch --restart` puts a spare in "
                      "its place; the coordinator runs on it)")  # fmt: skip
    q = place(NODES, [ended(0, "g0")], {"g0"}, ("s0",), {"s0"}, NPROC)
    assert q.stop is not None and q.stop.startswith("the main g0 is quarantined")
    assert p.main_here and q.main_here  # the stand-by's flag, not the words


def test_a_quarantined_node_is_used_no_more_or_the_chain_stops() -> None:
    p = place(NODES, [ended(0, "g2")], {"g2"}, ("s0", "s1"), {"s0", "s1"}, NPROC)
    assert p.layout == ("g0", "g1", "s0") and "g2 is quarantined" in p.said[0]
    # a spare swapped in before is in use; a quarantined spare is never swapped in
    p = place(("g0", "s0", "g2"), [ended(1, "s0")], {"s0"}, ("s0", "s1"), {"s0", "s1"}, NPROC)
    assert p.layout == ("g0", "s1", "g2")
    p = place(("g0", "s0", "g2"), [ended(1, "s0")], {"s0", "s1"}, ("s0", "s1"), {"s1"}, NPROC)
    assert p.stop == ("s0 is quarantined and no spare can take rank 1 (s0: in use; "
                      "s1: quarantined)")  # fmt: skip
    assert not p.main_here  # a worker's stop: nothing for this machine's stand-by


def test_quarantine_after_counts_the_chains_failures_within_its_window() -> None:
    rule = QuarantineRule(2, 3600.0, 86400.0)
    now = 10_000.0
    old, new = Failure("g1", now - 4000), Failure("g1", now - 10)
    assert past_quarantine([old, new], rule, now) == {}
    assert past_quarantine([new, new, Failure("g2", now)], rule, now) == {"g1": 2}
    assert past_quarantine([new, new], None, now) == {}
    assert (span(86400), span(5400), span(90), span(1.5)) == ("1d", "90m", "90s", "1.5s")


def _watch(tmp: Path, extra: str = "", node: str = "g1") -> tuple[WatchConfig, dict[str, object]]:
    """The watch file the launch writes on `node` (a node of the run, or a spare)."""
    cfg = parse_config(
        "job: j\nnodes: [g0, g1, g2]\nspares: [s0, s1]\ncommand: >-\n  python3 train.py "
        "--node_rank={node_rank} --nnodes={nnodes}\nwatch: {where: cluster}\n"
        "launch: {ready: port}\nrestart: {max: 3, quarantine_after: {count: 2, within: 1h}}\n"
        + extra
    )
    plan = build_plan(cfg, "20261126-010203-abcd", "10.0.0.1")
    start = next(p.start_script for p in (*plan.nodes, *plan.spares) if p.node == node)
    text = re.search(r"cat >\"\$d/watch.json\" <<'(\S+)'\n(.*?)\n\1", start, re.S)
    assert text is not None
    return parse(json.loads(text.group(2))), {"plan": plan, "start": start}


def test_every_watch_file_names_the_spares_and_a_spare_has_a_rank_to_take(
    tmp_path: Path,
) -> None:
    wc, _ = _watch(tmp_path)
    assert wc.spares == ("s0", "s1") and wc.spare_nprocs == (1, 1) and wc.rank_token is None
    assert wc.quarantine == QuarantineRule(2, 3600.0, 86400.0)
    assert wc.members == ("g0", "g1", "g2", "s0", "s1") and wc.nproc("s1") == 1
    spare, _ = _watch(tmp_path, node="s0")
    assert spare.node == "s0" and not spare.is_main and spare.rank_token is not None
    assert spare.tag == "j/20261126-010203-abcd/s0" and spare.attempt_nonce is not None
    raw = json.loads(json.dumps({**json.loads(_to_json(spare)), "rank_token": "$(reboot)"}))
    with pytest.raises(BadWatchFile):
        parse(raw)
    with pytest.raises(BadWatchFile):  # a spare's file without its token
        parse({**json.loads(_to_json(spare)), "rank_token": None})


def _to_json(wc: WatchConfig) -> str:
    from mntui.sessions.node.wire.watchcfg import to_json

    return to_json(wc)


NEXT = "20261126-020304-beef"  # a restart's run id, as the coordinator names it


def test_a_spare_gets_one_template_and_the_sentinel_puts_the_run_count_and_rank_in(
    tmp_path: Path,
) -> None:
    """One template, whatever the number of attempts; the run id, the restart count and
    the rank are tokens only a run id's shape and digits replace: attempt 2 runs with
    NODE_RANK and the command's `{node_rank}` of the rank the coordinator gave, in a
    run dir and with a tag of the run id it named."""
    spare, got = _watch(tmp_path, node="s0")
    plan, start = got["plan"], str(got["start"])
    assert [s.node for s in plan.spares] == ["s0", "s1"]  # type: ignore[attr-defined]
    assert "tmux" not in start.split("watch.json", maxsplit=1)[0]  # no job of its own at launch
    token, nonce = spare.rank_token, spare.attempt_nonce
    assert token is not None and nonce is not None
    assert start.count(f"export NODE_RANK={token}") == 1
    subprocess.run(["sh", "-c", f"d={tmp_path}\n" + _files_only(start)], check=True)
    path = attemptscript.render(str(tmp_path), 2, NEXT, spare, 1)
    text = Path(path).read_text()
    assert path == f"{tmp_path}/attempts/2.sh" and "@@MNTUI_" not in text
    assert "export NODE_RANK=1\n" in text and "--node_rank=1 " in text
    assert "export MNTUI_RESTART_COUNT=2\n" in text and f"MNTUI_RUN=j/{NEXT}/s0" in text
    info = json.loads((tmp_path / "attempts" / "2.json").read_text())
    assert info == {"run": NEXT, "tag": f"j/{NEXT}/s0", "run_dir": f".mntui/runs/j/{NEXT}/s0"}
    for bad in (0, 3, "1", "1; reboot", None, True, 1.0):
        with pytest.raises(RuntimeError):
            attemptscript.render(str(tmp_path), 2, NEXT, spare, bad)
    for run in (spare.run, "$(reboot)", "20261126-020304-BEEF", None, 7):
        with pytest.raises(RuntimeError):
            attemptscript.render(str(tmp_path), 2, run, spare, 1)
    node, got = _watch(tmp_path, node="g1")  # a node of the run takes its own rank only
    mine = tmp_path / "g1"
    mine.mkdir()
    subprocess.run(["sh", "-c", f"d={mine}\n" + _files_only(str(got["start"]))], check=True)
    for rank in (None, 1):
        text = Path(attemptscript.render(str(mine), 11, NEXT, node, rank)).read_text()
        assert "export NODE_RANK=1\n" in text and "MNTUI_RESTART_COUNT=11\n" in text
    with pytest.raises(RuntimeError):
        attemptscript.render(str(mine), 1, NEXT, node, 2)
    with pytest.raises(RuntimeError):  # no restart rendered: nothing to start
        attemptscript.render(str(mine), 1, NEXT, replace(node, attempt_nonce=None), None)


def _files_only(start: str) -> str:
    """The start script's heredocs that write the watch files and the template, nothing
    it would start (no interpreter asked, no bundle shipped, no sentinel)."""
    lines = start.split("\n", 3)
    assert lines[0] == "set -e" and lines[1].startswith("d=") and lines[2].startswith("mkdir")
    return lines[3].split("mntui_pyok() {", maxsplit=1)[0]


def test_every_nodes_start_stays_the_same_size_however_many_restarts() -> None:
    """128 nodes: a spare's start is a node's size (one template, not one per rank), and
    neither grows with restart.max (one template, not one per attempt)."""
    names = ", ".join(f"g{i}" for i in range(128))
    sizes = []
    for most in (10, 1000):
        cfg = parse_config(
            f"job: j\nnodes: [{names}]\nspares: [s0, s1]\ncommand: python3 train.py "
            f"--node_rank={{node_rank}}\nwatch: {{where: cluster}}\nrestart: {{max: {most}}}\n"
        )
        t0 = time.monotonic()
        plan = build_plan(cfg, "20261126-010203-abcd", "10.0.0.1")
        took = time.monotonic() - t0
        worker = max(len(n.start_script) for n in plan.nodes)
        spare = max(len(s.start_script) for s in plan.spares)
        print(f"128 nodes, restart.max {most}: a spare's start {spare} B, a worker's "
              f"{worker} B, planned in {took:.2f}s")  # fmt: skip
        assert spare < 1.1 * worker  # the bundle dominates
        sizes.append((worker, spare))
    assert abs(sizes[0][0] - sizes[1][0]) < 8 and abs(sizes[0][1] - sizes[1][1]) < 8


def test_the_dry_run_names_the_spares() -> None:
    cfg = parse_config(
        "job: j\nnodes: [g0, g1]\nspares: [s0]\ncommand: x\nwatch: {where: cluster}\n"
        "launch: {ready: port}\nrestart: {max: 2}\n"
    )
    said = describe(build_plan(cfg, "20261126-010203-abcd", "10.0.0.1"))
    assert "== s0 (host s0, spare) an idle sentinel" in said and "(one template" in said


def test_no_spare_is_prepared_without_cluster_restarts() -> None:
    base = "job: j\nnodes: [g0, g1]\nspares: [s0]\ncommand: x\nlaunch: {ready: port}\n"
    assert build_plan(parse_config(base + "watch: {where: cluster}\n"), "r", "a").spares == ()
    here = base + "watch: {where: here}\nrestart: {max: 2}\n"
    assert build_plan(parse_config(here), "r", "a").spares == ()


def test_the_chain_keeps_each_attempts_nodes_and_its_quarantines(tmp_path: Path) -> None:
    wc, _ = _watch(tmp_path, node="g0")
    assert layout_of({"nodes": ["g0", "s0", "g2"]}, wc) == ("g0", "s0", "g2")
    # a spare at rank 0 succeeded a lost main (node/chain/succession.py): a layout of the run too
    assert layout_of({"nodes": ["s0", "g1", "g2"]}, wc) == ("s0", "g1", "g2")
    for bad in (["g0", "g1"], ["g0", "g1", "g1"], ["g0", "x", "g2"], "g0"):
        assert layout_of({"nodes": bad}, wc) is None
    entries = [{"nodes": ["g0", "g1", "g2"], "next_nodes": ["g0", "s1", "g2"]}]
    assert next_layout(entries, wc) == ("g0", "s1", "g2")
    assert next_layout([{"nodes": ["g0", "s0", "g2"]}], wc) == ("g0", "s0", "g2")
    assert next_layout([], wc) == wc.nodes
    now = time.time()
    data: dict[str, object] = {"attempts": [
        {"end": ended(0, "g1").plain(), "ended_at": now - 5},
        {"end": ended(1, "g1").plain(), "ended_at": now - 1},
        {"end": ended(2, "evil").plain(), "ended_at": now},
    ]}  # fmt: skip
    said = quarantine(data, wc, now)
    assert said == [
        ("g1", "g1 quarantined: caused 2 failures within 1h (restart.quarantine_after)")
    ]
    held = data["quarantined"]
    assert isinstance(held, dict) and set(held) == {"g1"} and held["g1"]["until"] == now + 86400
    assert quarantine(data, wc, now) == []  # once


def test_an_attempts_record_names_the_spare_it_ran_on() -> None:
    cfg = parse_config(
        "job: j\nnodes: [g0, g1]\nspares: [{name: s0, host: 10.9.9.9}]\ncommand: x\n"
        "watch: {where: cluster}\nlaunch: {ready: port}\nrestart: {max: 2}\n"
    )
    first = run_record(build_plan(cfg, "20261126-010203-abcd", "10.0.0.1"), "job.yaml")
    nodes = attempt_nodes(first, ["g0", "s0"])
    assert [(n.node, n.rank, n.host) for n in nodes] == [("g0", 0, "g0"), ("s0", 1, "10.9.9.9")]
    assert nodes[1].tag == "j/20261126-010203-abcd/s0" and nodes[1].session == "j-s0"
    assert nodes[1].run_dir.endswith("/j/20261126-010203-abcd/s0")
    for bad in (None, ["g0"], ["g0", "x"], ["g0", "g0"], ["g0", 1]):
        assert attempt_nodes(first, bad) == first.nodes


def test_the_chains_quarantine_reaches_this_machines_history_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the next contact a node the coordinator quarantined is quarantined here too,
    until the chain said; a release by the user is not undone at the contact after."""
    from mntui.sessions.history import active_quarantines, release_node
    from mntui.sessions.watch.sparesync import sync_quarantines

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    cfg = parse_config(
        "job: j\nnodes: [g0, g1]\nspares: [s0]\ncommand: x\nwatch: {where: cluster}\n"
        "launch: {ready: port}\nrestart: {max: 2}\n"
    )
    first = run_record(build_plan(cfg, "20261126-010203-abcd", "10.0.0.1"), "job.yaml")
    first.create()
    now = time.time()
    chain = {"quarantined": {
        "g1": {"at": now - 10, "until": now + 3600, "why": "caused 2 failures within 1h"},
        "x/../../etc": {"at": now, "until": now + 3600, "why": "not a node of this run"},
        "s0": {"at": now - 7200, "until": now - 3600, "why": "over already"},
    }}  # fmt: skip
    assert sync_quarantines(first, chain) == ["g1"]
    q = active_quarantines()
    assert set(q) == {"g1"} and q["g1"].why == "caused 2 failures within 1h"
    assert q["g1"].who == "policy, coordinator on g0" and abs(q["g1"].until - now - 3600) < 1
    release_node("g1")
    assert sync_quarantines(first, chain) == [] and active_quarantines() == {}


class _Successor:
    """A coordinator started again mid-chain (chain.Coordinator), on a real board in a
    temp dir with no sentinel connected."""

    def __init__(self, out: Path) -> None:
        import threading

        from mntui.sessions.node.board.coordstate import Board
        from mntui.sessions.node.notice.notifysend import Outbox
        from mntui.sessions.node.rules.judging import Rules
        from mntui.sessions.node.rules.restarts import RestartRules

        rules = Rules(2.0, 3.0, "kill_all", "kill_all", 60.0)
        again = RestartRules(2, 0.1, 1.0, frozenset({"failed"}), None, frozenset(), 0.0)
        self.cfg = WatchConfig(
            "job", RUN, "g0", f"job/{RUN}/g0", "s", "127.0.0.1", 1, rules, ("g0", "g1"),
            0.5, 1.0, 0.5, (), 60.0, restart=again, attempt_nonce="0123456789abcdef",
            spares=("s0",),
        )  # fmt: skip
        self.board = Board(self.cfg, str(out))
        self.done = threading.Event()
        self.notices = Outbox(None, "job", 2, self.board)
        self.replica = Replica(self.board.live_peers, self.done)  # never run: no sends

    def watch_attempt(self) -> object:
        raise AssertionError("nothing is watched: the start fails first")

    def kill_requested(self) -> None:
        return None


RUN = "20261126-101500-ab12"


def test_a_coordinator_started_again_starts_the_attempt_where_it_was_placed(
    tmp_path: Path,
) -> None:
    from mntui.sessions.node.chain.chain import run_chain
    from mntui.sessions.node.wire.watchcfg import write_json

    out = tmp_path / "coord"
    out.mkdir()
    first = {"attempt": 0, "run": RUN, "started_at": 100.0, "nodes": ["g0", "g1"],
             "end": ended(0, "g1").plain(), "ended_at": 150.0, "restart": "restart 1/2",
             "delay": 0.1, "next_nodes": ["g0", "s0"]}  # fmt: skip
    half = {"attempt": 1, "run": "20261126-101500-cd34", "started_at": 160.0}
    write_json(str(out / "chain.json"), {"chain": RUN, "status": "starting",
                                         "attempts": [first, half]})  # fmt: skip
    c = _Successor(out)
    why = run_chain(c)  # type: ignore[arg-type]
    saved = json.loads((out / "chain.json").read_text())
    assert saved["attempts"][-1]["nodes"] == ["g0", "s0"] and c.board.layout == ("g0", "s0")
    assert saved["status"] == "failed-restart" and "no sentinel connected on g0" in why
