"""Stacks the cluster's sentinels take before a hang's kill: the node's side (run the
launch's script within a budget and a size, save it with its nonce) and the manager's
(read the saved file strictly: a hostile one is counted as malformed, never a crash of
the report). Real processes, no py-spy: the script stands in for the capture's output."""

from __future__ import annotations

import base64
import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from test_report import PYSPY

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.launch.clusterwatch import watch_config
from mntui.sessions.launch.stackscript import stack_files
from mntui.sessions.node.board.teardown import FROZEN_BUDGET, _can_give, stacks_first
from mntui.sessions.node.rules.judging import NodeTrigger
from mntui.sessions.node.sentinel import stackcap
from mntui.sessions.node.sentinel.stackcap import Ask, ask_of, run_bounded, status_line, take
from mntui.sessions.node.wire.watchcfg import BadWatchFile, WatchConfig, parse, to_json
from mntui.sessions.poll import NodeState
from mntui.sessions.procs import run_pattern
from mntui.sessions.report.evidence import NodeEvidence, evidence_script, parse_evidence
from mntui.sessions.report.failure import Ending, build, render, summarize_node
from mntui.sessions.report.nodestacks import at_teardown, read_saved
from mntui.sessions.runs import NodeRecord, RunRecord

NONCE = "0123abcd0123abcd"
RUN = "20250101-000000-abcd"
NODES = frozenset({"n0", "n1"})
ASK = Ask("n1", "frozen", "stopped: pid 7", 1.7e9, 2.0)


def b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def capture_out(nonce: str = NONCE) -> str:
    return "\n".join([
        f"@{nonce}RANK 10 0 S",
        f"@{nonce}RANK 11 1 T",
        f"@{nonce}STACK 10 0 {b64(PYSPY)} ",
        f"@{nonce}STACK 11 0 {b64(PYSPY)} ",
    ]) + "\n"  # fmt: skip


def saved(out: str, **over: object) -> bytes:
    data = {"v": 1, "run": RUN, "nonce": NONCE, "decision": ASK.to_json(), "taken_at": 1.7e9,
            "seconds": 0.1, "error": None, "out": out, **over}  # fmt: skip
    return json.dumps(data).encode()


def test_the_sentinel_runs_the_script_saves_it_and_the_manager_reads_it_back(
    tmp_path: Path,
) -> None:
    script = tmp_path / stackcap.SCRIPT
    script.write_text(f'printf \'%s|%s\' "$1" "$2" >"$2/args"\ncat <<\'EOF\'\n{capture_out()}EOF\n')
    said = take(str(script), f"MNTUI_RUN=j/{RUN}/n1", str(tmp_path), NONCE, RUN, ASK)
    assert said["ranks"] == 2 and said["stacks"] == 2 and "error" not in said, said
    # the pattern the manager's own capture and kill use (procs.run_pattern)
    assert (tmp_path / "args").read_text() == f"{run_pattern(f'j/{RUN}/n1')}|{tmp_path}"
    raw = (tmp_path / stackcap.FILE).read_bytes()
    got = read_saved("n1", raw, RUN, NODES)
    assert [s.rank for s in got.stacks.stacks] == [0, 1] and got.stacks.malformed == 0
    assert got.decision == ("n1", NodeState.FROZEN, "stopped: pid 7")
    assert got.stacks.stacks[1].summary.startswith("stopped (state T), waiting in `all_reduce`")
    assert status_line({"n0": {"stacks": said}, "n1": {"stacks": said}}) == (
        "stacks of 4 rank(s) were taken on the nodes at the teardown (`mntui report`)"
    )


def test_a_capture_past_its_budget_or_size_is_cut_and_its_children_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "child"
    script = f"sleep 30 & echo $! >{pidfile}; echo '@{NONCE}RANK 1 0 S'; wait\n"
    t0 = time.monotonic()
    out, error = run_bounded(["sh", "-c", script], 0.5, 1 << 20)
    assert time.monotonic() - t0 < 5 and error is not None and "budget" in error
    assert out.startswith(f"@{NONCE}RANK".encode())
    child = Path(f"/proc/{pidfile.read_text().strip()}/stat")
    deadline = time.monotonic() + 10  # SIGKILL's delivery is not instant
    while not dead(child) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert dead(child)
    out, error = run_bounded(["sh", "-c", "yes xxxxxxxx"], 5, 1000)
    assert len(out) == 1000 and error is not None and "more than 1000 bytes" in error
    said = take(str(tmp_path / "missing.sh"), "MNTUI_RUN=j/r/n1", str(tmp_path), NONCE, RUN, ASK)
    assert said["ranks"] == 0 and said["error"].startswith("the capture exited")  # the kill goes on
    saved_file = json.loads((tmp_path / stackcap.FILE).read_text())
    assert saved_file["nonce"] == NONCE and saved_file["decision"]["node"] == "n1"


def dead(stat: Path) -> bool:
    try:
        return ") Z " in stat.read_text()
    except FileNotFoundError:
        return True


@pytest.mark.parametrize(
    "v",
    [None, [], {"node": ["n1"], "state": "frozen", "why": "", "at": 1, "budget": 1},
     {"node": "n9", "state": "frozen", "why": "", "at": 1, "budget": 1},
     {"node": "n1", "state": "failed", "why": "", "at": 1, "budget": 1},
     {"node": "n1", "state": "frozen", "why": "", "at": True, "budget": 1},
     {"node": "n1", "state": {}, "why": "", "at": 1, "budget": 0}],
)  # fmt: skip
def test_a_kills_stacks_field_not_of_this_run_takes_no_stacks(v: object) -> None:
    assert ask_of(v, ("n0", "n1"), 10.0) is None


def test_a_kills_stacks_budget_is_capped_by_the_watch_file() -> None:
    v = {"node": "n1", "state": "frozen", "why": "x" * 999, "at": 5, "budget": 99}
    got = ask_of(v, ("n0", "n1"), 10.0)
    assert got is not None and got.budget == 10.0 and len(got.why) == 200


@pytest.mark.parametrize(
    ("raw", "malformed"),
    [
        (saved(capture_out("ffffffffffffffff")), 4),  # lines of another nonce
        (saved(capture_out(), nonce="x"), 1),  # no nonce of ours
        (saved(capture_out(), run="20250101-000000-ffff"), 1),  # another run's file
        (b"\xff\xfe" + saved(capture_out()), 1),  # not UTF-8
        (b"[" * 100_000, 1),  # nested past the parser's depth
        (b"x" * (stackcap.MAX_OUT + (64 << 10) + 1), 1),  # past its bound
        (saved(f"@{NONCE}RANK 10 0 S\n@{NONCE}STACK 10 0 %%%not-base64 \n\x1b[2Jhi\n"), 2),
        (saved(17), 1),  # no output
    ],
    ids=["nonce", "no-nonce", "run", "utf8", "deep", "oversize", "base64", "no-output"],
)
def test_a_hostile_saved_capture_is_counted_malformed_and_the_report_still_builds(
    raw: bytes, malformed: int
) -> None:
    got = read_saved("n1", raw, RUN, NODES)
    assert got.stacks.malformed == malformed
    assert not any(s.frames for s in got.stacks.stacks)
    nodes = [
        summarize_node("n1", 1, NodeState.FROZEN, [], None, got.stacks, None),
        summarize_node("n0", 0, NodeState.NOT_RUNNING, [], None, None, None),
    ]
    text = render(build("j", RUN, nodes, [], trigger=got.decision, ended_at=None,
                        ending=Ending.TORN_DOWN))  # fmt: skip
    assert "\x1b" not in text


def test_a_forged_decision_names_no_node_outside_the_run() -> None:
    forged = {"node": "root", "state": "frozen", "why": "x", "at": 1}
    assert read_saved("n1", saved(capture_out(), decision=forged), RUN, NODES).decision is None
    odd = {"node": "n0", "state": "failed", "why": "x", "at": 1}  # no hang: no stacks asked
    assert read_saved("n1", saved(capture_out(), decision=odd), RUN, NODES).decision is None


def test_the_evidence_round_trip_carries_the_saved_capture() -> None:
    raw = saved(capture_out())
    ev = parse_evidence("n1", f"@E1LOG {b64('hi')}\n@E1CAPTURE {b64(raw)}\n", "E1")
    assert ev.capture == raw and ev.malformed == 0
    assert stackcap.FILE in evidence_script(".mntui/runs/j/r/n1", None, "E1")
    record = RunRecord("j", RUN, "c.yaml", "127.0.0.1", 1, [
        NodeRecord("n0", "h0", 0, "s", f"j/{RUN}/n0", "d0"),
        NodeRecord("n1", "h1", 1, "s", f"j/{RUN}/n1", "d1"),
    ])  # fmt: skip
    other = NodeEvidence("n0", b"", None, None, (), {})
    torn = at_teardown(record, {"n0": other, "n1": ev})
    assert torn is not None and torn.trigger == ("n1", NodeState.FROZEN, "stopped: pid 7")
    assert set(torn.by_node) == {"n1"} and at_teardown(record, {"n0": other}) is None


def test_the_launch_renders_the_script_where_the_sentinel_looks_its_attempt_an_argument() -> None:
    text = stack_files(10, NONCE)
    assert f'"$d/{stackcap.SCRIPT}"' in text and f"@{NONCE}STACK" in text
    assert 'mntui_scan "$cap_pattern"' in text and 'sed -n 2p "$cap_dir"/fr/where' in text


def _watch(budget: float = 10.0, nonce: str | None = NONCE) -> WatchConfig:
    cfg = parse_config("job: j\nnodes: [n0, n1]\ncommand: x\nwatch: {where: cluster}\n")
    wc = watch_config(cfg, RUN, "n0", f"j/{RUN}/n0", "j-n0", ("n0", "n1"), "10.0.0.1", None)
    return replace(wc, capture_budget=budget, stacks_nonce=nonce)


def test_the_coordinator_asks_stacks_first_for_a_hang_only_and_never_of_a_lost_culprit() -> None:
    wc = _watch()
    frozen = stacks_first(NodeTrigger("n1", NodeState.FROZEN, "stopped", "kill_all"), wc, 5.0)
    stalled = stacks_first(NodeTrigger("n1", NodeState.STALLED, "quiet", "kill_all"), wc, 5.0)
    assert frozen is not None and frozen["budget"] == FROZEN_BUDGET and frozen["at"] == 5.0
    assert stalled is not None and stalled["budget"] == 10.0
    assert stacks_first(NodeTrigger("n1", NodeState.FAILED, "exit 1", "kill_all"), wc, 5.0) is None
    assert stacks_first(NodeTrigger("n1", NodeState.FROZEN, "x", "kill_all"), _watch(0), 5) is None
    lost = stacks_first(NodeTrigger("n1", NodeState.UNREACHABLE, "silent", "kill_all"), wc, 5.0)
    assert lost is not None and not _can_give("n1", lost) and _can_give("n0", lost)
    assert ask_of(frozen, wc.nodes, wc.capture_budget) == Ask("n1", "frozen", "stopped", 5.0, 1.5)


def test_the_watch_file_carries_the_nonce_and_budget_and_refuses_a_bad_nonce() -> None:
    wc = _watch()
    assert parse(json.loads(to_json(wc))) == wc
    assert parse(json.loads(to_json(_watch(0, None)))).stacks_nonce is None
    with pytest.raises(BadWatchFile, match="stacks_nonce"):
        parse({**json.loads(to_json(wc)), "stacks_nonce": "@@"})
