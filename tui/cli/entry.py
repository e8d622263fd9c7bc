"""`mntui` on the command line: the headless form of everything the app does.

Headless paths import neither Textual nor the app, so `mntui kill` starts fast
and works over a bare SSH session at 3 a.m. This is the entry point: it hands each verb
to its handler and turns whatever goes wrong into one line and an exit code. The verbs
that only look (status, logs, report, doctor, nodes) are here, each a few lines
that hand over to its view; the grammar is args.py's, the verbs that start or stop
processes are job_verbs.py's, and all output goes through output.py's one writer.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

from mntui.sessions.errors import ExitCode, UsageError

from .args import build_parser, check_nodes, demo_config_path, find_run, where
from .completion import autocomplete
from .configpath import find_config
from .guard import guarded, unwind_on_signals
from .output import say

if TYPE_CHECKING:
    from mntui.sessions.config import JobConfig

# Each verb's handler is imported when it runs: a cold `status` of a run the cluster
# watches (quickstatus.py) must not pay for the config's loader, the SSH library or the
# other verbs, and neither `kill` at 3 a.m.
NO_CONFIG = frozenset({"history", "quarantine"})
# Verbs that act on a recorded run reach the nodes its chain used, not the file's.
ON_THE_RUN = frozenset({"kill", "cleanup", "attach", "status", "logs", "report"})


def main(argv: Sequence[str] | None = None, quick: bool = True) -> int:
    """`quick`: whether a plain status may still try the board (quickstatus.py); no when
    the CLI's package tried it before the grammar loaded."""
    own = argv is None  # the process's own command line, not a caller's
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    autocomplete(parser)  # a shell's TAB: answered here, and the process exits
    args = parse(parser, argv)
    if args.cmd is None:
        return cmd_app(args)
    unwind_on_signals()
    return guarded(args.cmd, partial(_verb, args, own, quick))


def _verb(args: argparse.Namespace, own: bool, quick: bool) -> int:
    if args.cmd == "demo":
        from .job_verbs import cmd_demo

        return cmd_demo(args)
    if args.cmd in ("init", "completion"):  # no config yet, or none needed
        return cmd_setup(args)
    if args.cmd in NO_CONFIG:  # the state dir only: no config needed
        from .history_view import cmd_history, cmd_quarantine

        return (cmd_history if args.cmd == "history" else cmd_quarantine)(args)
    if quick and args.cmd == "status" and args.run is None and not args.watch:
        from .quickstatus import leave, quick_status

        if (code := quick_status(args.config, args.json, say)) is not None:
            return leave(code) if own else code
    return run_verb(args)


def run_verb(args: argparse.Namespace) -> int:
    """A verb that needs the job's config: loaded (and remembered for a later cold
    status, quickstatus.py), then pointed at where the recorded run is."""
    from mntui.sessions.config import load_config

    from .job_verbs import cmd_attach, cmd_cleanup, cmd_kill, cmd_launch
    from .quickstatus import remember

    path = find_config(args.config)
    cfg = load_config(path)
    remember(path, cfg)
    if args.cmd in ON_THE_RUN:
        cfg = where(cfg, getattr(args, "run", None))
    handler = {
        "launch": cmd_launch,
        "kill": cmd_kill,
        "cleanup": cmd_cleanup,
        "attach": cmd_attach,
        "status": cmd_status,
        "logs": cmd_logs,
        "report": cmd_report,
        "doctor": cmd_doctor,
        "nodes": cmd_nodes,
    }[args.cmd]
    return int(handler(cfg, args))


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """`mntui init HOST... -- COMMAND...`: the words after `--` are the job's command,
    never hosts (argparse would take them as more positionals, or refuse them)."""
    if "--" in argv:
        cut = argv.index("--")
        args = parser.parse_args(argv[:cut])
        if args.cmd == "init":
            args.command = argv[cut + 1 :]
            return args
    return parser.parse_args(argv)


def cmd_setup(args: argparse.Namespace) -> int:
    if args.cmd == "completion":
        from .completion import script

        say(script(args.shell), end="")
        return ExitCode.OK
    from .init_config import cmd_init

    return cmd_init(args)


def cmd_app(args: argparse.Namespace) -> int:
    """The full-screen app; with no config it opens the bundled demo, ready to launch."""
    try:
        path = find_config(args.config)
        demo = False
    except UsageError:
        path, demo = demo_config_path(), True
    from mntui.sessions.config import ConfigError, load_config

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


def cmd_status(cfg: JobConfig, args: argparse.Namespace) -> int:
    """No recorded run of the job is nothing running (exit 3), not a usage error; a
    record that is there but cannot be read is no proof of that (every verb reads it
    as unknown too): that is said, exit 1."""
    from mntui.sessions.errors import state_dir
    from mntui.sessions.runs import latest

    from .views import cmd_status as view

    if args.run is None and latest(cfg.job) is None:
        if (state_dir() / cfg.job / "latest").exists():
            say(f"mntui: the record of {cfg.job!r}'s latest run cannot be read "
                f"({state_dir() / cfg.job}); its job may still run: `mntui kill` "
                "reaches it by tag", err=True)  # fmt: skip
            return ExitCode.FAILED
        say(
            f"nothing of job {cfg.job!r} is running: no recorded run on this machine", err=args.json
        )
        return ExitCode.NOT_RUNNING
    return view(cfg, find_run(cfg, args.run), args.json, args.watch, say, args.verbose)


def cmd_logs(cfg: JobConfig, args: argparse.Namespace) -> int:
    from .logs_view import cmd_logs as view

    nodes = check_nodes(cfg, args.nodes)
    record = find_run(cfg, args.run)
    return view(cfg, record, nodes, args.follow, args.lines, args.fetch, say, args.verbose)


def cmd_report(cfg: JobConfig, args: argparse.Namespace) -> int:
    from .report_view import cmd_report as view

    return view(cfg, find_run(cfg, args.run), args.json, say, args.verbose, args.run is not None)


def cmd_doctor(cfg: JobConfig, args: argparse.Namespace) -> int:
    from .doctor_view import cmd_doctor as view

    return view(
        cfg,
        say,
        allreduce=args.allreduce,
        pairs=args.pairs,
        timeout=args.timeout,
        as_json=args.json,
        verbose=args.verbose,
    )


def cmd_nodes(cfg: JobConfig, args: argparse.Namespace) -> int:
    import json

    from .history_view import history_section, nodes_history
    from .nodes_view import format_listing, listing

    if args.history:
        return nodes_history(args.json)
    data = listing(cfg)
    say(json.dumps(data, indent=2) if args.json else format_listing(data))
    if not args.json:
        say("\n".join(history_section(cfg)))
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
