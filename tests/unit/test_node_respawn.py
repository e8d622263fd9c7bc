"""The main's watchers keep each other up (node/proc/respawn.py), and a coordinator started
again goes on from its files (node/chain/resume.py): where the chain stands after each step
it writes, and a keeper that respawns a dead process of its tag once, never one that
said goodbye, within its budget. Real processes stand in for the watcher (a `sleep`
with the watcher's tag, started the way the keeper starts one); each test kills only
the PIDs it started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mntui.sessions.node.board.coordstate import Board
from mntui.sessions.node.chain import resume
from mntui.sessions.node.chain.chain import run_chain
from mntui.sessions.node.notice.notifysend import Outbox
from mntui.sessions.node.proc import respawn
from mntui.sessions.node.rules.judging import Rules
from mntui.sessions.node.rules.restarts import AttemptEnd, RestartRules
from mntui.sessions.node.rules.states import NodeState
from mntui.sessions.node.wire.chaincopy import Replica
from mntui.sessions.node.wire.watchcfg import WatchConfig, write_json

RUN = "20261126-101500-ab12"
NEXT = "20261126-101500-cd34"
TAG = f"job/{RUN}/node0"


def _end(k: int) -> dict[str, Any]:
    return AttemptEnd(k, RUN, NodeState.FAILED, "node1", (3,), 12.0, "node1 failed").plain()


def chain(status: str, last: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    first = {"attempt": 0, "run": RUN, "started_at": 100.0}
    attempts = [first] if last is None else [{**first, "end": _end(0)}, last]
    return {"chain": RUN, "status": status, "attempts": attempts, **more}


def test_a_running_attempt_without_a_decision_is_watched_again() -> None:
    p = resume.point(chain("running"), None, 200.0)
    assert p is not None and (p.phase, p.k, p.run, p.history, p.started_at) == (
        resume.WATCH, 0, RUN, (), 100.0,
    )  # fmt: skip


def test_a_decision_of_the_running_attempt_is_carried_on_not_taken_again() -> None:
    record = {"run": RUN, "decided_by": "coordinator", "node": "node1", "state": "failed"}
    p = resume.point(chain("running"), record, 200.0)
    assert p is not None and p.phase == resume.DECIDE and p.record == record
    other = {**record, "run": NEXT}  # an older attempt's: no decision of this one
    p = resume.point(chain("running"), other, 200.0)
    assert p is not None and p.phase == resume.WATCH


def test_a_backoff_goes_on_for_what_is_left_of_it_with_the_restarts_used() -> None:
    data = chain("backoff")
    data["attempts"][0].update(end=_end(0), ended_at=190.0, delay=15.0)
    p = resume.point(data, None, 200.0)
    assert p is not None and p.phase == resume.BACKOFF and p.left == pytest.approx(5.0)
    assert [e.culprit for e in p.history] == ["node1"]
    p = resume.point(data, None, 300.0)
    assert p is not None and p.left == 0.0


def test_an_attempt_starting_is_started_again_unless_its_start_was_stopped() -> None:
    data = chain("starting", {"attempt": 1, "run": NEXT, "started_at": 150.0})
    p = resume.point(data, None, 200.0)
    assert p is not None and (p.phase, p.k, p.run, len(p.history)) == (resume.START, 1, NEXT, 1)
    stopped = {"run": NEXT, "decided_by": "coordinator", "why": "attempt 1 did not start: x"}
    p = resume.point(data, stopped, 200.0)
    assert p is not None and (p.phase, p.end, p.why) == (
        resume.OVER, "failed-restart", "attempt 1 did not start: x",
    )  # fmt: skip


@pytest.mark.parametrize("status", sorted(resume.TERMINAL))
def test_a_chain_that_ended_is_not_taken_up_again(status: str) -> None:
    p = resume.point(chain(status, why="the user's kill"), None, 200.0)
    assert p is not None and (p.phase, p.end, p.why) == (resume.OVER, None, "the user's kill")


@pytest.mark.parametrize(
    "data",
    [
        {"chain": RUN, "status": "running"},
        {"chain": RUN, "status": "running", "attempts": []},
        {"chain": RUN, "status": "running", "attempts": ["x"]},
        {"chain": RUN, "status": "running", "attempts": [{"attempt": "0", "run": RUN}]},
        {"chain": RUN, "status": "what", "attempts": [{"attempt": 0, "run": RUN}]},
        {
            "chain": RUN,
            "status": "backoff",
            "attempts": [{"attempt": 0, "run": RUN, "end": {"state": "?"}}],
        },
    ],
)
def test_a_chain_file_this_cannot_read_starts_afresh(data: dict[str, Any]) -> None:
    assert resume.point(data, None, 200.0) is None


# -- the keeper -------------------------------------------------------------------------

# Started as the keeper starts a watcher (`ARGV coord RUN_DIR`, tagged): a sleep that
# writes its pid file and says `COORD <pid>`, as daemon.daemonize's first parent does.
FAKE = ["sh", "-c", 'sleep 60 >/dev/null 2>&1 & echo $! >"$2/coord.pid"; echo "COORD $!"', "fake"]


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "coord").mkdir()
    yield tmp_path
    for pid in started(tmp_path):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def started(d: Path) -> list[int]:
    out = []
    for line in _journal(d):
        pid = line["data"].get("pid")
        if isinstance(pid, int):
            out.append(pid)
    first = respawn.read_pid(str(d / "coord.pid"))
    return out + ([first] if first else [])


def _journal(d: Path) -> list[dict[str, Any]]:
    try:
        text = (d / "coord" / "journal.jsonl").read_text()
    except OSError:
        return []
    return [json.loads(line) for line in text.splitlines()]


def first_watcher(d: Path) -> int:
    env = dict(os.environ, MNTUI_RUN=f"{TAG}/coord")
    out = subprocess.run([*FAKE, "coord", str(d)], env=env, capture_output=True, text=True)
    return int(out.stdout.split()[1])


def settle(k: respawn.Keeper, until: float = 10.0) -> None:
    end = time.monotonic() + until
    while k.busy.locked() and time.monotonic() < end:
        time.sleep(0.02)


def kill_and_check(k: respawn.Keeper, pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + 5
    while respawn.live(pid) is not None and time.monotonic() < end:
        time.sleep(0.01)  # reaped by init: the zombie counts as dead anyway
    k.check()
    settle(k)


def test_a_watcher_that_died_is_started_again_once_with_its_tag(run_dir: Path) -> None:
    pid = first_watcher(run_dir)
    woke: list[bool] = []
    k = respawn.Keeper(str(run_dir), "node0", TAG, "coord", FAKE, lambda: woke.append(True))
    k.check()
    assert k.known == respawn.live(pid), "a live watcher of its tag is known, not respawned"
    kill_and_check(k, pid)
    new = respawn.read_pid(str(run_dir / "coord.pid"))
    assert new is not None and new != pid and respawn.live(new) is not None
    assert k._tagged(new), "the new watcher carries the tag a kill by tag finds"
    lines = [e for e in _journal(run_dir) if e["kind"] == "respawn"]
    assert [(e["data"]["who"], e["data"]["pid_was"], e["data"]["pid"]) for e in lines] == [
        ("coordinator", pid, new)
    ]
    assert woke == [True]
    k.check()
    settle(k)
    assert respawn.read_pid(str(run_dir / "coord.pid")) == new, "a live one is left alone"


def test_a_watcher_that_said_goodbye_is_not_started_again(run_dir: Path) -> None:
    pid = first_watcher(run_dir)
    k = respawn.Keeper(str(run_dir), "node0", TAG, "coord", FAKE)
    k.check()
    (run_dir / "coord.exited").write_text(json.dumps({"pid": pid, "why": "the chain ended"}))
    kill_and_check(k, pid)
    assert respawn.read_pid(str(run_dir / "coord.pid")) == pid and k.gave_up is not None
    assert not _journal(run_dir)


def test_a_pid_file_naming_another_process_is_no_watcher(run_dir: Path) -> None:
    """A reused pid (here: this test's own) is not the coordinator: it is started."""
    (run_dir / "coord.pid").write_text(f"{os.getpid()}\n")
    k = respawn.Keeper(str(run_dir), "node0", TAG, "coord", FAKE)
    k.check()
    settle(k)
    new = respawn.read_pid(str(run_dir / "coord.pid"))
    assert new != os.getpid() and new is not None and respawn.live(new) is not None


def test_past_its_budget_the_keeper_gives_up_and_says_why(run_dir: Path) -> None:
    pid = first_watcher(run_dir)
    k = respawn.Keeper(str(run_dir), "node0", TAG, "coord", FAKE)
    k.check()
    for _ in range(respawn.MAX + 1):
        kill_and_check(k, pid)
        pid = respawn.read_pid(str(run_dir / "coord.pid")) or pid
    kinds = [e["kind"] for e in _journal(run_dir)]
    assert kinds == ["respawn"] * respawn.MAX + ["respawn-gave-up"], kinds
    assert k.gave_up is not None and f"{respawn.MAX} respawns" in k.gave_up
    saved = json.loads((run_dir / "respawn-coord.json").read_text())
    assert "stays down" in saved["gave_up"] and len(saved["times"]) == respawn.MAX


def test_without_a_bundle_nothing_is_respawned(run_dir: Path) -> None:
    pid = first_watcher(run_dir)
    k = respawn.Keeper(str(run_dir), "node0", TAG, "coord", None)
    kill_and_check(k, pid)
    assert respawn.read_pid(str(run_dir / "coord.pid")) == pid and not _journal(run_dir)


# -- a coordinator that takes the chain over ---------------------------------------------


class Successor:
    """What run_chain needs of a coordinator (chain.Coordinator), with a real board on
    a temp dir and no sentinel connected; it must never watch the attempt again."""

    def __init__(self, out: Path) -> None:
        rules = Rules(2.0, 3.0, "kill_all", "kill_all", 60.0)
        again = RestartRules(2, 0.1, 1.0, frozenset({"failed"}), None, frozenset(), 0.0)
        self.cfg = WatchConfig(
            "job", RUN, "node0", TAG, "s", "127.0.0.1", 1, rules, ("node0", "node1"),
            0.5, 1.0, 0.5, (), 60.0, restart=again, attempt_nonce="0123456789abcdef",
        )  # fmt: skip
        self.board = Board(self.cfg, str(out))
        self.done = threading.Event()
        self.notices = Outbox(None, "job", 2, self.board)  # no notify: nothing sent
        self.replica = Replica(self.board.live_peers, self.done)  # never run: no sends

    def watch_attempt(self) -> Any:
        raise AssertionError("the decided attempt was watched again")

    def kill_requested(self) -> None:
        return None


def test_a_teardown_cut_by_the_coordinators_death_is_finished_and_decided_once(
    tmp_path: Path,
) -> None:
    out = tmp_path / "coord"
    out.mkdir()
    write_json(str(out / "chain.json"), chain("running"))
    cut = {"run": RUN, "decided_by": "coordinator", "node": "node1", "state": "failed",
           "why": "exit 3", "decided_at": 150.0, "exit_codes": [3], "kill": {}}  # fmt: skip
    write_json(str(out / "decision.json"), cut)
    c = Successor(out)
    why = run_chain(c)
    done = json.loads((out / f"decision-{RUN}.json").read_text())
    assert "ended_at" in done and set(done["kill"]) == {"node0", "node1"}, done
    saved = json.loads((out / "chain.json").read_text())
    first = saved["attempts"][0]
    assert (first["end"]["culprit"], first["end"]["exit_codes"]) == ("node1", [3]), first
    assert first["restart"] == "restart 1/2", first
    # attempt 1 asked of sentinels that are not there: said, and the chain ends
    assert saved["status"] == "failed-restart" and "no sentinel connected" in why, saved
    kinds = [e["kind"] for e in _journal(tmp_path)]
    assert kinds[:2] == ["resumed", "teardown-resumed"] and "decision" not in kinds, kinds
