"""The command line without nodes: whole output lines from many threads, numeric flags,
`-c` on either side of the verb, node names, exit codes, and the shared cell formatters."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from recorded import h100_node

from mntui.sessions.config import load_config
from mntui.sessions.errors import ExitCode, UsageError
from mntui.sessions.poll import NodeState, Verdict
from mntui.tui.cli import args as cliargs

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "demo.yaml"


def mntui(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "1000"},  # argparse wraps help text, paths included
    )


# -- item 12: one writer, whole lines ---------------------------------------------------


HAMMER = """
import sys, threading
from mntui.sessions.events import Event, Phase
from mntui.tui.cli.output import printer

sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
show = printer(0.0)
start = threading.Barrier(16)

def node(i):
    start.wait()
    for k in range(1000):
        show(Event(f"node{i}", i, Phase.KILLING, f"msg {k}", at=0.06))

threads = [threading.Thread(target=node, args=(i,)) for i in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


def test_printer_from_many_threads_writes_whole_lines() -> None:
    """Kill events of 16 nodes printed at once into a pipe: every line whole (`mntui kill`
    printed `killing+  0.06s node1[1]  killing` and a blank line)."""
    res = subprocess.run(
        [sys.executable, "-c", HAMMER], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.split("\n")
    assert lines.pop() == ""  # the output ends with a newline
    whole = re.compile(r"\+  0\.06s node\d+\[\d+\]\s+killing\s+msg \d+\Z")
    broken = [line for line in lines if not whole.match(line)]
    assert not broken, f"{len(broken)} of {len(lines)} lines spliced, e.g. {broken[:3]}"
    assert len(lines) == 16 * 1000


# -- item 4 (CLI side): numeric flags ---------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("kill", "--grace", "nan"),
        ("kill", "--grace", "-100"),
        ("kill", "--grace", "inf"),
        ("kill", "--grace", "1e400"),
        ("kill", "--grace", "soon"),
        ("kill", "--grace", "86401"),
        ("doctor", "--timeout", "0"),
        ("doctor", "--timeout", "nan"),
        ("doctor", "--timeout", "-5"),
        ("demo", "--seconds", "0"),
        ("demo", "--seconds", "inf"),
        ("logs", "-n", "-1"),
        ("logs", "--lines", "1.5"),
        ("logs", "-n", "99999999999"),
    ],
)
def test_bad_numbers_are_one_line_and_exit_2(args: tuple[str, ...]) -> None:
    res = mntui("-c", str(DEMO), *args)
    assert res.returncode == ExitCode.USAGE, res.stdout + res.stderr
    assert res.stdout == ""
    err = res.stderr.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert args[1] in err, err  # names the flag


def test_good_numbers_parse() -> None:
    ap = cliargs.build_parser()
    assert ap.parse_args(["kill", "--grace", "0"]).grace == 0.0
    assert ap.parse_args(["kill", "--grace", "2.5"]).grace == 2.5
    assert ap.parse_args(["doctor", "--timeout", "90"]).timeout == 90.0
    assert ap.parse_args(["doctor"]).timeout == 60.0
    assert ap.parse_args(["demo"]).seconds == 8.0
    assert ap.parse_args(["logs", "-n", "0"]).lines == 0
    assert ap.parse_args(["logs"]).lines is None
    assert ap.parse_args(["kill"]).grace is None  # the config's


# -- item 13: -c before or after the verb ----------------------------------------------


def test_config_before_or_after_the_verb(tmp_path: Path) -> None:
    before = mntui("-c", str(DEMO), "launch", "--dry-run", cwd=tmp_path)
    after = mntui("launch", "--dry-run", "-c", str(DEMO), cwd=tmp_path)
    long_form = mntui("launch", "--config", str(DEMO), "--dry-run", cwd=tmp_path)
    for res in (before, after, long_form):
        assert res.returncode == 0, res.stderr
        assert "mntui-demo" in res.stdout and "node1" in res.stdout

    def plan(res: subprocess.CompletedProcess[str]) -> str:
        return re.sub(r"\d{8}-\d{6}-[0-9a-f]{4}", "RUN", res.stdout)  # run ids differ

    assert plan(before) == plan(after) == plan(long_form)


def test_config_after_the_verb_wins_and_is_kept_when_absent(tmp_path: Path) -> None:
    ap = cliargs.build_parser()
    assert ap.parse_args(["-c", "a.yaml", "kill"]).config == "a.yaml"
    assert ap.parse_args(["kill", "-c", "b.yaml"]).config == "b.yaml"
    assert ap.parse_args(["-c", "a.yaml", "kill", "-c", "b.yaml"]).config == "b.yaml"
    assert ap.parse_args(["status"]).config is None
    assert ap.parse_args([]).config is None


def test_help_names_the_config_it_would_use(tmp_path: Path) -> None:
    res = mntui("--help", cwd=tmp_path)
    assert res.returncode == 0
    assert "none here" in res.stdout and "mntui.yaml" in res.stdout
    (tmp_path / "mntui.yaml").write_text(DEMO.read_text())
    for args in (("--help",), ("launch", "--help"), ("kill", "--help")):
        res = mntui(*args, cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        assert f"found, {tmp_path / 'mntui.yaml'}" in res.stdout, res.stdout


# -- item 9.6: one node-name check, a UsageError -----------------------------------------


def test_unknown_node_is_a_usage_error_everywhere(tmp_path: Path) -> None:
    cfg = load_config(DEMO)
    assert cliargs.check_nodes(cfg, ["node1", "node0"]) == ["node1", "node0"]
    with pytest.raises(UsageError, match=r"unknown node 'nope'; nodes are node0, node1"):
        cliargs.check_nodes(cfg, ["node0", "nope"])
    for args in (("kill", "nope"), ("logs", "nope"), ("attach", "nope", "--print")):
        res = mntui(*args, "-c", str(DEMO), cwd=tmp_path)
        assert res.returncode == ExitCode.USAGE, (args, res.stderr)
        assert res.stderr.strip() == "mntui: unknown node 'nope'; nodes are node0, node1"


# -- item 9.3: exit codes are ExitCode ------------------------------------------------


def test_status_exit_codes_are_exit_code_members() -> None:
    from mntui.tui.cli.views import overall_exit

    def verdicts(*states: NodeState) -> dict[str, Verdict]:
        return {f"n{i}": Verdict(s, "") for i, s in enumerate(states)}

    cases = [
        ((NodeState.RUNNING, NodeState.RUNNING), ExitCode.OK),
        ((NodeState.RUNNING, NodeState.FROZEN), ExitCode.FAILED),
        ((NodeState.NOT_RUNNING, NodeState.NOT_RUNNING), ExitCode.NOT_RUNNING),
        ((NodeState.FINISHED, NodeState.NOT_RUNNING), ExitCode.OK),
    ]
    for states, code in cases:
        got = overall_exit(verdicts(*states))
        assert type(got) is ExitCode and got is code


def test_an_ended_runs_exit_code_is_its_ends_whatever_its_nodes_show() -> None:
    """Issue 38: a torn-down run exited 3 (its nodes not running) and a gave-up one 1
    (its panes' exit codes): one rule now, by the run's end."""
    from mntui.sessions.runs import RunStatus
    from mntui.tui.cli.views import overall_exit

    gone = {"n0": Verdict(NodeState.NOT_RUNNING, ""), "n1": Verdict(NodeState.NOT_RUNNING, "")}
    failed = {"n0": Verdict(NodeState.FAILED, "exit 1"), "n1": Verdict(NodeState.FINISHED, "")}
    for nodes in (gone, failed):
        assert overall_exit(nodes, RunStatus.TORN_DOWN) is ExitCode.FAILED
        assert overall_exit(nodes, RunStatus.GAVE_UP) is ExitCode.FAILED
        assert overall_exit(nodes, RunStatus.FAILED) is ExitCode.FAILED
        assert overall_exit(nodes, RunStatus.KILLED) is ExitCode.NOT_RUNNING
        assert overall_exit(nodes, RunStatus.ABORTED) is ExitCode.NOT_RUNNING
    assert overall_exit(gone, RunStatus.FINISHED) is ExitCode.OK
    assert overall_exit(failed, RunStatus.RUNNING) is ExitCode.FAILED  # live: its nodes
    assert overall_exit(gone, RunStatus.RESTARTING) is ExitCode.NOT_RUNNING


# -- item 9.6: one set of cell formatters, without Textual ---------------------------------


def test_cells_are_shared_and_load_without_textual() -> None:
    code = (
        "import sys, mntui.tui.cells, mntui.tui.cli.views, mntui.tui.cli.statusrows\n"
        "assert mntui.tui.cli.views.statusrows.cells is mntui.tui.cells\n"
        "bad = [k for k in sys.modules if k.split('.')[0] in ('textual', 'rich')]\n"
        "assert not bad, bad[:3]\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_status_and_app_show_the_same_cells() -> None:
    from mntui.tui import cells
    from mntui.tui.app.render import table_row
    from mntui.tui.cli.views import status_table

    snap, _ = h100_node("g1", 0, foreign=True)
    snap = replace(snap, output_age=4000.0)
    row = [str(c) for c in table_row("g1", 0, snap, Verdict(NodeState.RUNNING, "ok"))]
    util, mem, age, rtt = row[3:]
    assert (util, mem, age, rtt) == ("8x 99%", "387/637G", "1.1h", "4ms")
    assert cells.gpu_summary(snap) == f"{util} {mem} 1 foreign"
    from mntui.sessions.runs import NodeRecord, RunRecord

    record = RunRecord("j", "20260101-000000-abcd", "c.yaml", "127.0.0.1", 29500, [])
    record.nodes.append(NodeRecord("g1", "h", 0, "s", "t", "r"))
    table = status_table(record, {"g1": snap}, {"g1": Verdict(NodeState.RUNNING, "ok")})
    assert f"{util} {mem} 1 foreign" in table and f" {age} " in table and f" {rtt} " in table


def test_status_fits_its_table_to_a_narrow_terminal() -> None:
    """Issue 38, item 5: `status` was ~150 columns at COLUMNS=80. On a terminal the
    least useful columns go and the free text is cut; in a pipe nothing is."""
    from mntui.tui.cli.statusrows import HEAD, aligned

    row = {"NODE": "g369", "RANK": "0", "STATE": "running", "GPUS": "8x 98% 71GiB",
           "PROCS": "9", "PORTS": "29500", "OUTPUT": "2s", "STEP": "12345 @3.2/s",
           "RTT": "21ms", "SENTINEL": "connected", "DETAIL": "9 process(es), " + "x" * 80}  # fmt: skip
    head = (*HEAD, "SENTINEL", "DETAIL")
    whole = aligned(head, [row])
    assert max(len(line) for line in whole) > 150 and whole[1].endswith("x" * 80)
    narrow = aligned(head, [row], 80)
    assert max(len(line) for line in narrow) <= 80, narrow
    kept = narrow[0].split()
    assert kept[:4] == ["NODE", "RANK", "STATE", "GPUS"] and "STEP" in kept and "RTT" not in kept
    assert narrow[1].startswith("g369") and narrow[1].endswith("…")
