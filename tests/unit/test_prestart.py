"""The head start of a cold `status` or `kill` (tui/cli/prestart.py, sessions/ssh/early.py):
which command lines start the main's ssh before the CLI loads, and that the command takes
only the very connection it would have made. The status and the kill over it, on real
sshd nodes: tests/integration/test_cold_status.py, test_cluster_watch.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mntui.sessions.config import load_config
from mntui.sessions.errors import state_dir
from mntui.sessions.ssh import early
from mntui.tui.cli import prestart
from mntui.tui.cli.quickstatus import recall, remember

RUN = "20261126-060952-b89c"


@pytest.fixture(autouse=True)
def _nothing_left() -> Iterator[None]:
    yield
    early.close_all()  # what a test started and did not take: stopped, reaped


def job_file(tmp_path: Path) -> Path:
    """A config whose ssh reaches nothing (port 1 refuses): a real ssh, started and
    stopped, never a connection."""
    (tmp_path / "ssh_config").write_text("Host *\n  HostName 127.0.0.1\n  Port 1\n")
    path = tmp_path / "job.yaml"
    path.write_text(
        "job: ps\nnodes: [g1, g2]\ncommand: python3 train.py\n"
        "ssh: {config: ssh_config, connect_timeout: 7}\n"
    )
    remember(path, load_config(path))
    return path


def record(host: str = "g1", watch_port: int | None = 4242) -> None:
    run_dir = state_dir() / "ps" / RUN
    run_dir.mkdir(parents=True, exist_ok=True)
    node = {"node": "g1", "host": host, "rank": 0, "session": "s", "tag": "t", "run_dir": "d"}
    (run_dir / "run.json").write_text(json.dumps({"nodes": [node], "watch_port": watch_port}))
    (state_dir() / "ps" / "latest").write_text(RUN + "\n")


@pytest.mark.parametrize(
    ("argv", "form"),
    [
        (["status"], ("status", None, frozenset())),
        (["-c", "a.yaml", "status", "--json"], ("status", "a.yaml", frozenset({"--json"}))),
        (["status", "--config=b.yaml", "--json"], ("status", "b.yaml", frozenset({"--json"}))),
        (["-c", "a.yaml", "kill", "-c", "b.yaml"], ("kill", "b.yaml", frozenset())),  # argparse's
        (["kill", "--grace", "3", "-v"], ("kill", None, frozenset({"-v"}))),
        (["status", "--watch"], None),  # refreshes: not one connection
        (["status", "--run", RUN], None),  # another run than the latest
        (["status", "--js"], None),  # an abbreviation: no guess
        (["kill", "g1"], None),  # a partial kill goes node by node
        (["logs"], None),
        (["-c"], None),
        ([], None),
    ],
)
def test_only_the_plain_forms_get_a_head_start(argv: list[str], form: object) -> None:
    assert prestart.plain_form(argv) == form


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["status", "--json"],
        ["--config=b.yaml", "status"],
        ["-c", "a.yaml", "status", "--json", "--json"],
        ["status", "-c", "a.yaml", "--json"],
        ["-c", "x", "status", "-c", "y"],
    ],
)
def test_a_plain_status_is_read_as_the_grammar_reads_it(argv: list[str]) -> None:
    """The quick status answers before argparse is loaded (quickstatus.answer): what it
    makes of the words must be what the grammar would."""
    from mntui.tui.cli.args import build_parser

    form = prestart.plain_form(argv)
    args = build_parser().parse_args(argv)
    assert form is not None and (args.cmd, args.run, args.watch) == (form[0], None, False)
    assert (args.config, args.json) == (form[1], "--json" in form[2])


def test_a_status_of_a_cluster_run_starts_the_mains_ssh_and_takes_it_once(
    tmp_path: Path,
) -> None:
    path = job_file(tmp_path)
    record()
    prestart.prestart(["-c", str(path), "status", "--json"])
    memo = recall(path)
    assert memo is not None
    assert early.take("g1", list(memo.ssh[:-1])) is None  # another argv: not this one
    node = early.take("g1", memo.ssh)
    assert node is not None and node.host == "g1"
    node.close()
    assert early.take("g1", memo.ssh) is None  # taken once


def test_the_head_start_goes_to_the_main_the_record_names() -> None:
    """prestart reads the record raw (no records module): its main must be RunRecord.main,
    the rank-0 node wherever the record lists it."""
    from mntui.sessions.runs import NodeRecord, RunRecord, latest

    nodes = [NodeRecord(n, h, r, f"ps-{n}", f"ps/{RUN}/{n}", f".mntui/runs/ps/{RUN}/{n}")
             for n, h, r in (("g2", "h2", 1), ("g1", "h1", 0))]  # fmt: skip
    rec = RunRecord("ps", RUN, "cfg.yaml", "h1", 1, nodes)
    rec.watch_port = 4242
    rec.create()
    saved = latest("ps")
    assert saved is not None and (saved.main.node, saved.main.host) == ("g1", "h1")
    assert prestart.nodes_of("ps") == [("g1", "h1"), ("g2", "h2")]


def test_a_kill_also_starts_its_sweep_to_every_node(tmp_path: Path) -> None:
    """The final sweep (launch/userkill.py) goes to every node of the run after the
    coordinator's answer: its connections start with the request's, one per node."""
    path = job_file(tmp_path)
    record()
    prestart.prestart(["-c", str(path), "kill"])
    memo = recall(path)
    assert memo is not None
    assert sorted(k[:2] for k in early._started) == [("", "g1"), (early.SWEEP, "g1")]
    request, sweep = early.take("g1", memo.ssh), early.take("g1", memo.ssh, early.SWEEP)
    assert request is not None and sweep is not None and request is not sweep
    prestart.prestart(["-c", str(path), "status"])
    assert early.take("g1", memo.ssh, early.SWEEP) is None  # a status sweeps nothing


@pytest.mark.parametrize("case", ["no-watch", "local-main", "edited", "no-record", "bad-run"])
def test_nothing_starts_when_the_command_would_not_use_it(tmp_path: Path, case: str) -> None:
    path = job_file(tmp_path)
    record(host="localhost" if case == "local-main" else "g1",
           watch_port=None if case == "no-watch" else 4242)  # fmt: skip
    if case == "edited":
        path.write_text(path.read_text() + "\n")  # the memo is another file's now
    if case == "no-record":
        (state_dir() / "ps" / "latest").unlink()
    if case == "bad-run":
        (state_dir() / "ps" / "latest").write_text("../../etc\n")
    prestart.prestart(["-c", str(path), "kill"])
    assert early._started == {}


def test_the_memo_rule_is_one(tmp_path: Path) -> None:
    """quickstatus.recall is prestart.memo_entry's: a memo one takes, the other takes."""
    path = job_file(tmp_path)
    entry = prestart.memo_entry(path)
    memo = recall(path)
    assert entry is not None and memo is not None
    assert (entry["job"], tuple(entry["ssh"])) == (memo.job, memo.ssh)


def test_one_started_and_not_taken_is_stopped_at_exit(tmp_path: Path) -> None:
    """The process that started it and never asked (the kill went another way) leaves
    no ssh behind: stopped by the exit handler, not left to the main's sshd. Here the
    "main" listens and never answers, so an ssh left alone would wait for its banner."""
    path = job_file(tmp_path)
    record()
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)
    port = mute.getsockname()[1]
    (tmp_path / "ssh_config").write_text(f"Host *\n  HostName 127.0.0.1\n  Port {port}\n")
    code = (
        "import os, sys\n"
        "from mntui.sessions.ssh import early\n"
        "from mntui.tui.cli import prestart\n"
        f"prestart.prestart(['-c', {str(path)!r}, 'status'])\n"
        "node = next(iter(early._started.values()))\n"
        "print(node._proc.pid, flush=True)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    pid = int(res.stdout.split()[0])
    stat = Path(f"/proc/{pid}/stat")
    try:
        assert not stat.exists() or stat.read_text().split(") ")[-1][:1] in "ZX"  # stopped
    finally:
        mute.close()
