"""Issue 37: the cluster's watch is the only one a launch starts. `where: auto` never
falls back to this machine: what only its supervisor did (restarts on `launch.ready`
other than `port`, more than 10 restarts, `notify.command`) the coordinator does, a
node whose bare python3 cannot run a sentinel runs it on the one its `setup` provides,
and a node with neither refuses the launch in one line (exit 2) before anything
starts. The pure parts here; the launches on real nodes are in
tests/integration/test_cluster_watch.py and test_cluster_ports.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.errors import LaunchRefused
from mntui.sessions.events import Event
from mntui.sessions.launch import ChainView, run_config
from mntui.sessions.launch import clusterwatch as cw
from mntui.sessions.launch.plan import build_plan, run_record
from mntui.sessions.launch.sentinelship import parse_python, parse_sentinel_python
from mntui.sessions.launch.start import _check_watch
from mntui.sessions.launch.startchecks import Preflight, preflight_script
from mntui.sessions.results import GroupResult, Outcome
from mntui.sessions.runs import RunStatus
from mntui.sessions.watch.reading import UNWATCHED_LINE, Reading, reading
from mntui.tui.cli.runheader import status_header, unwatched_line

CFG = "job: j\nnodes: [n0, n1]\ncommand: python train.py\nwatch: {where: %s}\n"


def test_the_reason_is_the_same_words_for_every_version() -> None:
    assert cw.python_unfit((3, 9)) is None and cw.python_unfit((3, 12)) is None
    assert cw.python_unfit(None, from_setup=True) is None  # setup's runs it
    assert (
        cw.python_unfit(None) == "no python3 on the login PATH and none 3.9 or later after `setup`"
    )
    assert cw.python_unfit((3, 8)) == (
        "python3 3.8 on the login PATH and none 3.9 or later after `setup`"
    )


def test_the_refusal_is_one_bounded_line_naming_the_nodes_and_the_fix() -> None:
    line = cw.refusal({"node1": cw.python_unfit(None) or ""})
    assert line == (
        "node1: no python3 on the login PATH and none 3.9 or later after `setup`: the "
        "cluster's watch cannot run there; nothing was started (install python3 3.9 or "
        "later on the node, or let its `setup` provide one; `mntui launch --no-watch` "
        "runs the job unwatched)"
    )
    many = {f"g{i}": "no python3" for i in range(4096)} | {"x": "python3 3.6"}
    assert cw.unfit_reason(many) == "g0, g1, g2, g3, g4 and 4091 more: no python3; x: python3 3.6"
    assert "\n" not in cw.refusal(many)


def _preflight(cfg_text: str, path: str) -> tuple[tuple[int, int] | None, str | None]:
    cfg = parse_config(cfg_text)
    script = preflight_script(cfg, "n0", False)
    env = {**os.environ, "PATH": path}
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env).stdout
    return parse_python(out), parse_sentinel_python(out)


def test_the_preflight_finds_the_interpreter_bare_or_from_setup(tmp_path: Path) -> None:
    """The same round trip as the rest of the preflight; `setup` is entered (under bash,
    its output dropped) only where the bare python3 does not fit, and what it finds is
    run by its path outside it, as the watch block will run it."""
    assert "SENTPY" not in preflight_script(parse_config(CFG % "here"), "n0", False)
    venv = Path(sys.executable).parent
    assert _preflight(CFG % "cluster", f"{venv}:/usr/bin:/bin")[1] == "python3"
    stub = tmp_path / "python3"
    stub.write_text("#!/bin/sh\nexit 1\n")
    stub.chmod(0o755)
    bare = f"{tmp_path}:/usr/bin:/bin"
    assert _preflight(CFG % "cluster", bare) == (None, None)
    setup = CFG % "cluster" + f"setup: ['echo noise; export PATH={venv}:$PATH']\n"
    version, runs_on = _preflight(setup, bare)
    assert version is None and runs_on == str(venv / "python3"), runs_on
    broken = CFG % "cluster" + "setup: ['exit 3']\n"  # a setup that fails provides none
    assert _preflight(broken, bare) == (None, None)


def _checks(**runs_on: tuple[tuple[int, int] | None, str | None]) -> GroupResult[Preflight]:
    out: GroupResult[Preflight] = GroupResult()
    for n, (version, word) in runs_on.items():
        out[n] = Outcome(n, Preflight(n, (), (), (), version, word))
    return out


def test_a_node_no_sentinel_can_run_on_refuses_the_launch_exit_2() -> None:
    cfg = parse_config(CFG % "auto")
    said: list[Event] = []
    _check_watch(cfg, _checks(n0=((3, 11), "python3"), n1=((3, 6), "/opt/py/bin/python3")),
                 said.append)  # fmt: skip
    assert [e.message for e in said] == [
        "n1: the cluster's watch runs on /opt/py/bin/python3 (after `setup`)"
    ]
    with pytest.raises(LaunchRefused) as err:
        _check_watch(cfg, _checks(n0=((3, 11), "python3"), n1=((3, 6), None)), said.append)
    assert err.value.message.startswith("n1: python3 3.6 on the login PATH and none 3.9")
    assert "\n" not in str(err.value)
    _check_watch(parse_config(CFG % "here"), _checks(n1=(None, None)), said.append)  # unwatched


FALLBACKS = [
    "restart: {max: 2}\nlaunch: {ready: delay, ready_delay: 5}\n",
    "restart: {max: 2}\nlaunch: {ready: log, ready_pattern: '^ready [0-9]+'}\n",
    "restart: {max: 50}\n",
    "notify: {command: 'echo told'}\n",
]


@pytest.mark.parametrize("extra", FALLBACKS)
def test_auto_is_the_cluster_for_what_once_needed_this_machine(extra: str) -> None:
    """The configs `auto` watched from here before issue 37: the cluster's watch now,
    and `where: cluster` no longer refuses them at load."""
    for where in ("auto", "cluster"):
        cfg = parse_config(CFG % where + extra)
        assert cfg.watch_port == cfg.master_port + 1, where
        plan = build_plan(cfg, "20261126-010203-abcd", "10.0.0.1")
        assert all("SENTINEL" in n.start_script for n in plan.nodes)
    assert parse_config(CFG % "here" + extra).watch_port is None


def test_the_watch_file_carries_what_only_this_machine_did() -> None:
    """The main's readiness for a restart's workers (the launch's rule), the restart
    count attempt 0 had, and the notify command: the main's file only (the coordinator
    runs it there)."""
    cfg = parse_config(
        CFG % "auto"
        + "restart: {max: 12}\nlaunch: {ready: log, ready_pattern: '^up$', ready_delay: 3}\n"
        + "notify: {command: 'echo told', on: [failed]}\n"
    )
    main = cw.watch_config(cfg, "20261126-010203-abcd", "n0", "j/20261126-010203-abcd/n0",
                           "j-n0", ("n0", "n1"), "10.0.0.1", "0123456789abcdef", 4)  # fmt: skip
    assert (main.ready, main.ready_pattern, main.ready_delay) == ("log", "^up$", 3.0)
    assert main.restart_base == 4 and main.attempt_nonce == "0123456789abcdef"
    assert main.notify is not None and main.notify.command == "echo told"
    worker = cw.watch_config(cfg, "20261126-010203-abcd", "n1", "j/20261126-010203-abcd/n1",
                             "j-n1", ("n0", "n1"), "10.0.0.1", None)  # fmt: skip
    assert worker.notify is None and worker.restart is None and worker.attempt_nonce is None


def test_status_says_which_way_a_run_is_watched() -> None:
    cfg = parse_config(CFG % "cluster")
    cluster = run_record(build_plan(cfg, "r1", "10.0.0.1"), "job.yaml")
    cluster.watch_port, cluster.status = cfg.watch_port, RunStatus.RUNNING
    assert reading(cluster) is Reading.CLUSTER and unwatched_line(cluster) == ""
    bare = run_record(build_plan(cw.watched_here(cfg), "r2", "10.0.0.1"), "job.yaml")
    bare.status = RunStatus.RUNNING
    assert reading(bare) is Reading.UNWATCHED and unwatched_line(bare) == UNWATCHED_LINE
    bare.status = RunStatus.FINISHED
    assert unwatched_line(bare) == "" and "unwatched" not in status_header(bare, "")


def test_a_runs_record_not_the_config_says_how_it_is_watched() -> None:
    """`auto` in the config decides nothing about a run already launched: a `--no-watch`
    run has no coordinator (its kill checks no coordinator's port), a cluster run's
    coordinator is on the port its record says."""
    cfg = parse_config(CFG % "auto" + "master_port: 29500\n")
    assert cfg.watch_port == 29501
    unwatched = run_record(build_plan(cw.watched_here(cfg), "r1", "10.0.0.1"), "job.yaml")
    got = run_config(cfg, ChainView((unwatched,)))
    assert got.watch_port is None and got.all_ports == (29500,)
    there = run_record(build_plan(cfg, "r2", "10.0.0.1"), "job.yaml")
    there.watch_port = 31000
    got = run_config(parse_config(CFG % "here" + "master_port: 29500\n"), ChainView((there,)))
    assert got.watch_port == 31000 and got.all_ports == (29500, 31000)
