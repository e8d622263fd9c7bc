"""The rule a spare acts on to succeed a lost main (node/chain/succession.py), on inputs
recorded from a real run (tests/data/succession: node1's copy of the chain before its
main node0 was lost, node1's lost.json after, and the chain.json node2 wrote when it led
epoch 1), and the fences around it: which coordinator a sentinel follows
(node/wire/epochs.py), which sentinel a coordinator keeps (node/coord/successor.py), and where
this machine finds the board once the main moved (launch/mainmoved.py)."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from mntui.sessions.launch.board import BoardView
from mntui.sessions.launch.mainmoved import may_have_moved, parse_pointer
from mntui.sessions.node.chain import succession
from mntui.sessions.node.chain.succession import Call, Look, Word, candidate, judge, next_chain
from mntui.sessions.node.coord.successor import Heir, admit
from mntui.sessions.node.rules.judging import Rules
from mntui.sessions.node.rules.restarts import RestartRules
from mntui.sessions.node.wire import epochs
from mntui.sessions.node.wire.epochs import Epoch, may_follow
from mntui.sessions.node.wire.watchcfg import WatchConfig, joined

DATA = Path(__file__).resolve().parents[1] / "data" / "succession"


def _json(name: str) -> dict[str, Any]:
    data = json.loads((DATA / name).read_text())
    assert isinstance(data, dict)
    return data


COPY = _json("chain-copy-node1.json")  # node1's, before the loss
LOST = _json("lost-node1.json")  # node1's word, after it
LED = _json("chain-epoch1-node2.json")  # what node2 wrote leading epoch 1
RUN = COPY["chain"]
WORD = Word(LOST["run"], LOST["lost_at"], LOST["epoch"])


def config(node: str = "node2", **more: Any) -> WatchConfig:
    """node2's watch file in the recorded run: 2 nodes + the spare node2, restart max 2."""
    rules = Rules(2.0, 5.0, "kill_all", "notify", 300.0)
    again = RestartRules(2, 1.0, 300.0, frozenset({"failed", "unreachable"}), None,
                         frozenset({2}), 1800.0)  # fmt: skip
    cfg = WatchConfig(
        "cw-successor", RUN, node, f"cw-successor/{RUN}/{node}", "s", "127.0.0.1", 29828, rules,
        ("node0", "node1"), 0.5, 1.0, 2.0, (), 60.0, restart=again,
        attempt_nonce="0123456789abcdef", spares=("node2",), spare_addrs=("127.0.0.1",),
        rank_token="@@MNTUI_RANK_0123456789abcdef@@" if node == "node2" else None,
    )  # fmt: skip
    return replace(cfg, **more)


CFG = config()
BASE = Look("node2", 0, COPY, {"node1": WORD}, LOST["lost_at"] + 0.3)


def test_the_spare_that_fits_first_is_the_successor() -> None:
    assert candidate(COPY, CFG) == "node2"
    three = replace(CFG, spares=("node3", "node2"), spare_addrs=("10.0.0.3", "10.0.0.2"))
    assert candidate(COPY, three) == "node3", "the config's order"
    assert candidate({**COPY, "quarantined": {"node3": {}}}, three) == "node2"
    assert candidate({**COPY, "lost": ["node3"]}, three) == "node2", "a main lost before"
    wide = replace(three, spare_nprocs=(8, 1), nprocs=(1, 1))
    assert candidate(COPY, wide) == "node2", "node3 runs 8 processes, the main 1"
    assert candidate(COPY, replace(CFG, spare_addrs=())) is None, "no address: no successor"


def test_the_recorded_loss_elects_node2() -> None:
    v = judge(BASE, CFG)
    assert v.call is Call.ELECTED and v.main == "node0", v
    assert "node1 lost it too" in v.why, v


def test_a_worker_that_has_not_said_it_is_waited_for() -> None:
    """It may still hear the main: a partition that cut the spare off, or some workers,
    never starts a second chain."""
    v = judge(replace(BASE, words={}), CFG)
    assert v.call is Call.WAIT and "waiting for node1" in v.why, v
    three = {**COPY, "attempts": [{**COPY["attempts"][0], "nodes": ["node0", "node1", "node3"]}]}
    cfg = replace(CFG, nodes=("node0", "node1", "node3"))
    v = judge(replace(BASE, chain=three), cfg)
    assert v.call is Call.WAIT and "waiting for node3" in v.why, v


def test_a_spare_that_still_hears_the_main_never_acts() -> None:
    v = judge(replace(BASE, lost_at=None), CFG)
    assert v.call is Call.WAIT and "still hears node0" in v.why, v


def test_a_word_of_another_attempt_or_epoch_is_not_of_this_loss() -> None:
    before = replace(WORD, run="20261129-000000-0000", at=COPY["attempts"][0]["started_at"] - 1)
    assert judge(replace(BASE, words={"node1": before}), CFG).call is Call.WAIT
    later = replace(WORD, run="20261129-000000-0000")  # lost after this attempt started
    assert judge(replace(BASE, words={"node1": later}), CFG).call is Call.ELECTED
    other = replace(WORD, epoch=1)
    assert judge(replace(BASE, words={"node1": other}), CFG).call is Call.WAIT


def test_a_malformed_word_is_named_not_taken() -> None:
    v = judge(replace(BASE, words={"node1": None}), CFG)
    assert v.call is Call.WAIT and "word of node1 is malformed" in v.why, v
    assert succession.word_of({"run": RUN, "at": True, "epoch": 0}) is None
    assert succession.word_of({"run": "x", "at": 1.0, "epoch": 0}) is None
    assert succession.word_of({"run": RUN, "at": 1.0, "epoch": -1}) is None
    assert succession.word_of({"run": RUN, "at": 1.0, "epoch": 0}) == Word(RUN, 1.0, 0)


def test_a_one_node_run_has_no_worker_to_confirm_the_loss() -> None:
    one = {**COPY, "attempts": [{**COPY["attempts"][0], "nodes": ["node0"]}]}
    v = judge(replace(BASE, chain=one, words={}), replace(CFG, nodes=("node0",)))
    assert v.call is Call.WAIT and "one-node run" in v.why, v


def test_nothing_is_taken_over_from_a_chain_that_ended_or_names_another() -> None:
    assert judge(replace(BASE, chain=None), CFG).call is Call.WAIT
    over = judge(replace(BASE, chain={**COPY, "status": "gave-up", "why": "max"}), CFG)
    assert over.call is Call.OVER and "max" in over.why, over
    later = judge(replace(BASE, chain={**COPY, "epoch": 1}), CFG)
    assert later.call is Call.OVER, later
    other = judge(replace(BASE, me="node3"), CFG)
    assert other.call is Call.OVER and "names node2" in other.why, other


def test_the_next_epochs_chain_is_the_recorded_one() -> None:
    data, goes_on = next_chain(BASE, CFG, {"node1"}, LED["successions"][0]["at"])
    assert goes_on
    lost, mine = data["attempts"][0], LED["attempts"][0]
    for key in ("end", "kind", "next_nodes", "restart", "delay", "swapped", "seen", "ended_at"):
        if key == "end":
            assert {**lost["end"], "progressed_for": 0} == {**mine["end"], "progressed_for": 0}
        else:
            assert lost[key] == mine[key], key
    assert (data["epoch"], data["main"], data["lost"], data["status"]) == (1, "node2", ["node0"],
                                                                          "backoff")  # fmt: skip
    assert data["rev"] == COPY["rev"] + 1 and data["successions"][0]["to"] == "node2"
    assert COPY["attempts"][0].get("end") is None, "the copy itself is left as it was"


def test_the_lost_attempts_progress_comes_from_the_workers_steps() -> None:
    started = COPY["attempts"][0]["started_at"]
    look = replace(BASE, words={"node1": replace(WORD, stepped_at=started + 42.0)})
    data, _ = next_chain(look, CFG, {"node1"}, WORD.at + 1)
    assert data["attempts"][0]["end"]["progressed_for"] == pytest.approx(42.0)


def test_no_restart_left_ends_the_chain_at_the_successor() -> None:
    spent = replace(CFG, restart=replace(CFG.restart, max=0)) if CFG.restart else CFG
    data, goes_on = next_chain(BASE, spent, {"node1"}, WORD.at + 1)
    assert not goes_on and data["status"] == "ended", data
    assert "restart is off" in data["why"] and "the main node0 was lost" in data["why"], data


def test_a_main_lost_in_the_backoff_ends_no_attempt_twice() -> None:
    """The old coordinator had ended attempt 1 and placed the next: the successor keeps
    that end (one failure, not two) and places the next attempt with itself at rank 0."""
    ended = {**LED["attempts"][0], "next_nodes": ["node0", "node1"], "swapped": []}
    copy = {**COPY, "status": "backoff", "attempts": [ended]}
    data, goes_on = next_chain(replace(BASE, chain=copy), CFG, {"node1"}, WORD.at + 1)
    assert goes_on and data["attempts"][0]["end"] == ended["end"]
    assert data["attempts"][0]["next_nodes"] == ["node2", "node1"], data
    assert data["attempts"][0]["restart"] == "restart 1/2", "the same count, not 2/2"


def test_the_newest_copy_is_taken() -> None:
    old, new = {**COPY, "rev": 1}, {**COPY, "rev": 3, "status": "backoff"}
    assert succession.newest([old, new], RUN) is new
    assert succession.newest([old, {**new, "chain": "other"}], RUN) is old
    assert succession.newest([], RUN) is None


# -- the fences ---------------------------------------------------------------------------


def test_a_sentinel_follows_no_lower_epoch_and_never_the_main_it_lost() -> None:
    assert may_follow(0, 0, lost=False) and may_follow(0, 1, lost=False)
    assert not may_follow(1, 0, lost=False), "a woken old main"
    assert not may_follow(0, 0, lost=True), "the coordinator it lost, back"
    assert may_follow(0, 1, lost=True), "the successor it gave its word to"


def test_an_epoch_is_read_strictly_and_joined_only_with_a_member(tmp_path: Path) -> None:
    ep = Epoch(1, "node2", "10.0.0.2", 5.0)
    epochs.write(str(tmp_path), ep)
    assert epochs.read(str(tmp_path)) == ep
    for bad in ({"epoch": True, "main": "node2", "host": "h"}, {"epoch": 1, "main": "node2",
                "host": "h; rm -rf ~"}, {"epoch": 1, "main": "", "host": "h"}, [1]):  # fmt: skip
        assert epochs.parse(bad) is None, bad
    cfg = joined(config("node1"), ep)
    assert (cfg.epoch, cfg.main, cfg.coord_host, cfg.is_main) == (1, "node2", "10.0.0.2", False)
    assert joined(config("node1"), Epoch(1, "nodeX", "h")).main == "node0", "not a member"


class _Coord:
    def __init__(self, epoch: int, heir: bool = False) -> None:
        self.cfg = replace(CFG, epoch=epoch, lead="node2" if epoch else None)
        self.heir = Heir(epoch, "node0", 1.0, "127.0.0.1") if heir else None


def test_a_coordinator_keeps_sentinels_of_its_epoch_and_the_words_for_it() -> None:
    old, new = _Coord(0), _Coord(1, heir=True)
    word = {"run": RUN, "at": 1.0, "epoch": 0}
    assert admit(old, "node1", {"epoch": 0}) is None  # type: ignore[arg-type]
    assert "follows epoch 1" in str(admit(old, "node1", {"epoch": 1}))  # type: ignore[arg-type]
    said = admit(old, "node1", {"epoch": 0, "lost": word})  # type: ignore[arg-type]
    assert said is not None and "lost this coordinator" in said, "its word went to node2"
    assert admit(new, "node1", {"epoch": 0, "lost": word}) is None  # type: ignore[arg-type]
    assert admit(new, "node1", {"epoch": 0}) is not None, "one that never lost node0"  # type: ignore[arg-type]
    assert admit(new, "node1", {"epoch": "1"}) is not None  # type: ignore[arg-type]


def test_this_machine_looks_for_a_successor_only_when_the_main_says_nothing() -> None:
    live = {"status": "running"}
    up = BoardView({"at": 100.0}, None, True, chain=live, now=101.0)
    assert not may_have_moved(up)
    assert may_have_moved(None) and may_have_moved(BoardView(None, None, False))
    assert may_have_moved(replace(up, alive=False)), "its coordinator gone"
    stood = {"status": "ended", "main_here": True}
    assert may_have_moved(replace(up, chain=stood)), "it stood down"
    assert not may_have_moved(replace(up, chain={"status": "gave-up"})), "a chain that ended"


def test_a_pointer_is_read_strictly() -> None:
    text = json.dumps({"epoch": 1, "main": "node2", "host": "10.0.0.2", "since": 3.0})
    line = "EPOCH " + base64.b64encode(text.encode()).decode() + "\n"
    assert parse_pointer(line) == Epoch(1, "node2", "10.0.0.2", 3.0)
    assert parse_pointer("NONE\n") is None
    assert parse_pointer(line + line) is None, "one line, exactly"
    assert parse_pointer("EPOCH " + base64.b64encode(b"[1]").decode()) is None
    assert parse_pointer("EPOCH !!") is None


def test_the_next_attempt_takes_the_epochs_master_and_the_successor_rank_0(
    tmp_path: Path,
) -> None:
    """A restart's template carries a master token: filled with the epoch's coordinator
    host, so the master follows a moved main; a spare takes rank 0 only as that main."""
    from mntui.sessions.node.proc import attemptscript

    nonce, token = "0123456789abcdef", "@@MNTUI_RANK_0123456789abcdef@@"
    run, master = attemptscript.run_token(nonce), attemptscript.master_token(nonce)
    count = attemptscript.count_token(nonce)
    (tmp_path / "attempts").mkdir()
    info = {"run": run, "tag": f"cw-successor/{run}/node2", "run_dir": f"r/{run}/node2"}
    (tmp_path / "attempts" / "next.json").write_text(json.dumps(info))
    script = f"export NODE_RANK={token} MASTER_ADDR={master} MNTUI_RESTART_COUNT={count} R={run}\n"
    (tmp_path / "attempts" / "next.sh").write_text(script)
    with pytest.raises(RuntimeError, match="no rank this spare may take"):
        attemptscript.render(str(tmp_path), 1, "20261129-000000-0001", CFG, 0)
    led = joined(CFG, Epoch(1, "node2", "10.0.0.2"))
    out = Path(attemptscript.render(str(tmp_path), 1, "20261129-000000-0001", led, 0))
    said = "export NODE_RANK=0 MASTER_ADDR=10.0.0.2 MNTUI_RESTART_COUNT=1 R=20261129-000000-0001\n"
    assert out.read_text() == said


def test_a_main_handed_over_is_succeeded_not_lost() -> None:
    """A main that broke twice in a row: its coordinator ended the chain handing it to
    node2 (chain.py); node2 leads once node1 gave its word, keeps attempt 2's end (no
    second one), places node2 at rank 0 for the main's fault, and counts no node lost."""
    failed = {"attempt": 0, "cause": "node0 failed: exit code 137", "culprit": "node0",
              "exit_codes": [137], "progressed_for": 3.0, "run_id": RUN, "state": "failed"}  # fmt: skip
    one = {**COPY["attempts"][0], "end": failed, "ended_at": WORD.at - 9}
    two = {**one, "attempt": 1, "run": "20261129-093330-aaaa", "started_at": WORD.at - 8,
           "end": {**failed, "attempt": 1, "run_id": "20261129-093330-aaaa"}}  # fmt: skip
    why = "the main node0 broke twice in a row: the chain is handed to the spare node2"
    handed = {**COPY, "attempts": [one, two], "status": "ended", "why": why,
              "main_here": True, "handover": True}  # fmt: skip
    look = replace(BASE, chain=handed)
    assert judge(look, CFG).call is Call.ELECTED
    assert judge(replace(look, chain={**handed, "handover": False}), CFG).call is Call.OVER
    data, goes_on = next_chain(look, CFG, {"node1"}, WORD.at + 1)
    assert goes_on and data["status"] == "backoff" and "lost" not in data, data
    assert "handover" not in data and "main_here" not in data and "why" not in data
    assert (
        data["attempts"][1]["end"] == two["end"] and data["attempts"][1]["restart"] == "restart 2/2"
    )
    assert data["attempts"][1]["swapped"] == [
        "node0 broke twice in a row: replaced by spare node2 (rank 0)"
    ]
