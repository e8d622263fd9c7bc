"""The app shows a restart chain: when the coordinator restarts the job on the cluster,
the app moves on to the new attempt by itself (its records synced as `status` syncs
them), its panes showing the new attempt's output."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from fakecluster import FakeCluster
from helpers import Cfg, free_port

from mntui.sessions.config import load_config
from mntui.sessions.runs import latest
from mntui.tui.app.main import MntuiApp


def chain_job(cfg: Cfg, job: str) -> Path:
    """A 2-node job the cluster watches whose rank 1 exits 3 in attempt 1: the
    coordinator restarts it once (restart.max 1), and attempt 2 serves on."""
    port = free_port()
    return cfg.write(f"""
    job: {job}
    nodes: [node0, node1]
    master_port: {port}
    command: >-
      echo "attempt $MNTUI_RESTART_COUNT on {{node}}";
      if [ "$MNTUI_RESTART_COUNT" = 0 ] && [ {{node_rank}} = 1 ]; then sleep 2; exit 3; fi;
      exec python3 -c "import socket, sys, time; s = socket.socket();
      s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);
      sys.argv[1] == '0' and (s.bind(('127.0.0.1', {port})), s.listen()); time.sleep(300)"
      {{node_rank}}
    launch: {{ready_timeout: 20}}
    restart: {{max: 1, backoff: 1}}
    kill: {{grace: 2}}
    watch: {{where: cluster, port: {free_port()}}}
    """)


def test_the_app_follows_the_next_attempt(fake: FakeCluster, cfg: Cfg) -> None:
    path = chain_job(cfg, "tchain")
    assert cfg.mntui(str(path), "launch", "--no-ui", watch=True).returncode == 0
    first = latest("tchain")
    assert first is not None

    async def run() -> tuple[str, list[str]]:
        app = MntuiApp(load_config(path), record=first)
        async with app.run_test() as pilot:
            deadline = time.monotonic() + 90
            while (
                app.record is None
                or app.record.run_id == first.run_id
                or not any("attempt 1 on node1" in ln for ln in app.views["node1"].log or [])
            ):
                assert time.monotonic() < deadline, "the app stayed on the first attempt"
                await pilot.pause(0.2)
            shown: Any = app.record
            return shown.run_id, list(app.views["node1"].log or [])

    run_id, lines = asyncio.run(run())
    newest = latest("tchain")
    assert newest is not None and run_id == newest.run_id and newest.attempt == 1
    assert not any("attempt 0" in ln for ln in lines)  # the old attempt's lines are gone
    assert cfg.mntui(str(path), "kill").returncode == 0


def test_an_app_opened_after_a_restart_says_what_happened_while_away(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """Issue 38, item 3: the coordinator restarted the job while no app or `status`
    looked; the app opened then says, in its event log, what `status` would: the attempt
    that ended, its cause and the restart policy's word, and shows the new attempt."""
    import json

    path = chain_job(cfg, "taway")
    assert cfg.mntui(str(path), "launch", "--no-ui", watch=True).returncode == 0
    first = latest("taway")
    assert first is not None
    chain = fake.node("node0").run_dirs("taway")[0] / "coord" / "chain.json"

    def restarted() -> bool:
        try:
            attempts = json.loads(chain.read_text())["attempts"]
        except (OSError, ValueError, KeyError):
            return False
        return len(attempts) == 2 and attempts[0].get("end") is not None

    deadline = time.monotonic() + 90
    while not restarted():  # the cluster alone: nothing here looks meanwhile
        assert time.monotonic() < deadline, "no restart by the coordinator"
        time.sleep(0.2)

    async def run() -> list[str]:
        app = MntuiApp(load_config(path))  # opened on the record this machine has
        async with app.run_test() as pilot:
            end = time.monotonic() + 30
            while not any("then restart" in ln.text for ln in app.events.lines):
                assert time.monotonic() < end, [ln.text for ln in app.events.lines]
                await pilot.pause(0.2)
            while app.record is None or app.record.attempt != 1:
                assert time.monotonic() < end, "the app stayed on attempt 1"
                await pilot.pause(0.2)
            return [ln.text for ln in app.events.lines]

    said = asyncio.run(run())
    ended = next(ln for ln in said if "then restart" in ln)
    assert ended.startswith("attempt 1 (") and "node1" in ended, said
    assert cfg.mntui(str(path), "kill").returncode == 0
