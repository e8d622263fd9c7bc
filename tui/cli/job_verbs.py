"""The verbs that start, stop or enter the job's processes: launch, kill, cleanup,
attach, and the demo that does all of it.

`launch` without --no-ui is one of the two doors into the app (the other is `mntui`
alone, in cli.py); everything else here is headless and imports the engine only on the
path that needs it, so `mntui kill` starts fast over a bare SSH session.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING

from mntui.sessions.config import JobConfig, load_config
from mntui.sessions.errors import ExitCode, LaunchError, LaunchRefused

from .args import check_nodes, demo_config_path
from .output import printer, say

if TYPE_CHECKING:
    from mntui.sessions.launch import BoardView
    from mntui.sessions.runs import RunRecord


def cmd_launch(cfg: JobConfig, args: argparse.Namespace) -> int:
    """A headless launch takes a Ctrl+C (or a closed terminal) at any moment and ends in
    one true sentence and exit 130: before every node ran, the launch has stopped what it
    had started (start.py); after, the job runs on, watched by the cluster or by
    nothing, as it was launched."""
    since = time.time()
    try:
        return _launch(cfg, args)
    except KeyboardInterrupt:
        if args.dry_run or not args.no_ui:
            raise
        return _interrupted(cfg, since)


def _interrupted(cfg: JobConfig, since: float) -> int:
    from mntui.sessions.runs import RunStatus, latest
    from mntui.sessions.watch.reading import by_cluster

    rec = latest(cfg.job)
    if rec is None or rec.created_at < since:
        say(f"mntui: interrupted before any node of {cfg.job} was started", err=True)
    elif rec.status is RunStatus.ABORTED:
        say(f"mntui: interrupted: the launch stopped what it had started (run {rec.run_id} "
            f"aborted); nothing of {cfg.job} runs", err=True)  # fmt: skip
    elif rec.status is RunStatus.LAUNCHING:  # a second Ctrl+C cut the launch's own cleanup
        say(f"mntui: interrupted while the launch stopped what it had started: run "
            f"{rec.run_id} may have left processes; `mntui kill` stops them", err=True)  # fmt: skip
    elif rec.status is not RunStatus.RUNNING:
        say(f"mntui: interrupted; run {rec.run_id} of {cfg.job} is {rec.status}", err=True)
    elif by_cluster(rec):
        say(f"mntui: interrupted after every node had started: {cfg.job} runs on, watched "
            "by the cluster; `mntui kill` stops it", err=True)  # fmt: skip
    else:
        say(f"mntui: interrupted after every node had started: {cfg.job} runs on, "
            "unwatched; `mntui kill` stops it", err=True)  # fmt: skip
    return ExitCode.INTERRUPTED


def _launch(cfg: JobConfig, args: argparse.Namespace) -> int:
    from mntui.sessions import launch
    from mntui.sessions.launch import describe
    from mntui.sessions.results import NodeError

    if args.no_sync:
        from dataclasses import replace

        cfg = replace(cfg, sync=None)
    if args.no_watch:  # no watch at all: no sentinel, no coordinator
        from mntui.sessions.launch.clusterwatch import watched_here

        cfg = watched_here(cfg)
    if not args.no_ui and not args.dry_run:
        from mntui.tui.app import run_app

        if not sys.stdout.isatty():
            say("mntui: no terminal for the app; use --no-ui", err=True)
            return ExitCode.USAGE
        return run_app(cfg, launch_now=True, restart=args.restart)
    if args.dry_run:
        from mntui.sessions.history import route_around

        try:
            cfg, routed = route_around(cfg)  # what a launch would do with a quarantine
            for said in routed:
                say(said)
            say(describe(launch.make_plan(cfg)))
        except LaunchError as exc:
            say(f"mntui: launch failed: {exc.message}", err=True)
            return ExitCode.FAILED
        except NodeError as exc:
            say(f"mntui: {exc}", err=True)
            return ExitCode.FAILED
        return ExitCode.OK
    from mntui.sessions.watch.reading import UNWATCHED_LINE, by_cluster, coordinator

    t0 = time.time()
    try:
        result = launch.launch(cfg, on_event=printer(t0), restart=args.restart)
    except LaunchRefused as exc:  # nothing started: the user's to change, one line
        say(f"mntui: launch refused: {exc.message}", err=True)
        return ExitCode.USAGE
    except LaunchError as exc:
        say(f"mntui: launch failed: {exc.message}", err=True)
        if exc.details:
            say(exc.details, err=True)
        return ExitCode.FAILED
    except NodeError as exc:
        say(f"mntui: launch failed: {exc}", err=True)
        return ExitCode.FAILED
    say(
        f"launched {cfg.job} run {result.plan.run_id} on {result.plan.nnodes} node(s) "
        f"in {time.time() - t0:.1f}s; `mntui status`, `mntui logs -f`, `mntui kill`"
    )
    if by_cluster(result.record):  # the launch confirmed every sentinel
        say(f"watched by the cluster: the coordinator on {coordinator(result.record)} "
            "decides; this machine may sleep or go away")  # fmt: skip
    else:  # --no-watch, or `watch.where: here`: no watch runs on this machine any more
        say(f"{cfg.job} run {result.plan.run_id} is {UNWATCHED_LINE}")
    return ExitCode.OK


def run_kill(
    cfg: JobConfig, names: list[str] | None, grace: float | None, t0: float, verbose: bool = False
) -> bool:
    """One request to the coordinator of a run the cluster watches (its sentinels kill
    their nodes and report), directly by tag on every node it does not answer for, or of
    an unwatched run (launch/userkill.py)."""
    from mntui.sessions.launch import stop_job, summarize
    from mntui.sessions.runs import latest
    from mntui.sessions.ssh import Cluster
    from mntui.sessions.watch.reading import describe

    record = latest(cfg.job)
    if verbose:
        say(f"mntui: {describe(record) if record is not None else 'no run recorded'}", err=True)
    with Cluster(cfg.nodes, cfg.ssh) as cluster:
        results = stop_job(
            cfg, cluster, names=names, grace=grace, on_event=printer(t0), mirror=mirror
        )
    clean, text = summarize(cfg.job, results)
    say(f"{text} ({time.time() - t0:.1f}s)", err=not clean)
    return clean


def mirror(record: RunRecord, view: BoardView) -> RunRecord:
    """The records' one sync (watch/mirror.py), loaded only when a coordinator answered."""
    from mntui.sessions.watch import sync

    return sync(record, view)


def cmd_kill(cfg: JobConfig, args: argparse.Namespace) -> int:
    nodes = check_nodes(cfg, args.nodes)
    clean = run_kill(cfg, nodes or None, args.grace, time.time(), args.verbose)
    return ExitCode.OK if clean else ExitCode.FAILED


def cmd_cleanup(cfg: JobConfig, args: argparse.Namespace) -> int:
    from mntui.sessions.launch import free_ports, port_holders, still_held
    from mntui.sessions.ssh import Cluster

    with Cluster(cfg.nodes, cfg.ssh) as cluster:
        found = port_holders(cfg, cluster)
        for name, error in found.errors.items():
            say(f"{name}: {error}", err=True)
        holders = {n: hs for n, hs in found.succeeded.items() if hs}
        for name, hs in holders.items():
            for h in hs:
                say(f"{name}: {h.describe()}")
        if not holders:
            say(f"ports {', '.join(map(str, cfg.all_ports))} are free on every reachable node")
            return ExitCode.OK if found.all_ok else ExitCode.FAILED
        if not _confirmed(args.yes, "kill these processes (only your own)?"):
            return ExitCode.FAILED
        freed = free_ports(cluster, holders, cfg.grace)
    for name, error in freed.errors.items():
        say(f"{name}: {error}", err=True)
    busy = False
    for name, (pids, left) in freed.succeeded.items():
        say(f"{name}: killed {' '.join(map(str, pids)) or 'nothing'}")
        for h in left:
            say(f"{name}: {still_held(h, pids)}")
        busy = busy or bool(left)
    return ExitCode.OK if freed.all_ok and not busy else ExitCode.FAILED


def _confirmed(yes: bool, question: str) -> bool:
    if yes:
        return True
    if not sys.stdin.isatty():
        say("mntui: not a terminal; pass --yes to kill these holders", err=True)
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def cmd_attach(cfg: JobConfig, args: argparse.Namespace) -> int:  # noqa: RET503 - execvp
    from mntui.sessions.launch import attach_all_argv, attach_argv

    if args.node:
        check_nodes(cfg, [args.node])
    argv = attach_all_argv(cfg) if args.all else attach_argv(cfg, args.node)
    if args.print:
        import shlex

        say(shlex.join(argv))
        return ExitCode.OK
    sys.stdout.flush()
    os.execvp(argv[0], argv)


def cmd_demo(args: argparse.Namespace) -> int:
    """Launch the demo, show its training output, kill it, check it is gone."""
    from mntui.sessions import launch
    from mntui.sessions.launch import LineSplitter, read_new
    from mntui.sessions.ssh import Cluster

    cfg = load_config(demo_config_path())
    t0 = time.time()
    say(f"== launching the demo ({cfg.path})")
    with Cluster(cfg.nodes, cfg.ssh) as cluster:
        try:
            result = launch.launch(cfg, on_event=printer(t0), restart=True, cluster=cluster)
        except LaunchError as exc:
            say(f"mntui: demo launch failed: {exc}", err=True)
            return ExitCode.FAILED
        say(f"== launched in {time.time() - t0:.1f}s; training output:")
        offsets = {n.node: 0 for n in result.plan.nodes}
        splitters = {n.node: LineSplitter() for n in result.plan.nodes}
        first_step: float | None = None
        deadline = time.time() + 120
        try:
            while time.time() < deadline and (
                first_step is None or time.time() - first_step < args.seconds
            ):
                for np in result.plan.nodes:
                    chunk = read_new(cluster.nodes[np.node], np.run_dir, offsets[np.node])
                    offsets[np.node] = chunk.offset
                    for line in splitters[np.node].feed(chunk.data):
                        say(f"[{np.node}:{np.rank}] {line}")
                        if first_step is None and line.startswith("step "):
                            first_step = time.time()
                            say(f"== first training step {first_step - t0:.1f}s after launch")
                time.sleep(0.5)
        finally:
            say("== killing the demo")
            t1 = time.time()
            ok = run_kill(cfg, None, None, t1)
    return ExitCode.OK if ok and first_step is not None else ExitCode.FAILED
