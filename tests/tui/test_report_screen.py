"""The failure report in the app (`R`) and `mntui report`: an ended run's saved report
(saved at the first look after the coordinator's end, watch/mirror.py), shown as
written and never rewritten; a live run's snapshot, shown and never saved; an unwatched
run's end, no report."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from typing import Any

from clusterwatch import run_dir
from fakecluster import FakeCluster, free_port, tagged, wait_for
from helpers import REPO, Cfg, listener_job, showing, tagged_anywhere, until

from mntui.sessions.config import load_config
from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.poll import NodeState
from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus, latest, load_run
from mntui.tui.app.main import MntuiApp
from mntui.tui.app.render import overall_state
from mntui.tui.app.widgets import ReportScreen

HEADLINE = "g375 rank 1 failed first at 03:12:07: CUDA out of memory [/] (train.py:88)"


def test_r_shows_the_saved_report_literally() -> None:
    cfg = parse_config("job: rscreen\nnodes: [{name: a, host: localhost}]\ncommand: x\n")
    rec = RunRecord(
        "rscreen", "20261122-031200-abcd", "cfg.yaml", "127.0.0.1", 29500,
        [NodeRecord("a", "localhost", 0, "s", "t", "d")], status=RunStatus.TORN_DOWN,
    )  # fmt: skip
    rec.create()
    (rec.dir / "report.txt").write_text(f"{HEADLINE}\n\ntimeline:\n")
    (rec.dir / "report.json").write_text(json.dumps({"headline": HEADLINE}))

    async def run() -> str:
        app = MntuiApp(cfg, record=rec, poll=False)
        async with app.run_test() as pilot:
            await pilot.press("R")
            deadline = time.monotonic() + 20
            while not isinstance(app.screen, ReportScreen):
                assert time.monotonic() < deadline, "no report screen"
                await pilot.pause(0.05)
            screen: Any = app.screen
            return str(screen.text)

    assert asyncio.run(run()).splitlines()[0] == HEADLINE


# -- issue 29: a saved report is the run's conclusion; a live snapshot never becomes one --


def _saved(rec: RunRecord) -> tuple[bytes, bytes, str | None]:
    """What a report, once written, must keep: its two files and the record's cause."""
    again = load_run(rec.job, rec.run_id)
    assert again is not None
    return (
        (rec.dir / "report.json").read_bytes(),
        (rec.dir / "report.txt").read_bytes(),
        again.cause,
    )


def decision(fake: FakeCluster, job: str) -> dict[str, Any] | None:
    """The coordinator's decision.json on the main, once complete (its `ended_at`)."""
    try:
        d = json.loads((run_dir(fake, job, "node0") / "coord" / "decision.json").read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and "ended_at" in d else None


async def _report_screen(app: MntuiApp, pilot: Any) -> tuple[str, str]:
    """`R`, and the (title, text) of the screen it opens."""
    await pilot.press("R")
    await until(
        pilot,
        lambda: showing(app, ReportScreen, "#report-text"),
        60,
        "the report screen",
    )
    screen: Any = app.screen
    shown = (str(screen.title_text), str(screen.text))
    await pilot.press("escape")
    await until(pilot, lambda: app.busy is None, 10, "the report done")
    return shown


def test_an_unwatched_runs_end_has_no_report_only_what_its_nodes_hold(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """Nothing watched the run: its end is shown from its nodes, never saved as its
    report, and the record keeps no cause."""
    path = cfg.write("""
    job: rpending
    nodes: [node0, node1]
    command: 'echo "up {node}"; sleep 1; exit 3'
    launch: {ready: log, ready_pattern: up, ready_timeout: 20}
    """)
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    rec = latest("rpending")
    assert rec is not None and rec.status.is_live
    wait_for(lambda: not tagged("rpending"), 20, what="the job ended by itself")
    res = cfg.mntui(path, "report")
    assert "unwatched: no report is saved of it" in res.stderr, res
    assert "exit code 3" in res.stdout, res.stdout
    assert not (rec.dir / "report.txt").exists() and load_run("rpending", rec.run_id).cause is None  # type: ignore[union-attr]


def test_r_on_a_live_run_saves_nothing_then_a_kill_leaves_no_cause(
    fake: FakeCluster, cfg: Cfg
) -> None:
    path = cfg.write(listener_job("rlive", free_port()))
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    rec = latest("rlive")
    assert rec is not None

    async def go() -> tuple[str, str]:
        app = MntuiApp(load_config(path))
        async with app.run_test(size=(160, 48)) as pilot:
            return await _report_screen(app, pilot)

    title, text = asyncio.run(go())
    assert title.startswith("live report (a snapshot, not saved): rlive run "), title
    assert "node0" in text and "node1" in text, text
    assert cfg.mntui(path, "report").returncode == 0  # the CLI's snapshot: not kept either
    assert not (rec.dir / "report.txt").exists() and not (rec.dir / "report.json").exists()
    assert cfg.mntui(path, "kill").returncode == 0
    assert load_run("rlive", rec.run_id).cause is None  # type: ignore[union-attr]


def test_a_crash_keeps_its_report_and_the_header_names_its_cause(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """The app holds the record it launched (running) while the coordinator ends the
    run; the first look after the end (`mntui report`) saves its report; `R` and
    `mntui report` after that change nothing."""
    work = cfg.tmp / "work"
    work.mkdir()
    shutil.copy(REPO / "tests" / "jobs" / "faulty_train.py", work)
    path = cfg.write(f"""
    job: rcrash
    nodes: [node0, node1]
    workdir: {work}
    master_port: {free_port()}
    env: {{OMP_NUM_THREADS: "1"}}
    command: >-
      exec python3 -m torch.distributed.run --nnodes={{nnodes}} --node_rank={{node_rank}}
      --nproc_per_node=1 --master_addr={{master_addr}} --master_port={{master_port}}
      faulty_train.py --fail-rank 1 --fail-step 3 --how exit3
    launch: {{ready_timeout: 90}}
    kill: {{grace: 3}}
    watch: {{where: cluster, port: {free_port()}}}
    """)
    assert cfg.mntui(path, "launch", "--no-ui", watch=True).returncode == 0
    held = latest("rcrash")  # as the app holds it: launched, running
    assert held is not None and held.status.is_live
    wait_for(lambda: decision(fake, "rcrash"), 90, interval=0.2, what="the coordinator's end")
    wait_for(lambda: not tagged_anywhere("rcrash"), 30, what="the job gone")
    first = cfg.mntui(path, "report")  # the first look after the end: saved
    assert (held.dir / "report.json").exists(), first.stdout + first.stderr
    before = _saved(held)
    report = json.loads(before[0])
    assert report["cause_node"] == "node1", report["headline"]
    for _ in range(2):
        assert cfg.mntui(path, "report").stdout.startswith(before[1].decode())

    async def go() -> tuple[str, str]:
        app = MntuiApp(load_config(path), record=held)
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: all(v.verdict for v in app.views.values()), 30, "a poll")
            app.refresh_header()
            header = str(app.header.render())
            return (await _report_screen(app, pilot))[1], header

    text, header = asyncio.run(go())
    assert _saved(held) == before
    assert text == before[1].decode()
    assert " on node1" in header and " on node0" not in header, header


def test_the_header_names_the_node_the_report_blames(fake: FakeCluster, cfg: Cfg) -> None:
    """Both nodes end failed, node1 first (`on_failure: notify`: nothing kills node0
    before its own exit): the header leads with node1, as the report does, not with
    node0 for being listed first (the main)."""
    flag = cfg.tmp / "node1-failed"  # node0 exits once node1 has: no race with the start
    path = cfg.write(f"""
    job: rblame
    nodes: [node0, node1]
    command: >-
      echo "up {{node}}"; if [ {{node_rank}} = 1 ]; then sleep 1;
      echo "RuntimeError: injected crash at step 30 (train.py:23)"; touch {flag}; exit 3; fi;
      while [ ! -e {flag} ]; do sleep 0.1; done; sleep 1; exit 1
    launch: {{ready: log, ready_pattern: up, ready_timeout: 20}}
    watch: {{where: cluster, port: {free_port()}, on_failure: notify}}
    """)
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    rec = latest("rblame")
    assert rec is not None
    wait_for(lambda: decision(fake, "rblame"), 40, what="the coordinator's end")
    assert cfg.mntui(path, "report").returncode == 0  # the first look after the end: saved
    wait_for(lambda: load_run("rblame", rec.run_id).cause, 10, what="the report")  # type: ignore[union-attr]
    got = json.loads((rec.dir / "report.json").read_text())
    assert got["cause_node"] == "node1", got["headline"]

    async def go() -> None:
        app = MntuiApp(load_config(path))
        async with app.run_test(size=(160, 48)) as pilot:
            failed = lambda: all(  # noqa: E731
                v.verdict and v.verdict.state is NodeState.FAILED for v in app.views.values()
            )
            await until(pilot, failed, 30, "both nodes failed")
            app.refresh_header()
            assert "FAILED on node1 (+1)" in str(app.header.render())

    asyncio.run(go())


def test_a_new_launch_never_shows_the_previous_runs_failure(fake: FakeCluster, cfg: Cfg) -> None:
    """The first run fails on both nodes; the app launches the next over it. Its header and
    panes say the new run's state from its first frame, never the old run's FAILED."""
    flag = cfg.tmp / "second"
    path = cfg.write(f"""
    job: rnext
    nodes: [node0, node1]
    command: 'echo "up {{node}}"; test -e {flag} && exec sleep 300; sleep 1; exit 3'
    launch: {{ready: log, ready_pattern: up, ready_timeout: 20}}
    kill: {{grace: 2}}
    """)
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    old = latest("rnext")
    assert old is not None
    wait_for(lambda: not tagged("rnext"), 20, what="the first run failed")
    flag.touch()
    shown: list[tuple[str, str]] = []  # (run on screen, overall state) after each attach

    async def go() -> None:
        app = MntuiApp(load_config(path))
        attach = app.attach_run

        def attach_and_look(record: RunRecord) -> None:
            attach(record)
            shown.append((record.run_id, overall_state(list(app.views.values()), True)))

        app.attach_run = attach_and_look  # type: ignore[method-assign]
        async with app.run_test(size=(160, 48)) as pilot:
            header = lambda: str(app.header.render())  # noqa: E731
            await until(pilot, lambda: "FAILED on" in header(), 30, "the first run's failure")
            await pilot.press("l")
            await until(
                pilot,
                lambda: app.record is not None and app.record.run_id != old.run_id,
                40,
                "the new run attached",
            )
            assert "FAILED" not in header(), header()
            await until(pilot, lambda: "running 2/2" in header(), 30, "the new run running")

    asyncio.run(go())
    assert shown and shown[-1][0] != old.run_id
    assert "FAILED" not in shown[-1][1], shown
    assert cfg.mntui(path, "kill").returncode == 0
