"""Issue 28 finding 1 on real sshd nodes: a user's `mntui kill` in the seconds between the
watchdog's teardown and the supervisor's `restarting` mark ends the chain. The
supervisor runs in this process so the kill lands in that window every time: the real
CLI kill is run from its step that comes right after the teardown (the quarantine scan).
"""

from __future__ import annotations

import subprocess
import threading

import pytest
from fakecluster import FakeCluster, tagged
from helpers import Cfg, free_port
from test_restart import chain

from mntui.sessions.config.jobconfig import load_config
from mntui.sessions.launch import ChainView, run_config
from mntui.sessions.recover import supervise
from mntui.sessions.recover.restart import AttemptEnd
from mntui.sessions.runs import RunStatus, latest


def failing_job(job: str, port: int) -> str:
    """The main listens (ready), rank 1 exits 3 after a moment: a teardown every time."""
    return f"""
    job: {job}
    nodes: [node0, node1]
    master_port: {port}
    command: >-
      exec python3 -c "import socket, sys, time; r = int(sys.argv[1]);
      s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);
      r == 0 and (s.bind(('127.0.0.1', {port})), s.listen());
      print('serving', flush=True); time.sleep(300 if r == 0 else 2); sys.exit(3)" {{node_rank}}
    launch: {{ready_timeout: 20}}
    kill: {{grace: 2}}
    watch: {{where: here, capture_budget: 0}}
    restart: {{max: 3, backoff: 0}}
    """


def test_a_kill_between_the_teardown_and_the_restart_mark_ends_the_chain(
    fake: FakeCluster, cfg: Cfg, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = "kwindow"
    path = cfg.write(failing_job(job, free_port()))
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 0, res.stdout + res.stderr
    record = latest(job)
    assert record is not None
    kills: list[subprocess.CompletedProcess[str]] = []
    seen: list[str] = []
    quarantine = supervise.Supervisor._quarantine

    def then_the_user_kills(self: supervise.Supervisor, end: AttemptEnd) -> None:
        quarantine(self, end)
        now = latest(job)
        seen.append(now.status.value if now is not None else "?")
        kills.append(cfg.mntui(path, "kill"))

    monkeypatch.setattr(supervise.Supervisor, "_quarantine", then_the_user_kills)
    said: list[str] = []
    sup = supervise.Supervisor(
        run_config(load_config(path), ChainView((record,))),
        record,
        on_event=lambda e: said.append(e.message),
    )
    watching = threading.Thread(target=sup.run, daemon=True)
    watching.start()
    watching.join(120)
    try:
        assert not watching.is_alive(), f"the supervisor goes on after the kill: {said}"
        assert seen == ["torn-down"], seen  # the kill came in the window
        assert kills and kills[0].returncode == 0, kills[0].stdout + kills[0].stderr
        runs = chain(job)
        assert [r.status for r in runs] == [RunStatus.TORN_DOWN], said
        assert runs[0].stopped_by_user and "no restart: the user killed the chain" in said
        assert not tagged(job)
    finally:
        if watching.is_alive():
            cfg.mntui(path, "kill")
