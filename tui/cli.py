"""`mntui` on the command line: the headless form of everything the app does.

Headless paths import neither Textual nor the app, so `mntui kill` starts fast
and works over a bare SSH session at 3 a.m.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from mntui.sessions.config import ConfigError, JobConfig, load_config
from mntui.sessions.errors import ExitCode, MntuiError, UsageError, log_exception
from mntui.sessions.events import Event

if TYPE_CHECKING:
    from mntui.sessions.agentclient import Via
    from mntui.sessions.runs import RunRecord

DEFAULT_CONFIG = "mntui.yaml"


def demo_config_path() -> Path:
    return Path(str(resources.files("mntui.configs").joinpath("demo.yaml")))


def find_config(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    if Path(DEFAULT_CONFIG).exists():
        return Path(DEFAULT_CONFIG)
    raise UsageError(
        "no config: pass -c FILE or create ./mntui.yaml "
        "(see configs/example.yaml); `mntui demo` runs the bundled demo"
    )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


_OUT = threading.Lock()  # one writer: node threads report at once (kill, launch, watch)


def say(*parts: object, err: bool = False, end: str = "\n") -> None:
    """print() in one write of a whole line, under one lock for stdout and stderr: events
    from parallel node threads must never splice into each other's lines. It survives a
    closed pipe (`mntui demo | head`): losing our output must never stop the cleanup
    that follows it."""
    text = " ".join(map(str, parts)) + end
    with _OUT:
        try:
            stream = sys.stderr if err else sys.stdout
            stream.write(text)
            stream.flush()
        except (BrokenPipeError, ValueError):
            try:
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
            except OSError:
                pass


def printer(t0: float) -> Callable[[Event], None]:
    return lambda event: say(event.format(t0))


def check_nodes(cfg: JobConfig, names: Sequence[str]) -> list[str]:
    """Node names typed on the command line, each checked against the config."""
    known = [n.name for n in cfg.nodes]
    for name in names:
        if name not in known:
            raise UsageError(f"unknown node {name!r}; nodes are {', '.join(known)}")
    return list(names)


# -- the command line -----------------------------------------------------------------
# Numbers are checked where they are typed: `--grace nan` or `--grace -100` once reached
# the kill as a NaN or negative deadline. These are local until the shared validator of
# sessions/config.py (issue 10 item 4) can serve the CLI too.
MAX_LINES = 10_000_000


def seconds(low: float, high: float, *, above: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds from `low` (excluded when `above`)
    to `high`."""
    bounds = f"{'more than' if above else 'at least'} {low:g} and at most {high:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not math.isfinite(value) or value < low or (above and value == low) or value > high:
            raise argparse.ArgumentTypeError(f"{text!r}: seconds must be {bounds}")
        return value

    return parse


def count(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` to `high`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r}: must be from {low} to {high}")
        return value

    return parse


class Parser(argparse.ArgumentParser):
    """Bad flags get one line and exit 2, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        self.exit(ExitCode.USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def config_help() -> str:
    """Says which config a verb will use when -c is not given, as found right now."""
    here = Path(DEFAULT_CONFIG)
    if here.is_file():
        return f"job config (default ./{DEFAULT_CONFIG}: found, {here.resolve()})"
    return (
        f"job config (default ./{DEFAULT_CONFIG}: none here, so pass -c FILE; "
        "`mntui` alone opens the bundled demo)"
    )


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="mntui",
        description="Launch, watch and cleanly kill multi-node "
        "PyTorch jobs on SSH-reachable nodes.",
    )
    ap.add_argument("-c", "--config", help=config_help())
    # -c after the verb too (`mntui launch -c job.yaml`): every verb takes it, and leaves
    # the one given before the verb alone when it is not repeated.
    common = Parser(add_help=False)
    common.add_argument("-c", "--config", default=argparse.SUPPRESS, help=config_help())
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")

    def verb(name: str, summary: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, parents=[common])

    _launch_verbs(verb)
    _watch_verbs(verb)
    _check_verbs(verb)
    return ap


Verb = Callable[[str, str], argparse.ArgumentParser]


def _launch_verbs(verb: Verb) -> None:
    p = verb("launch", "start the job: main first, workers once it is ready")
    p.add_argument("--no-ui", action="store_true", help="headless: print progress and return")
    p.add_argument(
        "--dry-run", action="store_true", help="print the per-node plan and scripts; touch nothing"
    )
    p.add_argument(
        "--restart", action="store_true", help="kill a running instance of the job first"
    )
    p.add_argument(
        "--no-watch",
        action="store_true",
        help="do not start the watchdog that tears the job down when a node fails",
    )
    p.add_argument("--no-sync", action="store_true", help="skip the config's code sync")

    p = verb("kill", "kill every process of the job on every node")
    p.add_argument(
        "--grace",
        type=seconds(0, 3600),
        help="seconds between SIGTERM and SIGKILL, 0 to 3600 (default: config)",
    )
    p.add_argument("nodes", nargs="*", help="only these nodes (default: all)")
    _verbose(p)

    p = verb("cleanup", "free the job's ports: name who holds them, kill if ours")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")

    p = verb("attach", "attach to a node's tmux session (default: the main)")
    p.add_argument("node", nargs="?")
    p.add_argument(
        "--all", action="store_true", help="one local tiled view of every node's session"
    )
    p.add_argument("--print", action="store_true", help="print the command instead of running it")


def _watch_verbs(verb: Verb) -> None:
    p = verb("status", "every node's state, GPUs, processes, ports, output age")
    p.add_argument("--json", action="store_true", help="the whole snapshot as JSON")
    p.add_argument("--watch", action="store_true", help="refresh in place until Ctrl+C")
    p.add_argument("--run", help="a run id (default: the latest)")
    _verbose(p)

    p = verb("logs", "the job's output: all nodes interleaved, or some")
    p.add_argument("nodes", nargs="*")
    p.add_argument(
        "-f", "--follow", action="store_true", help="keep printing new output until Ctrl+C"
    )
    p.add_argument(
        "-n",
        "--lines",
        type=count(0, MAX_LINES),
        help="start with the last N lines of each node",
    )
    p.add_argument(
        "--fetch",
        action="store_true",
        help="copy every node's output.log into the local run record",
    )
    p.add_argument("--run", help="a run id (default: the latest)")
    _verbose(p)

    p = verb("watch", "the watchdog, in the foreground")
    p.add_argument("--run", help="a run id (default: the latest)")

    p = verb("report", "why the run ended: which rank broke first, and why (live: stacks now)")
    p.add_argument("--json", action="store_true", help="the whole report as JSON")
    p.add_argument("--run", help="a run id (default: the latest)")
    _verbose(p)


def _verbose(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="say on stderr whether the run's agent answered, or direct connections (and why)",
    )


def _check_verbs(verb: Verb) -> None:
    p = verb("doctor", "preflight checks on every node (and an all-reduce smoke test)")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--allreduce", action="store_true", help="also launch a torch all-reduce smoke test"
    )
    p.add_argument(
        "--timeout",
        type=seconds(0, 3600, above=True),
        default=60.0,
        help="smoke test timeout, seconds (more than 0, at most 3600)",
    )

    p = verb("nodes", "the job's nodes as a command sees them: ranks, nproc, where from")
    p.add_argument("--json", action="store_true")

    p = verb("demo", "run the bundled 2-node CPU demo: launch, show training, kill")
    p.add_argument(
        "--seconds",
        type=seconds(0, 3600, above=True),
        default=8.0,
        help="seconds of training to show (more than 0, at most 3600)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cmd is None:
        return cmd_app(args)
    # A closed terminal or a `kill` must unwind like Ctrl+C, so a half-done launch is
    # stopped and the demo is cleaned up.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    try:
        if args.cmd == "demo":
            return cmd_demo(args)
        cfg = load_config(find_config(args.config))
        handler = {
            "launch": cmd_launch,
            "kill": cmd_kill,
            "cleanup": cmd_cleanup,
            "attach": cmd_attach,
            "status": cmd_status,
            "logs": cmd_logs,
            "watch": cmd_watch,
            "report": cmd_report,
            "doctor": cmd_doctor,
            "nodes": cmd_nodes,
        }[args.cmd]
        return handler(cfg, args)
    except UsageError as exc:
        say(f"mntui: {exc}", err=True)
        return ExitCode.USAGE
    except MntuiError as exc:
        say(f"mntui: {exc}", err=True)
        return ExitCode.FAILED
    except KeyboardInterrupt:
        say("mntui: interrupted", err=True)
        return ExitCode.INTERRUPTED
    except Exception as exc:  # a bug: one line here, the traceback in the error log
        log = log_exception(f"mntui {args.cmd}", exc)
        say(
            f"mntui: internal error: {type(exc).__name__}: {exc}"
            + (f" (traceback in {log})" if log else ""),
            err=True,
        )
        return ExitCode.FAILED


def cmd_app(args: argparse.Namespace) -> int:
    """The full-screen app; with no config it opens the bundled demo, ready to launch."""
    try:
        path = find_config(args.config)
        demo = False
    except UsageError:
        path, demo = demo_config_path(), True
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        say(f"mntui: {exc}", err=True)
        return ExitCode.USAGE
    if not sys.stdout.isatty():
        say(
            "mntui: the app needs a terminal; headless: mntui launch --no-ui, status, logs, kill",
            err=True,
        )
        return ExitCode.USAGE
    from mntui.tui.app import run_app

    if demo:
        say(f"mntui: no ./mntui.yaml; opening the bundled demo ({path}); press l to launch it")
    return run_app(cfg)


def cmd_launch(cfg: JobConfig, args: argparse.Namespace) -> int:
    from mntui.sessions import launch, plan
    from mntui.sessions.remote import NodeError

    if args.no_sync:
        from dataclasses import replace

        cfg = replace(cfg, sync=None)
    if not args.no_ui and not args.dry_run:
        from mntui.tui.app import run_app

        if not sys.stdout.isatty():
            say("mntui: no terminal for the app; use --no-ui", err=True)
            return ExitCode.USAGE
        return run_app(cfg, launch_now=True, restart=args.restart, watchdog=not args.no_watch)
    if args.dry_run:
        try:
            say(plan.describe(launch.make_plan(cfg)))
        except NodeError as exc:
            say(f"mntui: {exc}", err=True)
            return ExitCode.FAILED
        return ExitCode.OK
    t0 = time.time()
    try:
        result = launch.launch(cfg, on_event=printer(t0), restart=args.restart)
    except launch.LaunchError as exc:
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
    if not args.no_watch:
        from mntui.sessions.watch import start_detached

        name = start_detached(cfg, result.record)
        say(
            f"watchdog running in local tmux session {name} "
            f"(on failure: {cfg.watch.on_failure.value}); "
            f"--no-watch to go without"
        )
    return ExitCode.OK


def find_run(cfg: JobConfig, run_id: str | None) -> RunRecord:
    from mntui.sessions.runs import check_run_id, latest, load_run

    record = load_run(cfg.job, check_run_id(run_id)) if run_id else latest(cfg.job)
    if record is None:
        raise UsageError(
            f"{cfg.path}: no recorded run{' ' + run_id if run_id else ''} of job "
            f"{cfg.job!r} on this machine (mntui launch records one)"
        )
    return record


def cmd_status(cfg: JobConfig, args: argparse.Namespace) -> int:
    from mntui.tui.views import cmd_status as view

    return view(cfg, find_run(cfg, args.run), args.json, args.watch, say, args.verbose)


def cmd_logs(cfg: JobConfig, args: argparse.Namespace) -> int:
    from mntui.tui.logs_view import cmd_logs as view

    nodes = check_nodes(cfg, args.nodes)
    record = find_run(cfg, args.run)
    return view(cfg, record, nodes, args.follow, args.lines, args.fetch, say, args.verbose)


def cmd_report(cfg: JobConfig, args: argparse.Namespace) -> int:
    from mntui.tui.report_view import cmd_report as view

    return view(cfg, find_run(cfg, args.run), args.json, say, args.verbose)


def cmd_watch(cfg: JobConfig, args: argparse.Namespace) -> int:
    from mntui.tui.views import cmd_watch as view

    return view(cfg, find_run(cfg, args.run), say)


def run_kill(
    cfg: JobConfig, names: list[str] | None, grace: float | None, t0: float, verbose: bool = False
) -> bool:
    """On the agent's open connections when the job's latest run has one (no handshakes);
    directly when it has none or it goes away midway (a kill is safe to repeat)."""
    from mntui.sessions import agentclient
    from mntui.sessions.runs import latest

    record = latest(cfg.job)
    client, via = agentclient.try_connect(record.dir) if record is not None else (None, None)
    if client is not None:
        with client:
            try:
                clean, text = agentclient.kill(
                    client, names, cfg.grace if grace is None else grace, printer(t0)
                )
                return _killed(clean, text, t0, via if verbose else None)
            except agentclient.AgentUnavailable as exc:
                via = agentclient.Via(False, f"{exc}; killing directly")
    from mntui.sessions.kill import stop_job, summarize
    from mntui.sessions.remote import Cluster

    with Cluster(cfg.nodes, cfg.ssh) as cluster:
        results = stop_job(cfg, cluster, names=names, grace=grace, on_event=printer(t0))
    clean, text = summarize(cfg.job, results)
    via = via or agentclient.Via(False, "no run recorded")
    return _killed(clean, text, t0, via if verbose else None)


def _killed(clean: bool, text: str, t0: float, via: Via | None) -> bool:
    if via is not None:
        say(f"mntui: {via.describe()}", err=True)
    say(f"{text} ({time.time() - t0:.1f}s)", err=not clean)
    return clean


def cmd_kill(cfg: JobConfig, args: argparse.Namespace) -> int:
    nodes = check_nodes(cfg, args.nodes)
    clean = run_kill(cfg, nodes or None, args.grace, time.time(), args.verbose)
    return ExitCode.OK if clean else ExitCode.FAILED


def cmd_cleanup(cfg: JobConfig, args: argparse.Namespace) -> int:
    from mntui.sessions.kill import free_ports, port_holders
    from mntui.sessions.remote import Cluster

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
            say(f"{name}: still busy: {h.describe()}")
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
    from mntui.sessions.attach import attach_all_argv, attach_argv

    if args.node:
        check_nodes(cfg, [args.node])
    argv = attach_all_argv(cfg) if args.all else attach_argv(cfg, args.node)
    if args.print:
        import shlex

        say(shlex.join(argv))
        return ExitCode.OK
    sys.stdout.flush()
    os.execvp(argv[0], argv)


def cmd_doctor(cfg: JobConfig, args: argparse.Namespace) -> int:
    """Exit 0: all pass; 1: warnings; 2: failures."""
    import json
    from dataclasses import asdict

    from mntui.sessions import doctor
    from mntui.sessions.remote import Cluster

    t0 = time.time()
    with Cluster(cfg.nodes, cfg.ssh) as cluster:
        rows = doctor.run_checks(cfg, cluster)
        if args.allreduce:
            if any(
                r.status is doctor.Status.FAIL and r.check in ("ssh", "ports", "leftovers")
                for r in rows
            ):
                rows.append(
                    doctor.Check(
                        cfg.main, "allreduce", doctor.Status.FAIL, "skipped: fix the failures above"
                    )
                )
            else:
                rows += doctor.allreduce(cfg, cluster, args.timeout)
    if args.json:
        say(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        say(doctor.format_rows(rows))
        say(f"{len(cfg.nodes)} node(s), {len(rows)} checks in {time.time() - t0:.1f}s")
    return ExitCode(doctor.exit_code(rows))


def cmd_nodes(cfg: JobConfig, args: argparse.Namespace) -> int:
    import json

    from mntui.sessions.nodesource import format_listing, listing

    data = listing(cfg)
    say(json.dumps(data, indent=2) if args.json else format_listing(data))
    return ExitCode.OK


def cmd_demo(args: argparse.Namespace) -> int:
    """Launch the demo, show its training output, kill it, check it is gone."""
    from mntui.sessions import launch
    from mntui.sessions.logs import LineSplitter, read_new
    from mntui.sessions.remote import Cluster

    cfg = load_config(demo_config_path())
    t0 = time.time()
    say(f"== launching the demo ({cfg.path})")
    with Cluster(cfg.nodes, cfg.ssh) as cluster:
        try:
            result = launch.launch(cfg, on_event=printer(t0), restart=True, cluster=cluster)
        except launch.LaunchError as exc:
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


if __name__ == "__main__":
    sys.exit(main())
