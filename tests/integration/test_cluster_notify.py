"""Notifications of a run the cluster watches (issue 30, 37): the coordinator on the main
posts the webhook and runs the notify command when it decides, with this machine cut
off; what it could not post, this machine sends at its next `status`, once.

Real parts: sshd fake nodes, tmux, a light 2-node job, the sentinel bundle on the
nodes' bare python3, and a real HTTP server on loopback as the webhook. A webhook the
main cannot reach is a port nobody listens on while the coordinator posts (its host
down), listened on again by the time this machine looks.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path
from typing import Any

import pytest
from clusterwatch import a_rank, cut_off, launched, nothing_left, run_dir, watchers
from fakecluster import FakeCluster, wait_for
from helpers import Cfg
from hookserver import SECRET, serving
from test_cluster_watch import cluster_job

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)


def notices(fake: FakeCluster, job: str) -> list[dict[str, Any]]:
    """The coordinator's coord/notify.json on the main: each notice and its state."""
    try:
        data = json.loads((run_dir(fake, job, "node0") / "coord" / "notify.json").read_text())
    except (OSError, ValueError):
        return []
    return list(data.get("notices") or [])


def journaled(fake: FakeCluster, job: str, kind: str) -> list[dict[str, Any]]:
    path: Path = run_dir(fake, job, "node0") / "coord" / "journal.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [e for e in lines if e.get("kind") == kind]


def test_a_rank_dies_while_this_machine_is_cut_off_and_the_main_posts_the_webhook(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path
) -> None:
    """The webhook and the command, both from the main, before this machine is back
    (the command with the event in its environment, on the main node: its home its
    directory, not the job's tag, its output in the coordinator's log); this machine's
    `status` sends neither again."""
    job = "cn-posted"
    told = tmp_path / "told"
    with serving() as hook:
        command = (
            f'echo "$MNTUI_EVENT|$MNTUI_SUMMARY|$MNTUI_RUN_ID|$MNTUI_FAKE_NODE|$(pwd)|'
            f'${{MNTUI_RUN-untagged}}" >>{told}; echo said on the main'
        )
        notify = f"notify: {{webhook: '{hook.url}', command: '{command}'}}"
        path, port, wport = cluster_job(cfg, job, notify, torch=False)
        launched(cfg, path, job, fake)
        first = run_dir(fake, job, "node0").parent.name
        with cut_off(fake):
            os.kill(a_rank(job, "node1"), signal.SIGKILL)
            wait_for(hook.bodies, 30, what="the webhook's POST from the main")
            wait_for(told.exists, 30, what="the notify command run on the main")
            wait_for(lambda: not watchers(job, "coord"), 30, what="the coordinator's end")
            got = hook.bodies()
            assert len(got) == 1, got  # before this machine is back
        body = got[0]
        event, summary, run, where, cwd, tag = told.read_text().rstrip("\n").split("|")
        assert (event, summary, run, tag) == ("teardown", body["summary"], first, "untagged")
        assert where.endswith("/node0") and cwd == str(fake.node("node0").home), where
        ran = journaled(fake, job, "notify-command")
        assert [e["data"]["why"] for e in ran] == [None], ran  # exited 0
        log = (run_dir(fake, job, "node0") / "coord.log").read_text()
        assert "notify: command for teardown" in log and "notify: | said on the main" in log
        assert body["event"] == "teardown" and body["job"] == job, body
        assert body["summary"].startswith("node1 ") and body["text"] == body["summary"], body
        sent = notices(fake, job)
        assert [n["webhook"] for n in sent] == ["sent"], sent
        assert hook.url not in json.dumps(sent)  # the URL is a password: never on the board
        assert [e["data"]["webhook"] for e in journaled(fake, job, "notified")] == ["sent"]
        for _ in range(2):
            res = cfg.mntui(path, "status")
            assert "the coordinator tore the job down" in res.stdout, res.stdout
        assert len(hook.bodies()) == 1, hook.bodies()  # this machine posts nothing again
        assert len(told.read_text().splitlines()) == 1  # nor runs the command: run once
    nothing_left(fake, job, (port, wport))


def test_a_webhook_the_main_cannot_reach_is_sent_once_at_the_next_status(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "cn-missed"
    down = socket.socket()  # bound, never listening: a POST to it is refused
    down.bind(("127.0.0.1", 0))
    hook_port = down.getsockname()[1]
    url = f"http://127.0.0.1:{hook_port}/hooks/{SECRET}"
    try:
        path, port, wport = cluster_job(cfg, job, f"notify: {{webhook: '{url}'}}", torch=False)
        launched(cfg, path, job, fake)
        os.kill(a_rank(job, "node1"), signal.SIGKILL)
        failed = wait_for(
            lambda: [n for n in notices(fake, job) if n["webhook"] == "failed"],
            30,
            what="the coordinator's POST refused",
        )
        assert "connection refused" in failed[0]["why"] and SECRET not in failed[0]["why"]
        wait_for(lambda: not watchers(job, "coord"), 30, what="the coordinator's end")
    finally:
        down.close()
    with serving(hook_port) as hook:  # the webhook's host is back
        res = cfg.mntui(path, "status")
        assert "the coordinator tore the job down" in res.stdout, res.stdout
        got = hook.bodies()
        assert len(got) == 1 and got[0]["event"] == "teardown", got
        assert got[0]["summary"] == failed[0]["summary"], got  # the main's words
        for _ in range(2):  # once: a later look, or two at once, never sends it again
            cfg.mntui(path, "status")
        assert len(hook.bodies()) == 1, hook.bodies()
    nothing_left(fake, job, (port, wport))
