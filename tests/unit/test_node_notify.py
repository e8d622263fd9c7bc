"""A notification's words and body, one rule for the coordinator on the main and for
this machine (node/rules/notifytext.py); the coordinator's outbox (node/notice/notifysend.py) and
what this machine sends of it (watch/clusternotify.py), with a real HTTP server."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hookserver import SECRET, serving

from mntui.sessions import notify
from mntui.sessions.launch.board import BoardView
from mntui.sessions.node.notice import notifykept, notifysend
from mntui.sessions.node.rules import notifyhook, notifytext
from mntui.sessions.node.rules.chainstates import OutcomeKind
from mntui.sessions.node.rules.judging import NodeTrigger
from mntui.sessions.node.rules.notifyhook import NotifyRules, rules_json, rules_of, webhook_body
from mntui.sessions.node.rules.notifytext import Notice, NotifyEvent, entry_of, notice_of
from mntui.sessions.node.rules.restarts import AttemptEnd, Decision
from mntui.sessions.node.rules.states import NodeState, Verdict
from mntui.sessions.node.wire import watchcfg
from mntui.sessions.notify import NotifyPolicy, for_coordinator
from mntui.sessions.watch import clusternotify


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)


def test_both_sides_build_the_same_body_with_one_rule() -> None:
    assert notify.notices.webhook_body is webhook_body
    assert notify.NotifyEvent is NotifyEvent and notify.Notice is Notice
    assert notify.notices.check_webhook_url is notifyhook.check_webhook_url
    n = Notice(NotifyEvent.TEARDOWN, "j", "r1", "node1 @everyone <!here> \udcff x" + "y" * 3000)
    body = json.loads(webhook_body(n))
    assert body["event"] == "teardown" and body["job"] == "j" and body["run_id"] == "r1"
    assert "@\u200beveryone" in body["text"] and "<\u200b!here>" in body["content"]
    chat = body["text"].replace("\u200b", "")  # the defusing's zero-width spaces
    assert len(chat) == notifytext.CHAT_TEXT and chat.endswith("…") and "\ufffd" in chat
    assert body["allowed_mentions"] == {"parse": []} and body["report"] is None
    assert str(NotifyEvent.GAVE_UP) == "gave-up" and f"{NotifyEvent.SLOW}" == "slow"


def test_the_summaries_are_the_watchdogs_and_the_supervisors_words() -> None:
    assert notifytext.teardown_summary("node1", "exited 1") == "node1 exited 1"
    assert notifytext.teardown_summary("node1", "x", "the report", "; chain") == "the report; chain"
    assert notifytext.failed_summary(None) == "job is no longer running (failed)"
    assert notifytext.finished_summary("j", "; 2 attempts") == "j finished; 2 attempts"
    got = notifytext.restart_summary(2, 3, 10.0, "restart 2/3", "node1 failed", "swapped")
    assert got == "attempt 3/4 in 10s (restart 2/3); swapped; last: node1 failed"
    assert notifytext.gave_up_summary("why", "cause") == "gave up: why; last: cause"


def test_an_entry_reads_back_and_anything_else_is_refused() -> None:
    n = Notice(NotifyEvent.RESTART, "j", "r1", "s" * 5000, None, {"k": "v"})
    e = entry_of(n, "abc123", 1.5)
    assert len(e["summary"]) == notifytext.ENTRY_TEXT
    got = notice_of(json.loads(json.dumps(e)))
    assert got is not None and got[0] == "abc123" and got[1].event is NotifyEvent.RESTART
    assert got[1].summary == e["summary"] and got[1].details == {"k": "v"}
    for bad in (
        None,
        [],
        {**e, "id": "../x"},
        {**e, "id": ""},
        {**e, "event": "exploded"},
        {**e, "summary": 3},
        {**e, "summary": "x" * (notifytext.MAX_TEXT + 1)},
        {**e, "report": 1},
        {**e, "details": {"k": 1}},
        {**e, "details": {str(i): "v" for i in range(notifytext.MAX_DETAILS + 1)}},
    ):
        assert notice_of(bad) is None, bad


def test_the_watch_files_notify_is_read_strictly() -> None:
    r = NotifyRules("https://hooks.example/T/B", frozenset({"teardown"}), 5.0, "notify-send x")
    assert rules_of(json.loads(json.dumps(rules_json(r)))) == r
    assert rules_of(None) is None and rules_json(None) is None
    good = rules_json(r)
    assert good is not None
    for bad in (
        [],
        {**good, "webhook": "ftp://x/"},
        {**good, "webhook": "https://a b/"},
        {**good, "on": ["teardown", "boom"]},
        {**good, "on": "teardown"},
        {**good, "timeout": 0},
        {**good, "timeout": True},
        {**good, "command": 1},
        {**good, "command": ""},
        {**good, "command": "echo \0"},
        {**good, "command": "x" * (notifyhook.COMMAND_MOST + 1)},
    ):
        with pytest.raises(watchcfg.BadWatchFile, match="notify"):
            rules_of(bad, watchcfg.BadWatchFile)


def test_the_coordinator_gets_the_webhook_and_the_command() -> None:
    url = "https://hooks.example/T/B"
    both = for_coordinator(NotifyPolicy(url, "notify-send x", frozenset({NotifyEvent.FAILED})))
    assert both == NotifyRules(url, frozenset({"failed"}), 5.0, "notify-send x")
    assert for_coordinator(NotifyPolicy(command="x")) == NotifyRules(
        None, frozenset(str(e) for e in NotifyEvent), 5.0, "x"
    )
    assert for_coordinator(NotifyPolicy(url, on=frozenset())) is None
    assert for_coordinator(NotifyPolicy()) is None


class Board:
    """The outbox's writer, on a temp dir (coordstate.Board's write and journal)."""

    def __init__(self, out: Path) -> None:
        self.out, self.run, self.lines = str(out), "r1", []  # type: list[dict[str, Any]]
        self.attempt = 0
        self.lock = threading.Lock()

    def write(self, name: str, data: dict[str, Any]) -> None:
        watchcfg.write_json(str(Path(self.out) / name), data)

    def journal(self, kind: str, node: str | None, **data: Any) -> None:
        with self.lock:
            self.lines.append({"kind": kind, "data": data})

    def file(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((Path(self.out) / notifykept.FILE).read_text())
        return data


def test_the_outbox_posts_and_says_what_became_of_each(tmp_path: Path) -> None:
    board = Board(tmp_path)
    with serving() as hook:
        box = notifysend.Outbox(NotifyRules(hook.url, frozenset({"teardown"}), 5.0), "j", 2, board)
        nid = box.send(NotifyEvent.TEARDOWN, "r1", "node1 exited 1", 0)
        assert box.send(NotifyEvent.FINISHED, "r1", "not in `on`", 0) is None
        box.close()
        assert [b["summary"] for b in hook.bodies()] == ["node1 exited 1"]
    (entry,) = board.file()["notices"]
    assert entry["id"] == nid and entry["webhook"] == "sent" and entry["why"] is None
    assert [(x["kind"], x["data"]["webhook"]) for x in board.lines] == [
        ("notice", "pending"),
        ("notified", "sent"),
    ]
    assert SECRET not in json.dumps(board.file())


def test_the_outbox_runs_the_command_on_the_main_with_the_notice_in_its_env(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """notify.command runs where the coordinator decides, with the notice in its
    environment only (never the job's tag), beside the webhook, within the deadline; its
    end is journaled and its last words go to the coordinator's log, controls stripped."""
    board = Board(tmp_path)
    got = tmp_path / "got"
    command = (
        f'printf "%s|%s|%s|%s|%s|%s" "$MNTUI_EVENT" "$MNTUI_JOB" "$MNTUI_RUN_ID" '
        f'"$MNTUI_SUMMARY" "$MNTUI_REPORT" "${{MNTUI_RUN-untagged}}" >{got}; '
        "printf 'told \\033[2Jx\\n'; exit 3"
    )
    with serving() as hook:
        rules = NotifyRules(hook.url, frozenset({"teardown"}), 5.0, command)
        box = notifysend.Outbox(rules, "j", 2, board)
        box.send(NotifyEvent.TEARDOWN, "r1", "node1 exited 1; $(reboot)", 0)
        box.close()
        assert [b["summary"] for b in hook.bodies()] == ["node1 exited 1; $(reboot)"]
    assert got.read_text() == "teardown|j|r1|node1 exited 1; $(reboot)||untagged"
    said = [(x["kind"], x["data"].get("why")) for x in board.lines]
    assert ("notify-command", "command exited 3") in said and ("notified", None) in said
    log = capsys.readouterr().out
    assert "notify: command for teardown" in log and "notify: | told x" in log, log
    assert "\033" not in log
    (entry,) = board.file()["notices"]
    assert entry["webhook"] == "sent" and "here" not in board.file()


def test_a_hanging_command_is_killed_at_the_deadline(tmp_path: Path) -> None:
    board = Board(tmp_path)
    pid = tmp_path / "pid"
    rules = NotifyRules(None, frozenset({"failed"}), 1.0, f"echo $$ >{pid}; exec sleep 300")
    box = notifysend.Outbox(rules, "j", 0, board)
    t0 = time.monotonic()
    box.send(NotifyEvent.FAILED, "r1", "x", 0)
    box.close()
    took = time.monotonic() - t0
    assert 1.0 <= took < 5.0, took
    why = [x["data"]["why"] for x in board.lines if x["kind"] == "notify-command"]
    assert why == ["command still running after 1s: killed"], board.lines
    stat = Path(f"/proc/{pid.read_text().strip()}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_refused_post_is_failed(tmp_path: Path) -> None:
    down = socket.socket()
    down.bind(("127.0.0.1", 0))  # never listening: refused
    url = f"http://127.0.0.1:{down.getsockname()[1]}/hooks/{SECRET}"
    board = Board(tmp_path)
    try:
        box = notifysend.Outbox(NotifyRules(url, frozenset({"failed"}), 3.0), "j", 0, board)
        box.send(NotifyEvent.FAILED, "r1", "one", 0)
        box.close()
    finally:
        down.close()
    (e,) = board.file()["notices"]
    assert e["webhook"] == "failed" and "connection refused (retried once)" in e["why"], e
    assert SECRET not in e["why"]


def test_a_flood_is_cut_and_what_is_left_at_exit_is_abandoned(tmp_path: Path) -> None:
    """A webhook that never answers holds the one POST (until its deadline); the queue
    holds QUEUE more, the rest are dropped at once, and `close` leaves the ones that
    never started to this machine, after the one under way has ended."""
    hang = socket.socket()
    hang.bind(("127.0.0.1", 0))
    hang.listen(64)  # accepted by the kernel, never answered
    url = f"http://127.0.0.1:{hang.getsockname()[1]}/x"
    board = Board(tmp_path)
    try:
        box = notifysend.Outbox(NotifyRules(url, frozenset({"slow"}), 1.0), "j", 0, board)
        for i in range(notifysend.QUEUE + 3):
            box.send(NotifyEvent.SLOW, "r1", f"n{i}", 0, key=f"n{i}")
        box.close(0.2)
        states = [e["webhook"] for e in board.file()["notices"]]
    finally:
        hang.close()
    assert len(states) == notifysend.QUEUE + 3 and states.count("dropped") >= 2, states
    assert {"failed", "dropped", "abandoned"} >= set(states) >= {"dropped", "abandoned"}, states


def test_a_predecessors_pending_notice_is_the_managers(tmp_path: Path) -> None:
    board = Board(tmp_path)
    n = Notice(NotifyEvent.TEARDOWN, "j", "r1", "s")
    pending = {**entry_of(n, "id1", 1.0), "webhook": "pending", "why": None}
    board.write(notifykept.FILE, {"v": 1, "notices": [pending]})
    notifysend.Outbox(None, "j", 0, board)
    (e,) = board.file()["notices"]
    assert e["webhook"] == "abandoned" and "started again" in e["why"]


def test_the_chains_decisions_say_the_managers_events(tmp_path: Path) -> None:
    board = Board(tmp_path)
    rules = NotifyRules(None, frozenset(str(e) for e in NotifyEvent), 5.0)
    box = notifysend.Outbox(rules, "j", 3, board)

    class Out:
        kind = OutcomeKind.TEARDOWN
        trigger: NodeTrigger | None = NodeTrigger("node1", NodeState.FAILED, "exited 1", "x")
        verdicts: dict[str, Verdict] = {}

    end = AttemptEnd(0, "r1", NodeState.FAILED, "node1", (1,), 0.0, "node1 failed: exited 1")
    box.decided(Out(), end, Decision(True, "restart 1/3", delay=10.0), 0)
    box.decided(Out(), end, Decision(False, "gave up after 3", gave_up=True), 3)
    ended = Out()
    ended.kind, ended.trigger = OutcomeKind.ENDED, None
    ended.verdicts = {
        "node0": Verdict(NodeState.FINISHED, ""),
        "node1": Verdict(NodeState.FINISHED, ""),
    }
    box.decided(ended, end, None, 0)
    said = [(e["event"], e["summary"], e["webhook"]) for e in board.file()["notices"]]
    assert said == [
        ("teardown", "node1 failed: exited 1", "off"),
        ("restart", "attempt 2/4 in 10s (restart 1/3); last: node1 failed: exited 1", "off"),
        ("teardown", "node1 failed: exited 1", "off"),
        ("gave-up", "gave up: gave up after 3; last: node1 failed: exited 1", "off"),
        ("finished", "j finished", "off"),
    ]


def _view(alive: bool, *entries: dict[str, Any]) -> BoardView:
    return BoardView(None, None, alive, notify={"v": 1, "notices": list(entries)})


def test_this_machine_posts_what_the_coordinator_will_not_and_runs_no_command() -> None:
    n = Notice(NotifyEvent.TEARDOWN, "j", "r1", "s")
    e = {**entry_of(n, "a1", 1.0), "why": None}
    states = ("sent", "failed", "dropped", "abandoned", "pending", "off")
    rows = [{**e, "id": f"id-{s}", "webhook": s} for s in states]
    live = {nid for nid, _ in clusternotify.due(_view(True, *rows))}
    assert live == {"id-failed", "id-dropped", "id-abandoned"}
    gone = {nid for nid, _ in clusternotify.due(_view(False, *rows))}
    assert gone == {"id-failed", "id-dropped", "id-abandoned", "id-pending"}  # it died first
    # a board of an older coordinator that left commands to this machine: posts only
    old = BoardView(None, None, True, notify={"v": 1, "here": True, "notices": rows})
    assert {nid for nid, _ in clusternotify.due(old)} == live
    assert clusternotify.due(_view(True, {"id": "../x"})) == []
    assert clusternotify.due(None) == [] and clusternotify.due(BoardView(None, None, True)) == []


def test_a_claim_is_made_once(tmp_path: Path) -> None:
    where = tmp_path / "notified"
    assert clusternotify._claim(where, "a1")
    assert not clusternotify._claim(where, "a1")
    assert clusternotify._claim(where, "a2") and (where / "a1.webhook").exists()
    assert oct(where.stat().st_mode & 0o777) == "0o700"
