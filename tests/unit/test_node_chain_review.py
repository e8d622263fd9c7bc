"""The restart chain on the cluster as a coordinator started again finds it, and what the
chain notifies (issue 30, the review of restarts onto spares and of notices sent from
the main): a pending kill takes the attempt it finds, on its nodes, once its sentinels
are back; quarantines and a chain the main's loss stopped are notified; a decision taken
again sends nothing twice; the coordinator's port is let go before the webhook's wait;
notify.json stays within the manager's read; node files that are not what they should
be are refused or mended, never a crash. Real boards, sockets, processes and HTTP."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from mntui.sessions.node.board.coordstate import Board
from mntui.sessions.node.chain import swaps
from mntui.sessions.node.chain.chain import run_chain
from mntui.sessions.node.chain.chainlog import ChainLog
from mntui.sessions.node.coord.coordinator import Coordinator
from mntui.sessions.node.coord.coordport import FROM_SENTINEL
from mntui.sessions.node.notice import notifykept, notifysend
from mntui.sessions.node.notice.notifysend import Outbox
from mntui.sessions.node.proc import attemptscript
from mntui.sessions.node.rules.chainstates import ChainStatus, OutcomeKind
from mntui.sessions.node.rules.judging import Rules
from mntui.sessions.node.rules.notifyhook import NotifyRules
from mntui.sessions.node.rules.notifytext import Notice, NotifyEvent, entry_of
from mntui.sessions.node.rules.placing import QuarantineRule
from mntui.sessions.node.rules.restarts import AttemptEnd, RestartRules
from mntui.sessions.node.rules.states import NodeState
from mntui.sessions.node.sentinel.sentinellink import COMMANDS
from mntui.sessions.node.wire import frames
from mntui.sessions.node.wire.chaincopy import Replica
from mntui.sessions.node.wire.watchcfg import WatchConfig, write_json

RUN, NEXT = "20261126-101500-ab12", "20261126-101500-cd34"
SECRET = b"s" * 32
EVERY = NotifyRules(None, frozenset(str(e) for e in NotifyEvent), 5.0)


def config(**more: Any) -> WatchConfig:
    rules = Rules(2.0, 3.0, "kill_all", "kill_all", 60.0)
    again = RestartRules(3, 0.1, 1.0, frozenset({"failed"}), None, frozenset(), 0.0)
    cfg = WatchConfig(
        "job", RUN, "g0", f"job/{RUN}/g0", f"chainfix-{os.getpid()}", "127.0.0.1", 1, rules,
        ("g0", "g1"), 0.5, 0.5, 0.5, (), 60.0, restart=again, attempt_nonce="0123456789abcdef", spares=("s0",),
    )  # fmt: skip
    return replace(cfg, **more)


class Successor:
    """A coordinator started again (chain.Coordinator) on a real board in a temp dir."""

    def __init__(self, out: Path, cfg: WatchConfig, kill: tuple[float, str | None] | None = None):
        self.cfg, self.kill = cfg, kill
        self.board = Board(cfg, str(out))
        self.done = threading.Event()
        self.notices = Outbox(cfg.notify, "job", 3, self.board)
        self.replica = Replica(self.board.live_peers, self.done)  # never run: no sends

    def watch_attempt(self) -> Any:
        raise AssertionError("the attempt was watched again")

    def kill_requested(self) -> tuple[float, str | None] | None:
        return self.kill


def ended(k: int, culprit: str | None, run: str = RUN) -> AttemptEnd:
    return AttemptEnd(k, run, NodeState.FAILED, culprit, (1,), 0.0, f"{culprit} failed: exit 1")


def journal(out: Path) -> list[dict[str, Any]]:
    path = out / "journal.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(x) for x in lines]


# -- 1. a kill pending at a respawn -------------------------------------------------------


def _sentinel(board: Board, node: str) -> frames.Channel:
    """A sentinel of `node` connected over a real handshake; its frames go to the board
    as the coordinator's reader takes them (coordinator.peer)."""
    server, client = socket.socketpair()
    got: list[frames.Channel] = []

    def serve() -> None:
        ch = frames.server_handshake(server, lambda _: SECRET, kinds=FROM_SENTINEL)
        got.append(ch)
        peer = board.connected(node, ch)
        try:
            while True:
                board.heard(peer, ch.recv(timeout=None))
        except (OSError, frames.Refused):
            board.gone(peer, "closed")

    threading.Thread(target=serve, daemon=True).start()
    return frames.client_handshake(client, SECRET, {"node": node, "chain": RUN}, kinds=COMMANDS)


def test_a_kill_pending_at_a_respawn_takes_the_attempt_it_finds_once_its_sentinels_are_back(
    tmp_path: Path,
) -> None:
    """Attempt 1 runs on g0 and the spare s0; the coordinator dies and the user's kill
    waits. Its successor kills attempt 1 (its tag: the main's ranks it kills itself, its
    sentinel gone), on attempt 1's nodes, and asks the spare's sentinel, which comes back
    after the successor started."""
    out = tmp_path / "coord"
    out.mkdir()
    first = {"attempt": 0, "run": RUN, "started_at": 100.0, "nodes": ["g0", "g1"],
             "end": ended(0, "g1").plain(), "ended_at": 150.0, "restart": "restart 1/3",
             "delay": 0.1, "next_nodes": ["g0", "s0"]}  # fmt: skip
    now = {"attempt": 1, "run": NEXT, "started_at": time.time(), "nodes": ["g0", "s0"]}
    write_json(str(out / "chain.json"), {"chain": RUN, "status": "running",
                                         "attempts": [first, now]})  # fmt: skip
    env = {**os.environ, "MNTUI_RUN": f"job/{NEXT}/g0"}  # a rank of attempt 1 on the main
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    c = Successor(out, config(), kill=(0.5, "req-1"))
    spare: list[frames.Channel] = []

    def come_back() -> None:  # the spare's sentinel reconnects once the successor runs
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(e["kind"] == "resumed" for e in journal(out)):
            time.sleep(0.02)
        ch = _sentinel(c.board, "s0")
        spare.append(ch)
        msg = ch.recv(timeout=10)
        assert msg["k"] == "kill"
        ch.send("done", re=msg["id"], result={"killed": [4242], "by": "s0"})

    t = threading.Thread(target=come_back, daemon=True)
    t.start()
    try:
        why = run_chain(c)  # type: ignore[arg-type]
        assert rank.wait(timeout=10) is not None  # the main's rank of attempt 1: killed
    finally:
        if rank.poll() is None:
            rank.kill()
    t.join(10)
    assert why == "killed by the user"
    record = json.loads((out / "decision.json").read_text())
    assert record["run"] == NEXT and record["request"] == "req-1"
    assert set(record["kill"]) == {"g0", "s0"}, record  # attempt 1's nodes, not the run's
    assert record["kill"]["s0"] == {"killed": [4242], "by": "s0"}  # asked once it came back
    assert record["kill"]["g0"]["by"] == "coordinator"
    assert json.loads((out / "chain.json").read_text())["status"] == "killed"
    for ch in spare:
        ch.close()


# -- 2-4. what the chain notifies ---------------------------------------------------------


def _decided_twice(out: Path, culprit: str, cfg: WatchConfig) -> list[dict[str, Any]]:
    """Attempt 1 torn down for `culprit` after attempt 0 was too; its coordinator died
    after its notices and before it wrote the decision's outcome in chain.json: the next
    one decides again. The notices in notify.json after both."""
    first = {"attempt": 0, "run": RUN, "started_at": 100.0, "nodes": ["g0", "g1"],
             "end": ended(0, culprit).plain(), "ended_at": time.time() - 5,
             "restart": "restart 1/3", "delay": 0.1}  # fmt: skip
    now = {"attempt": 1, "run": NEXT, "started_at": time.time() - 4, "nodes": ["g0", "g1"]}
    chain = {"chain": RUN, "status": "running", "attempts": [first, now]}
    cut = {"run": NEXT, "decided_by": "coordinator", "node": culprit, "state": "failed",
           "why": "exit 1", "decided_at": time.time(), "exit_codes": [1], "kill": {},
           "ended_at": time.time()}  # fmt: skip
    for _ in range(2):
        write_json(str(out / "chain.json"), chain)
        write_json(str(out / "decision.json"), cut)
        run_chain(Successor(out, cfg))  # type: ignore[arg-type]
    notices: list[dict[str, Any]] = json.loads((out / notifykept.FILE).read_text())["notices"]
    return notices


def test_the_mains_loss_and_its_quarantine_are_notified_once_whoever_decides(
    tmp_path: Path,
) -> None:
    """The main broke twice: quarantined (restart.quarantine_after), and the chain stops
    for this machine to replace it: the user is told both, in the chain's words, once
    although two coordinators took the decision."""
    out = tmp_path / "coord"
    out.mkdir()
    cfg = config(notify=EVERY, quarantine=QuarantineRule(2, 3600.0, 86400.0))
    notices = _decided_twice(out, "g0", cfg)
    said = [(e["event"], e["summary"]) for e in notices]
    assert said == [
        ("teardown", "g0 failed: exit 1"),
        ("quarantined", "g0 quarantined: caused 2 failures within 1h "
                        "(restart.quarantine_after)"),
        ("gave-up", "gave up: the main g0 is quarantined: only this machine can replace "
                    "it (`mntui launch --restart` puts a spare in its place; the "
                    "coordinator runs on it); last: g0 failed: exit 1"),
    ], said  # fmt: skip
    assert len({e["id"] for e in notices}) == 3
    chain = json.loads((out / "chain.json").read_text())
    assert chain["status"] == "ended" and "only this machine" in chain["why"]


def test_a_restart_decided_again_after_a_respawn_is_notified_once(tmp_path: Path) -> None:
    out = tmp_path / "coord"
    out.mkdir()
    notices = _decided_twice(out, "g1", config(notify=EVERY))
    # attempt 2 then finds no sentinel: each coordinator's start of it is a run of its
    # own (named when it starts, chain.json keeps it for a successor), so each of the two
    # failed starts is told, here where the test starts both
    events = [e["event"] for e in notices]
    assert events == ["teardown", "restart", "failed", "failed"], notices
    assert len({e["run"] for e in notices[2:]}) == 2 and notices[2]["run"] != NEXT


def test_a_notices_id_is_its_decisions(tmp_path: Path) -> None:
    board = Board(config(), str(tmp_path))
    a = Outbox(EVERY, "job", 3, board)
    nid = a.send(NotifyEvent.RESTART, NEXT, "attempt 2/3", 1)
    assert nid == notifysend.notice_id(NEXT, 1, NotifyEvent.RESTART) and len(nid) == 16
    b = Outbox(EVERY, "job", 3, board)  # a coordinator started again
    assert b.send(NotifyEvent.RESTART, NEXT, "attempt 2/3, again", 1) == nid
    assert b.send(NotifyEvent.RESTART, NEXT, "attempt 3/3", 2) != nid
    assert b.send(NotifyEvent.QUARANTINED, NEXT, "g1 q", 1, key="g1") != b.send(
        NotifyEvent.QUARANTINED, NEXT, "g2 q", 1, key="g2"
    )
    kept = json.loads((tmp_path / notifykept.FILE).read_text())["notices"]
    assert [e["summary"] for e in kept] == ["attempt 2/3", "attempt 3/3", "g1 q", "g2 q"]


# -- 5. the port, let go before the webhook's wait ---------------------------------------


def test_the_coordinator_lets_its_port_go_before_it_waits_on_the_webhook(
    tmp_path: Path,
) -> None:
    hang = socket.socket()
    hang.bind(("127.0.0.1", 0))
    hang.listen(8)  # accepted by the kernel, never answered: the POST takes its timeout
    rules = NotifyRules(f"http://127.0.0.1:{hang.getsockname()[1]}/x", frozenset({"slow"}), 3.0)
    cfg = config(notify=rules)
    (tmp_path / "coord").mkdir()
    write_json(str(tmp_path / "coord" / "chain.json"), {
        "chain": RUN, "status": "ended", "why": "over",
        "attempts": [{"attempt": 0, "run": RUN, "started_at": 1.0}]})  # fmt: skip
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    c = Coordinator(cfg, SECRET, str(tmp_path), sock)
    threading.Thread(target=c.accept, daemon=True).start()
    c.notices.send(NotifyEvent.SLOW, RUN, "a slow node", 0)  # under way at the exit
    ran = threading.Thread(target=c.run, daemon=True)
    t0 = time.monotonic()
    ran.start()
    try:
        free = None
        while time.monotonic() - t0 < 2.0:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            except (ConnectionRefusedError, ConnectionResetError):  # reset: closed mid-connect
                free = time.monotonic() - t0
                break
            time.sleep(0.02)
        assert free is not None and ran.is_alive(), "the port was held through the wait"
        ran.join(15)
        assert not ran.is_alive()
    finally:
        hang.close()
        sock.close()


# -- 6. notify.json within the manager's read --------------------------------------------


class _Reason(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(500, "\u00e9" * 60000)  # a reason phrase of 60000 characters
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def reasons() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Reason)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/h"
    finally:
        server.shutdown()
        server.server_close()


def test_notify_json_always_fits_the_managers_read(tmp_path: Path, reasons: str) -> None:
    """The worst case: every text at its bound in characters beyond the BMP (12 bytes
    each, escaped), a predecessor's file with texts past every bound, and an HTTP reason
    phrase of 60000 characters: the file stays within what the board reads."""
    wide = "\U0001f600"
    board = Board(config(), str(tmp_path))
    n = Notice(NotifyEvent.FAILED, wide * 5000, wide * 5000, wide * 5000, wide * 4000,
               {f"k{i}": wide * 200 for i in range(16)})  # fmt: skip
    old = [
        {**entry_of(n, f"old{i}", 1.0), "webhook": "failed", "why": wide * 5000} for i in range(20)
    ]  # fmt: skip (3.3 MB: the predecessor's read takes 4 MiB)
    write_json(str(tmp_path / notifykept.FILE), {"v": 1, "here": True, "notices": old})
    box = Outbox(NotifyRules(reasons, frozenset({"failed"}), 5.0), wide * 300, 3, board)
    assert (tmp_path / notifykept.FILE).stat().st_size <= notifykept.BOARD_READ
    kept = json.loads((tmp_path / notifykept.FILE).read_text())["notices"]
    assert len(kept) == notifykept.KEEP and all(len(e["why"]) <= notifykept.WHY_TEXT for e in kept)
    assert all(e["details"] == {} and e["report"] is None for e in kept)
    for k in range(3):
        box.send(NotifyEvent.FAILED, wide * 200, wide * 3000, k)
    box.close()
    text = (tmp_path / notifykept.FILE).read_text()
    assert len(text.encode()) <= notifykept.BOARD_READ
    last = json.loads(text)["notices"][-1]
    assert last["webhook"] == "failed" and last["why"].startswith("webhook http://127.0.0.1:")
    assert len(last["why"]) <= notifykept.WHY_TEXT and "\n" not in last["why"]
    assert notifykept.KEEP * notifykept.ENTRY_MOST + 512 <= notifykept.BOARD_READ


# -- 7-9. node files that are not what they should be ------------------------------------


def test_a_spares_template_over_the_bound_is_refused_not_cut_and_run(tmp_path: Path) -> None:
    nonce = "0123456789abcdef"
    token = "@@MNTUI_RANK_0123456789abcdef@@"
    spare = config(node="s0", rank_token=token)
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    run, count = attemptscript.run_token(nonce), attemptscript.count_token(nonce)
    master = attemptscript.master_token(nonce)
    info = {"run": run, "tag": f"job/{run}/s0", "run_dir": f".mntui/runs/job/{run}/s0"}
    (attempts / "next.json").write_text(json.dumps(info))
    head = (f"export NODE_RANK={token} MNTUI_RESTART_COUNT={count} MNTUI_RUN=job/{run}/s0 "
            f"MASTER_ADDR={master}\n")  # fmt: skip
    (attempts / "next.sh").write_text(head + "#" * (attemptscript.MAX_SCRIPT - len(head)))
    text = Path(attemptscript.render(str(tmp_path), 1, NEXT, spare, 1)).read_text()
    assert text.startswith(
        f"export NODE_RANK=1 MNTUI_RESTART_COUNT=1 MNTUI_RUN=job/{NEXT}/s0 MASTER_ADDR=127.0.0.1\n"
    ), text[:200]
    (attempts / "next.sh").write_text(head + "#" * (attemptscript.MAX_SCRIPT - len(head)) + "\nrm")
    with pytest.raises(RuntimeError, match="not the launch's"):
        attemptscript.render(str(tmp_path), 1, NEXT, spare, 1)
    (attempts / "next.sh").write_text(f"export NODE_RANK={token}\n")  # its run: not there
    with pytest.raises(RuntimeError, match="not the launch's"):
        attemptscript.render(str(tmp_path), 1, NEXT, spare, 1)


def test_a_spares_process_count_is_never_a_nodes() -> None:
    cfg = config(nprocs=(), spare_nprocs=(8,))
    assert (cfg.nproc("g0"), cfg.nproc("g1"), cfg.nproc("s0")) == (None, None, 8)
    both = config(nprocs=(2, 4), spare_nprocs=(8,))
    assert (both.nproc("g0"), both.nproc("g1"), both.nproc("s0")) == (2, 4, 8)


@pytest.mark.parametrize("bad", [[], ["g1"], "g1", 3, None])
def test_a_chain_files_quarantines_that_are_no_object_are_none(tmp_path: Path, bad: object) -> None:
    """Taken as none, counted and journaled once: before, each restart raised TypeError
    until the respawn budget was spent."""
    cfg = config(quarantine=QuarantineRule(1, 3600.0, 86400.0))
    board = Board(cfg, str(tmp_path))
    saved = {"chain": RUN, "status": "running", "quarantined": bad,
             "attempts": [{"attempt": 0, "run": RUN, "started_at": 1.0}]}  # fmt: skip
    log = ChainLog(board, cfg, saved)
    held = log.ending(ended(0, "g1"), OutcomeKind.TEARDOWN)
    assert held == [("g1", "g1 quarantined: caused 1 failures within 1h "
                            "(restart.quarantine_after)")]  # fmt: skip
    assert board.malformed == 1 and log.data["quarantined"]["g1"]["caused"] == 1
    assert [e["kind"] for e in journal(tmp_path)].count("malformed") == 1
    assert swaps.out_of({"quarantined": bad}) == set()
    data: dict[str, Any] = {"quarantined": bad, "attempts": []}
    assert swaps.quarantine(data, cfg, 1.0) == [] and data["quarantined"] == {}


# -- 10. the states, spelled once ---------------------------------------------------------


def test_the_states_keep_the_files_spelling() -> None:
    assert [s.value for s in ChainStatus] == [
        "running", "backoff", "starting", "ended", "gave-up", "killed", "failed-restart"
    ]  # fmt: skip
    assert [k.value for k in OutcomeKind] == ["teardown", "ended", "killed"]
    assert (
        f"{ChainStatus.GAVE_UP}" == "gave-up" and json.dumps([OutcomeKind.KILLED]) == '["killed"]'
    )
    assert {s for s in ChainStatus if s.live} == {"running", "backoff", "starting"}
