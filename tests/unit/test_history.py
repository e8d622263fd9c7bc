"""The history wing's pure parts: node blame folded from records, the ledger's arithmetic,
quarantine expiry and routing, spans, the step clock, and records of other versions."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from mntui.sessions.config import format_span, parse_span
from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.errors import LaunchError, state_dir
from mntui.sessions.history import quarantines
from mntui.sessions.history.blame import fold
from mntui.sessions.history.ledger import chain_ledger, ledgers
from mntui.sessions.history.records import scan
from mntui.sessions.history.stepclock import StepClock

T0 = 1_790_000_000.0


def run_id(i: int) -> str:
    return f"20260911-{i // 3600 % 24:02d}{i // 60 % 60:02d}{i % 60:02d}-{i % 65536:04x}"


def write_run(
    job: str, rid: str, data: dict[str, Any], report: dict[str, Any] | None = None
) -> Path:
    d = state_dir() / job / rid
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps(data))
    if report is not None:
        (d / "report.json").write_text(json.dumps(report))
    return d


def record(
    job: str,
    rid: str,
    *,
    chain: str | None = None,
    attempt: int = 0,
    status: str = "finished",
    at: float = T0,
    nodes: tuple[str, ...] = ("node0", "node1"),
    notes: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "job": job,
        "run_id": rid,
        "config": "/x.yaml",
        "master_addr": "127.0.0.1",
        "master_port": 1,
        "nodes": [
            {
                "node": n,
                "host": n,
                "rank": i,
                "session": "s",
                "tag": "t",
                "run_dir": "/r",
                "nproc": 2,
            }
            for i, n in enumerate(nodes)
        ],
        "created_at": at,
        "status": status,
        "chain": chain or rid,
        "attempt": attempt,
        "history": notes or [],
        **extra,
    }


def report(
    cause_node: str, first_at: float, ended_at: float, others: tuple[str, ...] = ()
) -> dict[str, Any]:
    nodes = [{"node": cause_node, "finding": {"summary": "x"}, "first_problem_at": first_at}]
    nodes += [
        {"node": o, "finding": {"summary": "timeout"}, "first_problem_at": first_at + 1}
        for o in others
    ]
    return {
        "cause_node": cause_node,
        "cause": "exit code 3",
        "first_at": first_at,
        "ended_at": ended_at,
        "ending": "torn-down",
        "nodes": nodes,
        "consequences": [f"{o} (node rank 0): timeout — a consequence" for o in others],
    }


def teardown(node: str, at: float, state: str = "failed") -> dict[str, Any]:
    return {
        "at": at,
        "what": "watchdog-teardown",
        "node": node,
        "state": state,
        "why": "exit code 3",
    }


def steps(
    first: float, last: float, first_step: int = 1, last_step: int = 10, **kw: Any
) -> dict[str, Any]:
    return {
        "at": last,
        "what": "steps",
        "first_step_at": first,
        "last_step_at": last,
        "first_step": first_step,
        "last_step": last_step,
        "checkpoints": False,
        **kw,
    }


def test_a_node_that_ended_three_runs_comes_first_with_its_causes() -> None:
    for i in range(3):
        rid = run_id(100 + i)
        write_run(
            "ja",
            rid,
            record(
                "ja",
                rid,
                status="torn-down",
                at=T0 + i * 100,
                notes=[teardown("node1", T0 + i * 100 + 5, "frozen" if i else "failed")],
            ),
            report("node1", T0 + i * 100 + 4, T0 + i * 100 + 5, others=("node0",)),
        )
    rid = run_id(200)
    write_run(
        "jb",
        rid,
        record("jb", rid, status="failed", nodes=("node0", "node2"), at=T0 + 500),
        report("node2", T0 + 501, T0 + 502),
    )
    histories = fold(scan())
    assert [h.node for h in histories][:2] == ["node1", "node2"]
    top = histories[0]
    assert len(top.caused) == 3 and top.share == 1.0 and top.kinds() == {"frozen": 2, "failed": 1}
    node0 = next(h for h in histories if h.node == "node0")
    assert len(node0.caused) == 0 and len(node0.consequence_of) == 3 and node0.runs == 4


def test_a_node_a_user_killed_is_not_blamed() -> None:
    rid = run_id(300)
    write_run(
        "jk",
        rid,
        record(
            "jk", rid, status="torn-down", killed_nodes=["node1"], notes=[teardown("node1", T0 + 5)]
        ),
    )
    assert all(not h.caused for h in fold(scan()))


def test_old_and_broken_records_are_read_as_far_as_they_go() -> None:
    ok = run_id(400)
    old = record("jo", ok, status="torn-down", notes=[teardown("node1", T0 + 5)])
    for key in ("chain", "attempt", "attempts", "killed_nodes", "node_source"):
        old.pop(key, None)
    old["a_key_from_the_future"] = {"x": 1}
    old["nodes"][0].pop("nproc")
    write_run("jo", ok, old)
    write_run("jo", run_id(401), {"job": "jo"})  # no created_at
    (write_run("jo", run_id(402), {}) / "run.json").write_text("{not json")
    (
        write_run("jo", run_id(403), record("jo", run_id(403), status="failed")) / "report.json"
    ).write_text("[1")
    write_run("jo", run_id(404), record("jo", run_id(404), status=7, attempt="x", nodes=()))  # type: ignore[arg-type]
    (state_dir() / "jo" / "not-a-run").mkdir()
    found = scan()
    assert found.skipped == 2 and found.partial == 1
    assert {r.run_id for r in found.runs} == {ok, run_id(403), run_id(404)}
    assert next(r for r in found.runs if r.run_id == ok).chain == ok
    assert fold(found)[0].node == "node1"
    assert ledgers(found, T0 + 1000)  # no traceback


def test_the_ledger_splits_each_failure_into_detection_recovery_and_lost_work() -> None:
    c = run_id(500)
    r1, r2 = run_id(501), run_id(502)
    write_run(
        "jl",
        c,
        record(
            "jl",
            c,
            status="restarting",
            at=T0,
            notes=[
                steps(
                    T0 + 10,
                    T0 + 50,
                    1,
                    40,
                    checkpoints=True,
                    checkpoint_at=T0 + 30,
                    checkpoint_step=20,
                    gpus=4,
                    gpu_nodes=2,
                ),
                teardown("node1", T0 + 53),
            ],
        ),
        report("node1", T0 + 51, T0 + 52.5),
    )
    write_run(
        "jl",
        r1,
        record(
            "jl",
            r1,
            chain=c,
            attempt=1,
            status="restarting",
            at=T0 + 60,
            notes=[
                steps(T0 + 70, T0 + 80, 21, 30, checkpoints=True, gpus=4, gpu_nodes=2),
                teardown("node1", T0 + 84, "frozen"),
            ],
        ),
        report("node1", T0 + 81, T0 + 83.5),
    )
    write_run(
        "jl",
        r2,
        record(
            "jl",
            r2,
            chain=c,
            attempt=2,
            status="finished",
            at=T0 + 90,
            notes=[steps(T0 + 100, T0 + 200, 31, 130)],
        ),
    )
    (ledger,) = ledgers(scan(), T0 + 1000)
    assert ledger.attempts == 3 and ledger.status == "finished"
    assert ledger.wall == pytest.approx(200) and ledger.training == pytest.approx(40 + 10 + 100)
    a, b = ledger.losses
    assert (a.detection, a.recovery) == (pytest.approx(2.0), pytest.approx(17.0))
    assert (a.lost_steps, a.lost_work) == (20, pytest.approx(20.0))
    assert (b.detection, b.recovery) == (pytest.approx(3.0), pytest.approx(16.0))
    assert (b.lost_steps, b.lost_work) == (
        9,
        pytest.approx(10.0),
    )  # no checkpoint: since its first step
    assert a.gpus == 4 and a.gpu_hours == pytest.approx(4 * (2 + 17 + 20) / 3600)
    line = ledger.summary()
    assert (
        "3 attempt(s)" in line
        and "2 failure(s)" in line
        and "GPU-h (GPUs from nvidia-smi)" in line
        and "75% goodput" in line
    )


def test_a_chain_still_going_counts_its_wall_time_until_now_and_unknown_parts_stay_unknown() -> (
    None
):
    c = run_id(600)
    write_run("jr", c, record("jr", c, status="restarting", notes=[teardown("node0", T0 + 5)]))
    write_run(
        "jr",
        run_id(601),
        record("jr", run_id(601), chain=c, attempt=1, status="running", at=T0 + 9),
    )
    (ledger,) = ledgers(scan(), T0 + 100)
    assert ledger.ended_at is None and ledger.wall == pytest.approx(100)
    (loss,) = ledger.losses
    assert loss.detection == 0.0 and loss.recovery is None and loss.lost_work is None
    assert "?" in chain_ledger(scan().runs, T0 + 100).summary()


def test_a_quarantine_expires_and_its_file_goes() -> None:
    q = quarantines.quarantine_node("g375", 3600, "XID 79", who="a@b", now=T0)
    assert q.until == T0 + 3600 and set(quarantines.active_quarantines(T0 + 10)) == {"g375"}
    path = quarantines.folder() / "g375.json"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert quarantines.active_quarantines(T0 + 3600) == {}
    assert [x.node for x in quarantines.prune_quarantines(T0 + 3601)] == [
        "g375"
    ] and not path.exists()
    assert quarantines.release_node("g375") is None


def test_odd_node_names_stay_one_file_and_bad_files_are_skipped() -> None:
    quarantines.quarantine_node("../x/.y", 60, "why", now=T0)
    assert [p.name for p in quarantines.folder().glob("*.json")] == ["%2E%2E%2Fx%2F%2Ey.json"]
    (quarantines.folder() / "bad.json").write_text("{")
    (quarantines.folder() / "other.json").write_text(
        json.dumps({"node": "g1", "when": 1, "until": 2})
    )
    found = quarantines.quarantine_listing(T0)
    assert [q.node for q in found.active] == ["../x/.y"] and found.unreadable == 2


JOB = """
job: jq
nodes: [g1, g2]
command: python3 train.py
{extra}
"""


def test_a_launch_refuses_a_quarantined_node_in_one_line_or_takes_a_spare() -> None:
    quarantines.quarantine_node("g2", 3600, "XID 79", who="a@b")
    with pytest.raises(LaunchError) as err:
        quarantines.route_around(parse_config(JOB.format(extra="")))
    text = str(err.value)
    assert "\n" not in text and "g2" in text and "XID 79" in text and "--release g2" in text
    assert text.startswith("g2 is quarantined and no spare can take rank 1 (the config lists none)")
    quarantines.quarantine_node("s1", 3600, "bad PSU", who="a@b")
    cfg, said = quarantines.route_around(parse_config(JOB.format(extra="spares: [s1, s2]")))
    assert [(n.name, n.rank) for n in cfg.nodes] == [("g1", 0), ("s2", 1)]
    assert said == ["g2 is quarantined: replaced by spare s2 (rank 1)"]  # placing's line


def test_a_launch_never_routes_a_spare_of_another_size_in() -> None:
    """route_around had a rule of its own, with no process-count check: a spare with 4
    processes took the place of a worker with 2 and changed the world size. Now it is
    placing.place's, as for the supervisor and the coordinator: refused, with its line."""
    quarantines.quarantine_node("g2", 3600, "XID 79", who="a@b")
    spare = "nproc_per_node: 2\nspares: [{name: s1, nproc_per_node: 4}"
    cfg = parse_config(JOB.format(extra=spare + "]"))
    with pytest.raises(LaunchError) as err:
        quarantines.route_around(cfg)
    text = str(err.value)
    assert "\n" not in text and text.startswith(
        "g2 is quarantined and no spare can take rank 1 (s1: runs 4 process(es), not 2); "
        "nothing was started: its quarantine runs until "
    ), text
    assert "XID 79" in text and "`mntui quarantine --release g2`" in text
    cfg, said = quarantines.route_around(parse_config(JOB.format(extra=spare + ", s2]")))
    assert [(n.name, n.rank) for n in cfg.nodes] == [("g1", 0), ("s2", 1)]
    assert cfg.world_size == 4 and said == ["g2 is quarantined: replaced by spare s2 (rank 1)"]


def test_a_launch_moves_a_quarantined_main_and_names_the_first_node_it_cannot_place() -> None:
    quarantines.quarantine_node("g1", 3600, "XID 79", who="a@b")
    moved = parse_config(JOB.format(extra="master_addr: 10.0.0.1\nspares: [s1]"))
    cfg, said = quarantines.route_around(moved)
    assert (cfg.main, cfg.master_addr) == ("s1", None)
    assert [(n.name, n.rank) for n in cfg.nodes] == [("s1", 0), ("g2", 1)]
    assert said == ["g1 is quarantined: replaced by spare s1 (rank 0)"]
    quarantines.quarantine_node("g2", 3600, "ECC", who="a@b")
    with pytest.raises(LaunchError) as err:
        quarantines.route_around(parse_config(JOB.format(extra="spares: [s1]")))
    text = str(err.value)
    assert text.startswith("g2 is quarantined and no spare can take rank 1 (s1: in use)"), text
    assert "ECC" in text and "--release g2" in text and "more quarantined" not in text
    quarantines.quarantine_node("s1", 3600, "PSU", who="a@b")
    with pytest.raises(LaunchError) as err:
        quarantines.route_around(parse_config(JOB.format(extra="spares: [s1]")))
    text = str(err.value)
    assert text.startswith("g1 is quarantined and no spare can take rank 0 (s1: quarantined)")
    assert "--release g1" in text and "(and 1 more quarantined node(s))" in text, text


def test_spans() -> None:
    assert [parse_span(x) for x in ("24h", "7d", "90m", "1.5h", "30", 45)] == [
        86400,
        7 * 86400,
        5400,
        5400,
        30,
        45,
    ]
    for bad in ("", "0h", "-1h", "nan", "1y", "400d", True, float("inf")):
        with pytest.raises(ValueError, match="time span"):
            parse_span(bad)
    assert [format_span(x) for x in (4.24, 185, 7800, 90000, None)] == [
        "4.2s",
        "3m05s",
        "2h10m",
        "1d1h",
        "?",
    ]


def test_the_step_clock_keeps_first_last_and_checkpoint() -> None:
    clock = StepClock(re.compile(r"saved checkpoint(?: at step (?P<step>[0-9]+))?"))
    clock.feed(T0, None, ["loading"])
    clock.feed(T0 + 1, 5, ["step 5"])
    clock.feed(T0 + 2, 9, ["step 9", "saved checkpoint at step 8"])
    clock.feed(T0 + 3, 9, ["saved checkpoint", "x" * 100_000])
    clock.feed(T0 + 4, 7, [])  # a late line is no setback
    note = clock.plain()
    assert (note["first_step_at"], note["first_step"], note["last_step_at"], note["last_step"]) == (
        T0 + 1,
        5,
        T0 + 2,
        9,
    )
    assert (note["checkpoint_at"], note["checkpoint_step"], note["checkpoints"]) == (
        T0 + 3,
        9,
        True,
    )
    assert clock.due and not StepClock().due


def test_a_quarantined_spare_is_never_swapped_in() -> None:
    """The one placing rule (node/rules/placing.py), as a launch here routes by it."""
    from mntui.sessions.history.quarantines import place_here
    from mntui.sessions.node.rules.restarts import AttemptEnd
    from mntui.sessions.poll import NodeState

    cfg = parse_config(JOB.format(extra="spares: [s1, s2]"))
    quarantines.quarantine_node("s1", 3600, "bad PSU", who="a@b")
    ends = tuple(AttemptEnd(i, None, NodeState.FAILED, "g2") for i in range(2))
    new, placed = place_here(cfg, ends, quarantines.active_quarantines())
    assert [n.name for n in new.nodes] == ["g1", "s2"] and "spare s2" in placed.said[0]


def test_the_history_bench_runs(tmp_path: Path) -> None:
    import subprocess
    import sys

    bench = Path(__file__).resolve().parents[2] / "bench" / "historybench.py"
    res = subprocess.run([sys.executable, str(bench), "--runs", "40", "--reps", "1"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "| mntui history |" in res.stdout and "40 run records" in res.stdout


def test_since_keeps_a_run_from_just_before_midnight() -> None:
    import time as t

    late = t.mktime((2026, 9, 21, 23, 59, 0, 0, 0, -1))
    rid = t.strftime("%Y%m%d-%H%M%S", t.localtime(late)) + "-00aa"
    write_run("jm", rid, record("jm", rid, at=late))
    assert [r.run_id for r in scan(since=3600, now=late + 1800).runs] == [rid]
    assert scan(since=3600, now=late + 7200).runs == ()


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (
            "restart: {quarantine_after: {count: 0}}",
            "restart.quarantine_after.count: expected an integer",
        ),
        (
            "restart: {quarantine_after: {count: 2, for: 2y}}",
            "restart.quarantine_after.for: expected a time span",
        ),
        ("restart: {quarantine_after: {within: 1h}}", "restart.quarantine_after.count: required"),
        ("restart: {quarantine_after: {count: 2, fro: 1h}}", "did you mean 'for'?"),
        ("checkpoint_pattern: '('", "checkpoint_pattern: not a valid regular expression"),
    ],
)
def test_bad_history_settings_are_one_line_naming_the_key(extra: str, said: str) -> None:
    from mntui.sessions.config import ConfigError

    with pytest.raises(ConfigError) as err:
        parse_config(JOB.format(extra=extra))
    assert said in str(err.value) and "\n" not in str(err.value)


def test_history_settings_are_read() -> None:
    cfg = parse_config(JOB.format(extra="restart: {quarantine_after: {count: 3, within: 2h, for: 1d}}\n"
                                         "checkpoint_pattern: 'saved (?P<step>[0-9]+)'"))  # fmt: skip
    rule = cfg.restart.quarantine_after
    assert rule is not None and (rule.count, rule.within, rule.hold) == (3, 7200, 86400)
    assert cfg.checkpoint_pattern == "saved (?P<step>[0-9]+)"
    assert parse_config(JOB.format(extra="")).restart.quarantine_after is None


def test_the_ledger_text_ends_with_the_sum_of_its_chains() -> None:
    from mntui.sessions.history.ledger import format_ledgers

    for i, status in ((700, "finished"), (701, "torn-down")):
        rid = run_id(i)
        notes = [steps(T0 + i, T0 + i + 50)] + (
            [teardown("node1", T0 + i + 52)] if i == 701 else []
        )
        write_run("jt", rid, record("jt", rid, status=status, at=T0 + i - 10, notes=notes))
    text = format_ledgers(ledgers(scan(), T0 + 2000))
    assert text.splitlines()[-1].startswith("total: 2 chains, 2 attempts, 1 failures; wall ")
    assert "training 1m40s" in text.splitlines()[-1] and "GPU-h" in text


def test_quarantine_input_is_checked_in_one_line() -> None:
    from mntui.tui.cli.entry import main

    assert main(["quarantine", "g1", "--why", "a\x1b[31mb"]) == 2
    assert main(["quarantine", "g1\tx"]) == 2
    assert quarantines.quarantine_listing().active == ()
    assert main(["quarantine", "g1", "--for", "2h", "--why", "XID 79"]) == 0
    assert [q.node for q in quarantines.quarantine_listing().active] == ["g1"]
    assert main(["quarantine", "--release", "g1"]) == 0 and not quarantines.active_quarantines()
