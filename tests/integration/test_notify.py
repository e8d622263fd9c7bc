"""Notifications against a real local HTTP server and real processes: one POST per
event, a dead or silent webhook delays nothing, the user's command gets node text only
through its environment, and a hanging one is killed at the timeout."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakecluster import free_port, wait_for
from hookserver import SECRET, _HookServer, serving

from mntui.sessions.notify import Notifier
from mntui.sessions.notify.notices import (
    ALL_EVENTS,
    Notice,
    NotifyEvent,
    NotifyPolicy,
    check_webhook_url,
)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def hook() -> Iterator[_HookServer]:
    with serving() as server:
        yield server


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A server that accepts connections and never answers."""
    sock = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(sock.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/hooks/{SECRET}"
    sock.close()
    for conn in held:
        conn.close()


def notice(
    event: NotifyEvent = NotifyEvent.TEARDOWN, summary: str = "g375 rank 1 failed"
) -> Notice:
    return Notice(event, "demo", "20261122-105313-8e89", summary, "/state/demo/report.txt")


def timed_send(n: Notifier, what: Notice) -> float:
    t0 = time.perf_counter()
    n.send(what)
    return time.perf_counter() - t0


def log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_one_post_per_event_with_the_summary(hook: _HookServer, tmp_path: Path) -> None:
    log = tmp_path / "notify.log"
    n = Notifier(NotifyPolicy(webhook=hook.url), log)
    events = list(NotifyEvent)
    for ev in events:
        assert timed_send(n, notice(ev, f"{ev}: rank 1 failed first (train.py:88)")) < 0.05
    assert n.drain(10.0)
    assert len(hook.posts) == len(events)
    assert [b["event"] for b in hook.bodies()] == [str(e) for e in events]  # in order sent
    for (path, headers, _), body, ev in zip(hook.posts, hook.bodies(), events, strict=True):
        assert path == f"/hooks/{SECRET}"
        assert headers["Content-Type"] == "application/json"
        summary = f"{ev}: rank 1 failed first (train.py:88)"
        assert body["text"] == body["content"] == body["summary"] == summary
        assert (body["job"], body["run_id"]) == ("demo", "20261122-105313-8e89")
        assert body["report"] == "/state/demo/report.txt"
    assert log_lines(log) == []


def test_node_text_in_a_summary_pings_nobody(hook: _HookServer) -> None:
    n = Notifier(NotifyPolicy(webhook=hook.url), None)
    n.send(notice(summary="rank 1: @everyone <!channel> <@U024BE7LH> \udcff\x00end"))
    assert n.drain(10.0)
    (body,) = hook.bodies()
    text = str(body["text"])
    assert "@everyone" not in text and "<!channel>" not in text and "<@U" not in text
    assert text.replace("\u200b", "") == "rank 1: @everyone <!channel> <@U024BE7LH> \ufffd\ufffdend"
    assert body["allowed_mentions"] == {"parse": []}


@pytest.mark.parametrize("kind", ["refused", "http-500"])
def test_failing_webhook_is_logged_not_raised(kind: str, hook: _HookServer, tmp_path: Path) -> None:
    log = tmp_path / "state" / "notify.log"
    if kind == "refused":
        url = f"http://127.0.0.1:{free_port()}/hooks/{SECRET}"
    else:
        url, hook.status = hook.url, 500
    n = Notifier(NotifyPolicy(webhook=url, timeout=2.0), log)
    assert timed_send(n, notice()) < 0.05
    assert n.drain(10.0)
    (line,) = log_lines(log)
    want = "connection refused (retried once)" if kind == "refused" else "HTTP 500"
    assert "teardown job demo run 20261122-105313-8e89: webhook http://127.0.0.1:" in line
    assert want in line and SECRET not in line
    assert log.stat().st_mode & 0o777 == 0o600
    assert len(hook.posts) == (1 if kind == "http-500" else 0)  # a 500 is not retried


def test_silent_webhook_delays_nothing_and_drain_is_bounded(
    silent_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "notify.log"
    n = Notifier(NotifyPolicy(webhook=silent_url, timeout=1.5), log)
    assert timed_send(n, notice()) < 0.05
    assert timed_send(n, notice(NotifyEvent.FAILED)) < 0.05  # queued behind a stuck one
    t0 = time.monotonic()
    assert n.drain(0.2) is False
    assert time.monotonic() - t0 < 1.0
    assert n.drain(15.0)
    lines = log_lines(log)
    assert len(lines) == 2 and all("no answer within 1.5s" in ln for ln in lines)


def test_command_gets_node_text_only_through_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # mntui started from inside a job's pane carries the job's tag; its commands must not
    monkeypatch.setenv("MNTUI_RUN", "demo/20261122-105313-8e89/n0")
    x = tmp_path / "X"
    hostile = (
        f"$(touch {x}) `touch {x}` \"dq\" 'sq' ; touch {x} && echo $HOME\n"
        "second line \\n %s \x1b[2J \udcfe end"
    )
    out = tmp_path / "out"
    out.mkdir()
    command = "; ".join(
        f"printf '%s' \"${{{var}-unset}}\" > {shlex.quote(str(out / var))}"
        for var in (
            "MNTUI_SUMMARY",
            "MNTUI_EVENT",
            "MNTUI_JOB",
            "MNTUI_RUN_ID",
            "MNTUI_REPORT",
            "MNTUI_RUN",
        )
    )
    n = Notifier(NotifyPolicy(command=command), tmp_path / "notify.log")
    assert timed_send(n, Notice(NotifyEvent.FAILED, "demo", "r1", hostile)) < 0.05
    assert n.drain(10.0)
    assert not x.exists()
    assert (out / "MNTUI_SUMMARY").read_bytes() == hostile.encode("utf-8", "surrogateescape")
    got = {p.name: p.read_text() for p in out.iterdir() if p.name != "MNTUI_SUMMARY"}
    assert got == {
        "MNTUI_EVENT": "failed",
        "MNTUI_JOB": "demo",
        "MNTUI_RUN_ID": "r1",
        "MNTUI_REPORT": "",
        "MNTUI_RUN": "unset",
    }
    assert log_lines(tmp_path / "notify.log") == []


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_hanging_command_is_killed_at_the_timeout(tmp_path: Path) -> None:
    pids, kid = tmp_path / "pid", tmp_path / "kid"
    command = (
        f"echo $$ > {shlex.quote(str(pids))}; sleep 300 & echo $! > {shlex.quote(str(kid))}; wait"
    )
    log = tmp_path / "notify.log"
    n = Notifier(NotifyPolicy(command=command, timeout=1.0), log)
    t0 = time.monotonic()
    assert timed_send(n, notice()) < 0.05
    started: list[int] = []
    try:
        wait_for(lambda: pids.exists() and kid.exists() and kid.read_text().strip(), 10.0)
        started = [int(pids.read_text()), int(kid.read_text())]
        assert n.drain(10.0)
        elapsed = time.monotonic() - t0
        assert 1.0 <= elapsed < 4.0
        wait_for(lambda: all(_gone(p) for p in started), 5.0, what="the command's processes gone")
        (line,) = log_lines(log)
        assert "command still running after 1s: killed" in line
    finally:
        for pid in started:  # only if the notifier failed to: by the PIDs this test started
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_failing_command_is_logged_with_its_last_words(tmp_path: Path) -> None:
    log = tmp_path / "notify.log"
    n = Notifier(NotifyPolicy(command="echo starting; echo 'curl: (6) no host' >&2; exit 3"), log)
    n.send(notice())
    assert n.drain(10.0)
    (line,) = log_lines(log)
    assert line.endswith(
        "teardown job demo run 20261122-105313-8e89: command exited 3: starting curl: (6) no host"
    )


def test_events_not_asked_for_are_dropped(hook: _HookServer, tmp_path: Path) -> None:
    n = Notifier(NotifyPolicy(webhook=hook.url, on=frozenset({NotifyEvent.FAILED})), None)
    for ev in NotifyEvent:
        n.send(notice(ev))
    assert n.drain(10.0)
    assert [b["event"] for b in hook.bodies()] == ["failed"]
    idle = Notifier(NotifyPolicy(on=ALL_EVENTS), tmp_path / "notify.log")  # nowhere to send
    idle.send(notice())
    assert idle.drain(0.0) and not (tmp_path / "notify.log").exists()


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://hooks.slack.com/services/" + SECRET, None),
        ("http://127.0.0.1:8080/hook", None),
        ("hooks.slack.com/services/" + SECRET, "only http:// and https://"),
        ("file:///etc/passwd", "only http:// and https://"),
        ("https:///services/" + SECRET, "no host"),
        ("https://h:99999/" + SECRET, "not a usable URL"),
        ("https://h/" + SECRET + " x", "spaces or control characters"),
    ],
)
def test_check_webhook_url(url: str, reason: str | None) -> None:
    got = check_webhook_url(url)
    if reason is None:
        assert got is None
    else:
        assert got is not None and reason in got and SECRET not in got and "\n" not in got
