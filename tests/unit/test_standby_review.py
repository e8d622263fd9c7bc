"""The review of the stand-by by a lost main (issue 30, session 5): a worker with nothing
left to kill still gives its word (node/lostword.py), the stand-by's reason for waiting
is where `status` reads it (watch/standbyhint.py), the old attempt's stop matches its
own run's tags alone (procs.kill_tags), and "the main" of a run record is one
rule (runs.RunRecord.main) that its readers share."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from mntui.sessions.config import load_config
from mntui.sessions.launch import ChainView, run_config
from mntui.sessions.launch.board import board_dir
from mntui.sessions.launch.chains import guard_chain
from mntui.sessions.node.lostword import LOST, LOST_KILL, lost_why, say_lost
from mntui.sessions.procs import job_node_pattern, kill_tags
from mntui.sessions.recover.mainloss import Call, Look, judge_main
from mntui.sessions.recover.standby import Standby
from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus
from mntui.sessions.watch.fromcluster import watch_line
from mntui.sessions.watch.standbyhint import WORD, say_waiting, standby_hint, waiting_why

DATA = Path(__file__).resolve().parents[1] / "data" / "mainloss"
RUNNING = json.loads((DATA / "chain-running.json").read_text())
STARTED = RUNNING["attempts"][0]["started_at"]
FIRST, LATER = "20261126-090000-aaaa", "20261126-091500-bbbb"


def _record(run: str, order: tuple[str, ...] = ("node0", "node1"), **kw: Any) -> RunRecord:
    """Nodes listed in `order`, ranked by their name's digit (node0 is rank 0)."""
    nodes = [
        NodeRecord(n, f"h-{n}", int(n[-1]), "s", f"j/{run}/{n}", f".mntui/runs/j/{run}/{n}")
        for n in order
    ]
    rec = RunRecord("j", run, "c.yaml", "127.0.0.1", 29500, nodes, status=RunStatus.RUNNING, **kw)
    rec.create()
    return rec


# -- 1. a worker with nothing left to kill still says it lost the main ----------------


def test_a_worker_with_nothing_left_says_so_and_its_word_counts(tmp_path: Path) -> None:
    """Its ranks ended before the main went silent: no kill, no kill report, and a
    lost.json that says there was nothing left; the stand-by's rule takes it."""
    why = lost_why("127.0.0.1:1", 6.0, killed=False)
    say_lost(str(tmp_path), STARTED + 10, STARTED + 10, why, None)
    word = json.loads((tmp_path / LOST).read_text())
    assert word["nothing_left"] is True and "nothing of the job was left to kill" in word["why"]
    assert not (tmp_path / LOST_KILL).exists()
    look = Look("node0", ("node1",), STARTED, 5.0, 6.0, RUNNING, {"node1": word})
    v = judge_main(look)
    assert v.call is Call.LOST and "node1 lost it too" in v.why, v
    say_lost(str(tmp_path), STARTED + 10, STARTED + 11, lost_why("h:1", 6, True), {"found": []})
    assert "nothing_left" not in json.loads((tmp_path / LOST).read_text())
    assert json.loads((tmp_path / LOST_KILL).read_text())["kill"] == {"found": []}


def test_status_shows_what_the_stand_by_waits_for() -> None:
    """The stand-by's reason is in `status`, not only in its own log; the chain's first
    dir holds it, whichever record status shows; it goes when the stand-by has none."""
    first = _record(FIRST, chain=FIRST, watch_port=1)
    rec = _record(LATER, chain=FIRST, attempt=1, watch_port=1)
    with guard_chain(rec) as guard:
        assert guard is not None
        say_waiting(rec, "waiting for node1 to lose it")
        said = standby_hint(first)
        assert "does not act yet: waiting for node1 to lose it (since " in said, said
        assert (first.dir / WORD).is_file()
        assert "does not act yet: waiting for node1" in watch_line(rec, None), "status's line"
        say_waiting(rec, None)
        assert "if the main is lost, a spare takes its place" in standby_hint(rec)
    say_waiting(rec, "node1 cannot be reached from here")
    assert "nothing here stands by" in standby_hint(rec), "said only while it stands by"


def test_the_stand_bys_word_is_data(tmp_path: Path) -> None:
    rec = _record(FIRST, chain=FIRST)
    path = rec.dir / WORD
    for bad in (b"[1]", b"{", b'{"why": 3}', b'{"why": ""}', b"\xff" * 10):
        path.write_bytes(bad)
        assert waiting_why(rec) is None, bad
    path.write_text(json.dumps({"why": "waiting\x1b[2J for node1", "at": "x"}))
    assert waiting_why(rec) == "waiting for node1", "one line, no escapes; no time"


def test_the_stand_by_writes_its_reason_as_it_changes(tmp_path: Path) -> None:
    """The first look clears an earlier stand-by's reason; each new reason is written."""
    rec = _record(FIRST, chain=FIRST, watch_port=1)
    say_waiting(rec, "an earlier stand-by's reason")
    cfg = _cfg(tmp_path)
    said: list[str] = []
    sb = Standby(cfg, rec, lambda e: said.append(e.message))
    sb._waiting(rec, "the main answers")
    assert waiting_why(rec) is None, "a reason from before this stand-by stays no more"
    sb._waiting(rec, "the main node0 silent for 9 s; waiting for node1 to lose it")
    assert (waiting_why(rec) or "").startswith("waiting for node1 to lose it")
    assert said == ["the main is silent, not replaced yet: waiting for node1 to lose it"]


# -- 2. the old attempt's stop matches its own run only -------------------------------


def test_the_old_attempts_stop_never_matches_a_later_run() -> None:
    def takes(only: tuple[str, str] | None, tag: str) -> bool:
        return any(re.fullmatch(p, f"MNTUI_RUN={tag}") for p in kill_tags("j-1", "node1", only))

    first = (FIRST, FIRST)
    for tag in (f"j-1/{FIRST}/node1", f"j-1/{FIRST}/node1/sentinel", f"j-1/{FIRST}/node1/guard"):
        assert takes(first, tag), tag
    for tag in (f"j-1/{LATER}/node1", f"j-1/{LATER}/node1/sentinel", f"j-1/{FIRST}/node10",
                f"j-1/{FIRST}/node1/other", f"j-12/{FIRST}/node1"):  # fmt: skip
        assert not takes(first, tag), tag
    for tag in (f"j-1/{LATER}/node1", f"j-1/{LATER}/node1/sentinel"):  # what a job-wide kill hits
        assert takes(None, tag), tag
        assert re.fullmatch(job_node_pattern("j-1", "node1"), f"MNTUI_RUN={tag}"), tag
    # an attempt the cluster restarted: its ranks have its run, its watchers the chain's
    assert takes((LATER, FIRST), f"j-1/{LATER}/node1")
    assert takes((LATER, FIRST), f"j-1/{FIRST}/node1/coord")
    assert not takes((LATER, FIRST), f"j-1/{FIRST}/node1"), "the earlier attempt's ranks"


# -- 3. one rule for "the main" ---------------------------------------------------------


def _cfg(tmp_path: Path) -> Any:
    path = tmp_path / "c.yaml"
    path.write_text("job: j\nnodes: [node0, node1]\ncommand: echo hi\n")
    return load_config(str(path))


def test_the_readers_of_the_main_agree_when_rank_0_is_not_listed_first(tmp_path: Path) -> None:
    rec = _record(FIRST, ("node1", "node0"), chain=FIRST, watch_port=4242)
    assert rec.main.node == "node0" and rec.nodes[0].node == "node1"
    assert board_dir(rec) == f".mntui/runs/j/{FIRST}/node0"
    assert "coordinator on node0:4242" in watch_line(rec, None)
    cfg = _cfg(tmp_path)
    assert run_config(cfg, ChainView((rec,))).main == "node0"
    look = Standby(cfg, rec, lambda e: None)._look(rec, 0.0, [])
    assert look.main == "node0" and look.workers == ("node1",), look
    alone = replace(rec, nodes=[replace(rec.nodes[0], rank=3)])
    assert alone.main.node == "node1", "no rank 0: the first node, as before"
