"""What a node's pane shows around a run (issue 29): nothing of a dead job's rate or
ports, log lines wrapped (or cut with a mark), and the nodes themselves before a launch.
The last two against real fake-sshd nodes and a real job; the log lines without nodes,
through the messages the poll posts."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

from fakecluster import FakeCluster, free_port, tagged
from helpers import Cfg, until
from recorded import h100_node

from mntui.sessions.config import load_config
from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.poll import NodeState
from mntui.tui.app.main import MntuiApp
from mntui.tui.app.messages import NodeSnap
from mntui.tui.app.widgets import NodePane


def drawn(pane: NodePane) -> list[str]:
    """The pane's rows as the terminal shows them."""
    return [pane.render_line(y).text.rstrip() for y in range(pane.size.height)]


def test_long_log_lines_wrap_and_a_cut_is_marked() -> None:
    """A line longer than the pane wraps at its spaces; one longer than WRAP_ROWS rows ends
    in `…`, never mid-word unmarked (it was cut at 200 characters, wherever that fell);
    and the newest line stays on screen however many long lines came before it."""
    app = MntuiApp(
        parse_config("job: wrap\nnodes: [node0, node1]\ncommand: x\n", "w.yaml"),
        poll=False,
    )
    words = [f"tok{i}{'x' * (i % 7)}" for i in range(120)]
    long = " ".join(words)  # ~1,000 characters: more than 3 rows of a 70-column pane
    medium = " ".join(words[:18])  # ~150 characters: 2-3 rows
    log = [*(f"{medium} #{i}" for i in range(30)), long, "the newest line"]

    async def go() -> None:
        async with app.run_test(size=(150, 40)) as pilot:
            snap = replace(h100_node("node0", 0)[0], gpu=None, new_output=b"")
            app.post_message(NodeSnap(snap))
            app.post_message(NodeSnap(replace(snap, new_output="\n".join(log).encode() + b"\n")))
            pane = app.query_one("#pane-node0", NodePane)
            await until(pilot, lambda: "the newest line" in drawn(pane), 5, "the newest line")
            rows = drawn(pane)
            width = pane.size.width
            assert all(len(r) <= width for r in rows)
            starts = [i for i, r in enumerate(rows) if r.startswith("tok0 ")]
            # the long line: whole words over its rows, the last row marked
            body = rows[starts[-1] : rows.index("the newest line")]
            assert len(body) == 3 and body[-1].endswith("…"), body
            shown = " ".join(body)[:-1].split()
            assert shown[:-1] == words[: len(shown) - 1], shown  # whole words, in order
            assert words[len(shown) - 1].startswith(shown[-1])  # the cut one, marked
            # a medium line wraps whole, unmarked: every word of the one before the long one
            before = " ".join(rows[starts[-2] : starts[-1]])
            assert before == f"{medium} #29", before

    asyncio.run(go())


STEPPER = """\
import os, socket, sys, time
rank, port, stop = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if rank == 0:
    s.bind(("127.0.0.1", port))
    s.listen()
i = 0
while not os.path.exists(stop):
    print("step", i, flush=True)
    i += 1
    time.sleep(0.1)
"""


def _stepper(job: str, port: int, tmp: Path) -> str:
    """The main listens on `port`; both print a step every 0.1 s until `tmp/stop` exists."""
    script = tmp / "stepper.py"
    script.write_text(STEPPER)
    return f"""
    job: {job}
    nodes: [node0, node1]
    master_port: {port}
    command: exec python3 {script} {{node_rank}} {port} {tmp / "stop"}
    launch: {{ready_timeout: 20}}
    watch: {{interval: 0.5}}
    kill: {{grace: 2}}
    """


def test_a_dead_nodes_pane_shows_no_rate_and_no_ports(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path
) -> None:
    """Once the job has ended, its panes show the last step, with no rate (the window
    emptying is no rate) and no listening port (the port scan runs every few polls, and
    kept a dead process's port next to `0 procs`)."""
    port, stop = free_port(), tmp_path / "stop"
    config = load_config(cfg.write(_stepper("tdead", port, tmp_path)))

    async def go() -> None:
        app = MntuiApp(config, launch_now=True)
        async with app.run_test(size=(160, 48)) as pilot:
            pane = app.query_one("#pane-node0", NodePane)
            try:
                await until(
                    pilot,
                    lambda: f":{port}" in drawn(pane)[0] and "/s" in drawn(pane)[0],
                    40,
                    "node0 running, with its rate and port",
                )
            except TimeoutError as exc:  # what it showed instead, and what the app said
                events = "\n".join(line.text for line in app.events.lines)
                raise AssertionError(f"{exc}: {drawn(pane)[0]!r}\n{events}") from None
            stop.touch()
            await until(
                pilot,
                lambda: all(
                    v.verdict is not None and v.verdict.state is NodeState.FINISHED
                    for v in app.views.values()
                ),
                20,
                "both nodes finished",
            )
            await pilot.pause()
            for node in ("node0", "node1"):
                title = drawn(app.query_one(f"#pane-{node}", NodePane))[0]
                assert "finished" in title and "step " in title, title
                assert "/s" not in title and f":{port}" not in title, title
                assert "0 procs" in title, title

    asyncio.run(go())


def test_panes_before_a_launch_show_each_node(fake: FakeCluster, cfg: Cfg, tmp_path: Path) -> None:
    """No run of the job yet: each pane says whether its node answers, its CPU load and
    its memory (they were empty until a launch); nothing is started on any node."""
    closed = free_port()
    extra = tmp_path / "extra_ssh_config"
    extra.write_text(
        f"Host deadnode\n    HostName 127.0.0.1\n    Port {closed}\n\n"
        f"Host *\nInclude {fake.ssh_config}\n"
    )
    path = cfg.write(
        "job: tprobe\nnodes: [node0, node1, deadnode]\ncommand: sleep 300\n",
        ssh=f"ssh: {{config: {extra}, connect_timeout: 3}}",
    )
    config = load_config(path)

    async def go() -> None:
        app = MntuiApp(config)
        assert app.record is None
        async with app.run_test(size=(200, 48)) as pilot:
            panes = {n: app.query_one(f"#pane-{n}", NodePane) for n in app.views}

            def shown() -> bool:
                return all("load " in "\n".join(drawn(panes[n])) for n in ("node0", "node1"))

            await until(pilot, shown, 20, "load and memory in the reachable nodes' panes")
            for node in ("node0", "node1"):
                rows = drawn(panes[node])
                assert "not-running" in rows[0] and "ms" in rows[0], rows[0]  # rtt
                host = next(r for r in rows if "load " in r)
                assert "mem " in host and "G" in host, host
            await until(
                pilot,
                lambda: "unreachable" in drawn(panes["deadnode"])[0],
                20,
                "deadnode unreachable",
            )
            rows = drawn(panes["deadnode"])
            assert "cannot connect" in "\n".join(rows), rows
            header = str(app.header.render())
            assert "run -  UNREACHABLE on deadnode" in header, header
            assert app.record is None and app.poller is None
        assert not tagged("tprobe", "node0") and not fake.node("node0").sessions()

    t0 = time.monotonic()
    asyncio.run(go())
    assert time.monotonic() - t0 < 60


def test_a_snapshot_of_a_node_without_a_pane_is_not_a_crash() -> None:
    """A spare a launch routed in (a quarantined node's place) runs the attempt but has no
    pane in an app built from the config: its snapshot once raised KeyError and ended the
    app (the review of issue 28's route-around)."""
    import asyncio

    from recorded import h100_node

    from mntui.sessions.config.jobconfig import parse_config
    from mntui.tui.app.main import MntuiApp
    from mntui.tui.app.messages import NodeSnap, PollDone

    app = MntuiApp(
        parse_config("job: sp\nnodes: [node0, node1]\ncommand: x\n", "sp.yaml"),
        poll=False,
    )

    async def go() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            snap, _ = h100_node("spare2", 1)
            app.post_message(NodeSnap(snap))
            app.post_message(PollDone({"spare2": snap}))
            await pilot.pause()
            assert set(app.views) == {"node0", "node1"}

    asyncio.run(go())
    assert app._exception is None, app._exception
