"""The command line's grammar, and what its words name: the config, nodes, a run.

Every value is checked where it is typed and a bad one is one line and exit 2, like every
other bad input (never a traceback, never a NaN deadline reaching a kill). `-c` is taken
before or after the verb; when it is not given, ./mntui.yaml is the config, and `--help`
says whether there is one here.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from mntui.sessions.errors import ExitCode, UsageError

from .configpath import DEFAULT_CONFIG
from .examples import epilog

if TYPE_CHECKING:
    from mntui.sessions.config import JobConfig
    from mntui.sessions.runs import RunRecord


def demo_config_path() -> Path:
    from importlib import resources  # not on every verb's way: it costs a cold `status`

    return Path(str(resources.files("mntui.configs").joinpath("demo.yaml")))


def check_nodes(cfg: JobConfig, names: Sequence[str]) -> list[str]:
    """Node names typed on the command line, each checked against where the job runs
    (`where`'s config)."""
    from mntui.sessions.launch import check_nodes as check

    return check(cfg, list(names))


def where(cfg: JobConfig, run_id: str | None = None) -> JobConfig:
    """The config as the job's records say it runs (the chain of `run_id`, default the
    latest): a spare swapped in, a node the file no longer names. The file's nodes
    decide a new launch only."""
    from mntui.sessions.launch import chain_of, run_config
    from mntui.sessions.runs import check_run_id, load_run

    record = load_run(cfg.job, check_run_id(run_id)) if run_id else None
    return run_config(cfg, chain_of(cfg.job, record))


def find_run(cfg: JobConfig, run_id: str | None) -> RunRecord:
    from mntui.sessions.runs import check_run_id, latest, load_run

    record = load_run(cfg.job, check_run_id(run_id)) if run_id else latest(cfg.job)
    if record is None:
        raise UsageError(
            f"{cfg.path}: no recorded run{' ' + run_id if run_id else ''} of job "
            f"{cfg.job!r} on this machine (mntui launch records one)"
        )
    return record


# -- the grammar ----------------------------------------------------------------------
# Numbers are checked where they are typed: `--grace nan` or `--grace -100` once reached
# the kill as a NaN or negative deadline. These are local until the shared validator of
# sessions/config/checks.py (check_seconds, issue 10 item 4) can serve the CLI too.
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


def _version() -> str:
    """The installed distribution's (pyproject.toml), or unknown when run from a tree
    that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mntui")
    except PackageNotFoundError:
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="mntui",
        description="Launch, watch and cleanly kill multi-node "
        "PyTorch jobs on SSH-reachable nodes.",
        epilog=epilog(None),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("-c", "--config", help=config_help())
    ap.add_argument("--version", action="version", version=f"mntui {_version()}")
    # -c after the verb too (`mntui launch -c job.yaml`): every verb takes it, and leaves
    # the one given before the verb alone when it is not repeated.
    common = Parser(add_help=False)
    common.add_argument("-c", "--config", default=argparse.SUPPRESS, help=config_help())
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")

    def verb(name: str, summary: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=summary,
            parents=[common],
            epilog=epilog(name),  # one example a verb (examples.py)
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    _setup_verbs(verb)
    _launch_verbs(verb)
    _watch_verbs(verb)
    _check_verbs(verb)
    _history_verbs(verb)
    return ap


Verb = Callable[[str, str], argparse.ArgumentParser]


def _setup_verbs(verb: Verb) -> None:
    p = verb("init", "write a commented ./mntui.yaml for your hosts (then: mntui doctor)")
    p.usage = "mntui init [options] [HOST ...] [-- COMMAND ...]"
    p.add_argument("hosts", nargs="*", metavar="HOST", help="the nodes as you ssh them, main first")
    p.add_argument("--hostfile", metavar="FILE", help="the nodes of a DeepSpeed/MPI hostfile")
    p.add_argument("--slurm", action="store_true", help="the nodes of the Slurm allocation")
    p.add_argument("--job", help="the job's name (default: this directory's)")
    p.add_argument("--workdir", help="where the code is on the nodes (default: as here)")
    p.add_argument("--nproc", type=count(1, 1024), default=1, help="processes (GPUs) per node")
    p.add_argument("--port", type=count(1, 65535), default=29500, help="the master port")
    p.add_argument("--ssh-config", metavar="FILE", help="an ssh_config to use (default: ssh's)")

    p = verb("completion", "print the shell completion script (bash, zsh, fish)")
    p.add_argument("shell", choices=("bash", "zsh", "fish"))


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
        help="no watch: no sentinel or coordinator starts, nothing tears the job down when "
        "a node fails and no report is saved; `status` says the run is unwatched",
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
        "-f",
        "--follow",
        action="store_true",
        help="keep printing new output until Ctrl+C (from each node's last 10 lines, or -n)",
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

    p = verb("report", "why the run ended: which rank broke first, and why (live: stacks now)")
    p.add_argument("--json", action="store_true", help="the whole report as JSON")
    p.add_argument("--run", help="a run id (default: the latest)")
    _verbose(p)


HOW_READ = "say on stderr how the run is read: through its coordinator, or its nodes directly"


def _verbose(p: argparse.ArgumentParser, says: str = HOW_READ) -> None:
    """`-v` wherever a new user would type it for more: each verb says what more is."""
    p.add_argument("-v", "--verbose", action="store_true", help=says)


def _check_verbs(verb: Verb) -> None:
    p = verb("doctor", "preflight checks on every node (and an all-reduce smoke test)")
    p.add_argument("--json", action="store_true", help="the rows as JSON (the counts on stderr)")
    p.add_argument(
        "--allreduce", action="store_true", help="also launch a torch all-reduce smoke test"
    )
    p.add_argument(
        "--pairs",
        action="store_true",
        help="all-reduce between pairs of nodes, in two rounds: name a slow node or link",
    )
    p.add_argument(
        "--timeout",
        type=seconds(0, 3600, above=True),
        default=60.0,
        help="smoke test timeout, seconds (more than 0, at most 3600)",
    )
    _verbose(
        p,
        "say on stderr what each step runs and how long it took; after the table, how each "
        "check was made (to repeat it by hand)",
    )

    p = verb("nodes", "the job's nodes as a command sees them: ranks, nproc, where from")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--history", action="store_true", help="every node's failures across all recorded runs"
    )

    p = verb("demo", "run the bundled 2-node CPU demo: launch, show training, kill")
    p.add_argument(
        "--seconds",
        type=seconds(0, 3600, above=True),
        default=8.0,
        help="seconds of training to show (more than 0, at most 3600)",
    )


def span(text: str) -> float:
    """An argparse type: a time span (`24h`, `7d`, `90m`, or seconds)."""
    from mntui.sessions.config import parse_span

    try:
        return parse_span(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def job_name(text: str) -> str:
    """An argparse type: a job's name, never a path (`--job ../x` would leave the state dir)."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a job name (letters, digits, _ and -)")
    return text


def _history_verbs(verb: Verb) -> None:
    p = verb("history", "the goodput ledger: per restart chain, training time and time lost")
    p.add_argument("--job", type=job_name, help="only this job (default: every job here)")
    p.add_argument("--since", type=span, help="only runs started within this span: 7d, 24h")
    p.add_argument("--json", action="store_true")

    p = verb("quarantine", "keep nodes out of launches for a while (--list, --release NODE)")
    p.add_argument("nodes", nargs="*", help="the nodes to quarantine")
    p.add_argument(
        "--for", dest="hold", type=span, default=86400.0, help="how long: 24h (default), 7d, 90m"
    )
    p.add_argument("--why", help="the reason, shown to whoever launches on the node")
    p.add_argument("--list", action="store_true", help="the quarantined nodes (default: no node)")
    p.add_argument("--release", action="append", metavar="NODE", help="end NODE's quarantine")
    p.add_argument("--json", action="store_true", help="the list as JSON")
