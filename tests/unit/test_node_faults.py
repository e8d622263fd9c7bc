"""Only a failure of the node counts against it: the doctor marks which of its failed
rows are the node's own (`node_fault`), a report marks a cause that is the job's own
mistake, and the node history folds only the node's failures. And what `setup` printed
on stderr comes back to the doctor bounded and stripped."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.doctor import probe
from mntui.sessions.doctor.checks import Probe, Status, setup_check
from mntui.sessions.doctor.pairs import Pair, Verdict, pair_checks
from mntui.sessions.doctor.smoke import _Follow, _no_result
from mntui.sessions.history.blame import failure_of, fold
from mntui.sessions.history.records import RunView, Scan, read_report
from mntui.sessions.launch import LogChunk

TOKEN = "00ff00ff00ff00ff"


@pytest.mark.parametrize(
    ("error", "fault"),
    [
        ("cannot connect to root@g376:22: Name or service not known", False),
        (
            "cannot connect to g376 over openssh (ssh: ssh: Could not resolve hostname g376: "
            "Name or service not known)",
            False,
        ),
        ("cannot connect to root@g376:22: Temporary failure in name resolution", False),
        ("authentication failed for g1 over paramiko (server offers: publickey)", False),
        ("HOST KEY CHANGED for g1; refusing to connect.", False),
        (
            "cannot connect to root@127.0.0.1:4957: Unable to connect to port 4957 on 127.0.0.1",
            True,
        ),
        ("cannot connect to root@g1:22: timed out", True),
        ("connection lost: EOF", True),
    ],
)
def test_an_ssh_failure_is_the_nodes_unless_the_config_is_wrong(error: str, fault: bool) -> None:
    assert probe.ssh_fault(error) is fault


def _smoke_log(lines: list[str], exit_code: int | None) -> _Follow:
    f = _Follow()
    data = "".join(f"{ln}\n" for ln in lines).encode()
    f.feed(LogChunk(data, len(data), len(data), exit_code), TOKEN)
    return f


def test_a_smoke_job_that_could_not_start_is_the_configs_mistake() -> None:
    """No torch after `setup`: python's own line is named, and it is not the node's fault."""
    f = _smoke_log(
        [
            "[mntui] g1 rank 1 starting at 2026-01-01 00:00:00",
            "bash: line 3: .venv/bin/activate: No such file or directory",
            "/usr/bin/python3: Error while finding module specification for "
            "'torch.distributed.run' (ModuleNotFoundError: No module named 'torch')",
        ],
        1,
    )
    row = _no_result("g1", f, 2, 2, 15)
    assert row.status is Status.FAIL and not row.node_fault
    assert (
        row.detail
        == "2 of 2 rank(s) gave no result within 15s (exit code 1): No module named 'torch'"
    )
    hung = _no_result("g1", _smoke_log(["[mntui] g1 rank 1 starting"], None), 1, 1, 15)
    assert hung.node_fault and hung.detail == "1 of 1 rank(s) gave no result within 15s"


def test_slow_pairs_are_the_nodes_and_pairs_that_could_not_start_are_not() -> None:
    slow = Pair(1, "a", "b", None, None, "no rank gave a result", True)
    mistake = Pair(1, "c", "d", None, None, "no torch", True, mistake=True)
    rows = pair_checks(Verdict((slow, mistake), (), (("a", "b"), ("c", "d")), ""))
    assert {r.node: (r.status, r.node_fault) for r in rows} == {
        "a": (Status.FAIL, True),
        "b": (Status.FAIL, True),
        "c": (Status.FAIL, False),
        "d": (Status.FAIL, False),
    }


def _run(report: Path | None) -> RunView:
    return RunView(
        job="j",
        run_id="20260101-000000-abcd",
        chain="20260101-000000-abcd",
        attempt=0,
        status="failed",
        created_at=1.0,
        nodes=(("g1", 1), ("g2", 1)),
        report=read_report(report) if report is not None else None,
    )


def _report(tmp_path: Path, cause: str, mistake: bool | None) -> Path:
    finding = {"cause": cause, "summary": "x"} | ({} if mistake is None else {"mistake": mistake})
    nodes = [{"node": "g2", "finding": finding}, {"node": "g1", "finding": None}]
    d = tmp_path / cause
    d.mkdir()
    (d / "report.json").write_text(json.dumps({"cause_node": "g2", "cause": "x", "nodes": nodes}))
    return d


def test_a_run_ended_by_the_jobs_own_mistake_blames_no_node(tmp_path: Path) -> None:
    typo = _run(_report(tmp_path, "startup-error", True))
    assert typo.report is not None and typo.report.mistake and failure_of(typo) is None
    oom = _run(_report(tmp_path, "cuda-oom", False))
    old = _run(_report(tmp_path, "segfault", None))  # a report of an older mntui
    assert [f.node for f in (failure_of(oom), failure_of(old)) if f] == ["g2", "g2"]
    histories = {h.node: len(h.caused) for h in fold(Scan((typo, oom)))}
    assert histories == {"g1": 0, "g2": 1}


def test_only_doctor_failures_of_the_node_count_against_it() -> None:
    rows = [
        {"node": "g376", "check": "ssh", "status": "FAIL", "node_fault": False, "at": 1.0},
        {"node": "g1", "check": "ports", "status": "FAIL", "node_fault": False, "at": 1.0},
        {"node": "g2", "check": "tcp", "status": "FAIL", "node_fault": True, "at": 1.0},
        {"node": "g3", "check": "ssh", "status": "FAIL", "at": 1.0},  # an older row
    ]
    counted = {h.node: [d.check for d in h.doctor] for h in fold(Scan((), doctor=tuple(rows)))}
    assert {n: c for n, c in counted.items() if c} == {"g2": ["tcp"]}


def _setup_line(rc: int, err: bytes) -> str:
    return f"@{TOKEN} SETUP {rc} {base64.b64encode(err).decode()}"


def test_setup_stderr_comes_back_bounded_and_stripped() -> None:
    said = b"\x1b[31mbash: line 1: .venv/bin/activate: No such file or directory\x1b[0m\x07\n\n"
    p = probe.parse_probe(_setup_line(1, said + "second\u0080 line\n".encode()), TOKEN)
    assert p.setup_status == 1
    assert (
        p.setup_err == "bash: line 1: .venv/bin/activate: No such file or directory | second line"
    )
    long = probe.parse_probe(_setup_line(0, b"x" * 5000), TOKEN)
    assert long.setup_err is not None and len(long.setup_err) == probe.SETUP_ERR_CHARS
    quiet = probe.parse_probe(f"@{TOKEN} SETUP 0 ", TOKEN)
    assert (quiet.setup_status, quiet.setup_err, quiet.malformed) == (0, None, 0)
    bad = probe.parse_probe(f"@{TOKEN} SETUP 0 not*base64", TOKEN)
    assert bad.setup_status is None and bad.malformed == 1


def test_setup_row_fails_on_its_status_and_shows_its_noise() -> None:
    spec = parse_config("job: j\nnodes: [g1]\nsetup: [x]\ncommand: c\n").nodes[0]
    failed = setup_check("g1", Probe(setup_status=1, setup_err="x: not found"), spec)
    assert failed is not None and failed.status is Status.FAIL
    assert failed.detail == "exited with 1: x: not found" and not failed.node_fault
    noisy = setup_check("g1", Probe(setup_status=0, setup_err="Lmod: loaded cuda"), spec)
    assert noisy is not None and noisy.status is Status.PASS and "Lmod: loaded cuda" in noisy.detail
    bare = parse_config("job: j\nnodes: [g1]\ncommand: c\n").nodes[0]
    assert setup_check("g1", Probe(setup_status=0), bare) is None
