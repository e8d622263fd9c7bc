"""Issue 30: a `where: cluster` run that a node cannot run a sentinel for is watched from
this machine, chosen before anything starts, said in one line; `status` says which way
a run is watched. The pure parts here; the launch on real nodes is in
tests/integration/test_cluster_watch.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mntui.sessions.config import ConfigError
from mntui.sessions.config.jobconfig import auto_unfit, cluster_unfit, parse_config
from mntui.sessions.launch import ChainView, run_config
from mntui.sessions.launch import clusterwatch as cw
from mntui.sessions.launch.plan import build_plan, run_record
from mntui.sessions.launch.sentinelship import parse_python
from mntui.sessions.launch.startchecks import preflight_script
from mntui.sessions.runs import RunStatus
from mntui.sessions.watch.reading import UNWATCHED_LINE, Reading, reading
from mntui.tui.cli.runheader import status_header, unwatched_line

CFG = "job: j\nnodes: [n0, n1]\ncommand: python train.py\nwatch: {where: %s}\n"


def test_the_reason_is_the_same_words_for_every_version() -> None:
    assert cw.python_unfit((3, 9)) is None and cw.python_unfit((3, 12)) is None
    assert cw.python_unfit(None) == "no python3 3.9 or later"
    assert cw.python_unfit((3, 8)) == "python3 3.8, not 3.9 or later"
    got = cw.unfit_nodes({"n0": (3, 11), "n1": None, "n2": (2, 7)})
    assert got == {"n1": "no python3 3.9 or later", "n2": "python3 2.7, not 3.9 or later"}


def test_the_fallback_is_one_bounded_line_however_many_nodes() -> None:
    assert cw.fallback_line(cw.fallback_reason({"node1": "no python3 3.9 or later"})) == (
        "node1: no python3 3.9 or later: the cluster cannot watch this run; "
        "it is watched from this machine: keep it on"
    )
    many = {f"g{i}": "no python3 3.9 or later" for i in range(4096)} | {"x": "python3 3.6, no"}
    reason = cw.fallback_reason(many)
    assert reason == "g0, g1, g2, g3, g4 and 4091 more: no python3 3.9 or later; x: python3 3.6, no"
    assert "\n" not in cw.fallback_line(reason)


def test_watched_here_plans_no_sentinel_no_port_no_cluster_restart() -> None:
    cfg = parse_config(CFG % "cluster" + "restart: {max: 2}\nlaunch: {ready: port}\n")
    assert cfg.watch_port is not None
    here = cw.watched_here(cfg)
    assert here.watch_port is None and here.watch.where == "here"
    assert here.all_ports == (here.master_port,) and here.restart == cfg.restart
    plan = build_plan(here, "r1", "10.0.0.1")
    assert plan.cluster_attempts == ()
    assert all("SENTINEL" not in n.start_script for n in plan.nodes)
    assert any("SENTINEL" in n.start_script for n in build_plan(cfg, "r1", "10.0.0.1").nodes)


def _preflight_python(cfg_text: str, path: str) -> tuple[int, int] | None:
    cfg = parse_config(cfg_text)
    script = preflight_script(cfg, "n0", False)
    env = {**os.environ, "PATH": path}
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env).stdout
    return parse_python(out)


def test_the_preflight_asks_the_bare_python3_only_for_the_cluster(tmp_path: Path) -> None:
    """The same round trip as the rest of the preflight, no extra one per node."""
    assert "PY none" not in preflight_script(parse_config(CFG % "here"), "n0", False)
    here_path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    assert cw.python_unfit(_preflight_python(CFG % "cluster", here_path)) is None
    stub = tmp_path / "python3"
    stub.write_text("#!/bin/sh\nexit 1\n")
    stub.chmod(0o755)
    assert _preflight_python(CFG % "cluster", f"{tmp_path}:/usr/bin:/bin") is None


def test_status_says_how_a_run_is_watched() -> None:
    """By the cluster, or by nothing (issue 37: no watch runs on this machine): a live
    unwatched run says so in one line, an ended one does not."""
    cfg = parse_config(CFG % "cluster")
    cluster = run_record(build_plan(cfg, "r1", "10.0.0.1"), "job.yaml")
    cluster.watch_port, cluster.status = cfg.watch_port, RunStatus.RUNNING
    assert reading(cluster) is Reading.CLUSTER and unwatched_line(cluster) == ""
    here = run_record(build_plan(cw.watched_here(cfg), "r2", "10.0.0.1"), "job.yaml")
    here.status = RunStatus.RUNNING
    assert reading(here) is Reading.UNWATCHED and unwatched_line(here) == UNWATCHED_LINE
    assert UNWATCHED_LINE in status_header(here, "") and "\n" not in UNWATCHED_LINE
    here.status = RunStatus.FINISHED
    assert unwatched_line(here) == "" and "unwatched" not in status_header(here, "")


def test_auto_is_the_default_and_the_cluster_watches_what_it_can() -> None:
    plain = parse_config("job: j\nnodes: [n0, n1]\ncommand: python train.py\n")
    assert plain.watch.where == "auto" and plain.watch_port == plain.master_port + 1
    assert cluster_unfit(plain) is None
    assert parse_config(CFG % "here").watch_port is None


UNFIT = [
    (
        "restart: {max: 2}\nlaunch: {ready: delay, ready_delay: 5}\n",
        "launch.ready",
        "once the main's port listens",
        "launch.ready: port",
    ),
    (
        "restart: {max: 11}\nlaunch: {ready: port}\n",
        "restart.max",
        "restarts at most 10 times",
        "lower it",
    ),
]


@pytest.mark.parametrize(("extra", "key", "why", "fix"), UNFIT)
def test_one_rule_says_what_only_this_machine_can_watch(
    extra: str, key: str, why: str, fix: str
) -> None:
    """`auto` watches such a config from here (the launch says the rule's line);
    `cluster` refuses it at load, naming the key and both fixes."""
    auto = parse_config(CFG % "auto" + extra)
    unfit = cluster_unfit(auto)
    assert unfit is not None and unfit.line.startswith(f"{key}: ") and why in unfit.line
    assert auto.watch_port is None and auto.all_ports == (auto.master_port,)
    with pytest.raises(ConfigError) as err:
        parse_config(CFG % "cluster" + extra)
    said = str(err.value)
    assert (
        key.rsplit(".", maxsplit=1)[-1] in said and fix in said and "watch.where: here" in said
    ), said
    assert "\n" not in said
    assert parse_config(CFG % "here" + extra).watch_port is None


SPARES = [
    "restart: {max: 2}\nspares: [n2]\n",
    "restart: {max: 2, quarantine_after: {count: 2, within: 1h, for: 1h}}\n",
    "spares: [n2, n3]\nrestart: {max: 2, quarantine_after: {count: 1}}\n",
]


@pytest.mark.parametrize("extra", SPARES)
def test_the_cluster_restarts_onto_spares_and_around_quarantines(extra: str) -> None:
    """Spares and `restart.quarantine_after` are the coordinator's too (node/placing.py):
    `auto` keeps the cluster's watch, `cluster` is no longer refused."""
    for where in ("auto", "cluster"):
        cfg = parse_config(CFG % where + "launch: {ready: port}\n" + extra)
        assert cluster_unfit(cfg) is None and auto_unfit(cfg) is None
        assert cfg.watch_port == cfg.master_port + 1


def test_auto_leaves_a_notify_command_to_this_machine_and_the_webhook_to_the_cluster() -> None:
    """A notification is for a person now: the coordinator posts a webhook when it
    decides, so `auto` keeps the cluster's watch; a command is this machine's line, run
    when it next looks: `auto` watches from here; `cluster`, asked for, is kept."""
    told = "notify: {command: 'echo told'}\n"
    auto = parse_config(CFG % "auto" + told)
    unfit = auto_unfit(auto)
    assert unfit is not None and unfit.line.startswith("notify.command: runs on this machine")
    assert auto.watch_port is None and cluster_unfit(auto) is None
    assert parse_config(CFG % "cluster" + told).watch_port is not None
    quiet = parse_config(CFG % "auto" + "notify: {command: 'echo told', on: []}\n")
    assert auto_unfit(quiet) is None and quiet.watch_port is not None
    hook = parse_config(CFG % "auto" + "notify: {webhook: 'https://hooks.example/x'}\n")
    assert auto_unfit(hook) is None and hook.watch_port is not None


def test_a_runs_record_not_the_config_says_how_it_is_watched() -> None:
    """`auto` in the config decides nothing about a run already launched: a `--no-watch`
    or fallen-back run has no coordinator (its kill checks no coordinator's port), a
    cluster run's coordinator is on the port its record says."""
    cfg = parse_config(CFG % "auto" + "master_port: 29500\n")
    assert cfg.watch_port == 29501
    here = run_record(build_plan(cw.watched_here(cfg), "r1", "10.0.0.1"), "job.yaml")
    got = run_config(cfg, ChainView((here,)))
    assert got.watch_port is None and got.all_ports == (29500,)
    there = run_record(build_plan(cfg, "r2", "10.0.0.1"), "job.yaml")
    there.watch_port = 31000
    got = run_config(parse_config(CFG % "here" + "master_port: 29500\n"), ChainView((there,)))
    assert got.watch_port == 31000 and got.all_ports == (29500, 31000)
