"""`mntui init`: a first mntui.yaml, written from the hosts and the training command.

A newcomer's first hour goes into the config: which keys, which placeholders, which
node is rank 0. `init` writes one that is commented where it matters, with a torchrun
command that already carries the placeholders, reads it back with the config loader
before it keeps it (a file it writes always loads), checks each host as `ssh` resolves
it, and never overwrites a file. The text is built here; hostcheck.py does the looking.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

from mntui.sessions.config import ConfigError, JobConfig, load_config
from mntui.sessions.errors import ExitCode, UsageError

from .configpath import DEFAULT_CONFIG
from .output import say

# The config's placeholders (config/jobchecks.py's TEMPLATE_FIELDS); the flags torchrun
# needs from them, in the order people write them.
PLACEHOLDERS = ("nnodes", "node_rank", "nproc_per_node", "master_addr", "master_port")
TORCHRUN_FLAGS = tuple(f"--{name}={{{name}}}" for name in PLACEHOLDERS)
_KNOWN = re.compile(
    r"\{(?:node_rank|nnodes|master_addr|master_port|nproc_per_node|node|restart_count)\}"
)
_JOB_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
_NODE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
WIDTH = 88  # of a command line in the written file


def _word(word: str) -> str:
    """One command word for the template: shell-quoted as needed, a known placeholder
    left bare (render_command quotes its value), every other brace doubled (literal)."""
    parts = _KNOWN.split(word)
    marks = _KNOWN.findall(word)
    token = "MNTUIPLACEHOLDER"
    quoted = shlex.quote(token.join(p.replace("{", "{{").replace("}", "}}") for p in parts))
    for mark in marks:
        quoted = quoted.replace(token, mark, 1)
    return quoted


def _is_torchrun(words: Sequence[str]) -> int:
    """How many leading words start torchrun (`torchrun`, `python -m torch.distributed.run`)."""
    if words and os.path.basename(words[0]) == "torchrun":
        return 1
    if len(words) >= 3 and os.path.basename(words[0]).startswith("python") and words[1] == "-m":
        return 3 if words[2] == "torch.distributed.run" else 0
    return 0


def command_template(words: Sequence[str]) -> str:
    """torchrun with every rendezvous flag from the placeholders: a `train.py ...` gets
    `torchrun <flags>` in front, a torchrun gets the flags it lacks, anything else (a
    script of your own) is kept as written: NODE_RANK, MASTER_ADDR etc. are in its
    environment anyway."""
    words = list(words) or ["train.py"]
    head = _is_torchrun(words)
    if not head and not words[0].endswith(".py"):
        return " ".join(_word(w) for w in words)
    launcher = words[:head] if head else ["torchrun"]
    rest = words[head:]
    given = {w.split("=", 1)[0] for w in rest if w.startswith("--")}
    flags = [f for f in TORCHRUN_FLAGS if f.split("=", 1)[0] not in given]
    return " ".join([*map(_word, launcher), *flags, *map(_word, rest)])


def _folded(text: str) -> str:
    """The command as a YAML block (`>-`, lines of WIDTH joined by single spaces when
    read) when that reads back exactly; else one JSON string, which YAML reads too."""
    plain = text.isascii() and text.isprintable() and text == text.strip() and "  " not in text
    if not plain:
        return " " + json.dumps(text)
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= WIDTH:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return " >-\n" + "\n".join(f"  {line}" for line in lines)


def node_entries(hosts: Sequence[str]) -> list[str]:
    """YAML list items: `g369`, or `{name: g369, host: "alice@g369"}` when the host is
    not a node name itself; a host that names no node is a usage error."""
    out = []
    for host in hosts:
        if _NODE_RE.match(host):
            out.append(host)
            continue
        name = host.rsplit("@", 1)[-1]
        if not _NODE_RE.match(name):
            raise UsageError(
                f"init: {host!r} is not a host name (letters, digits, '.', '-', '_'; user@host)"
            )
        out.append(f"{{name: {name}, host: {json.dumps(host)}}}")
    return out


def default_job(cwd: Path) -> str:
    """The current directory's name, in the characters a job name may hold."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", cwd.name).strip("-_")[:64]
    return name if _JOB_RE.match(name) else "train"


def default_workdir(cwd: Path) -> str:
    """Where the code is here, written so each node finds it at the same place: under
    the home directory as `~/...` (each node's own home), else as it is."""
    home = Path.home()
    try:
        return "~/" + str(cwd.relative_to(home)) if cwd != home else "~"
    except ValueError:
        return str(cwd)


def _line(text: str, comment: str = "") -> str:
    """A YAML line, its comment aligned where the eye looks for it."""
    return f"{text:<33} # {comment}" if comment else text


def nodes_block(hosts: Sequence[str], hostfile: str | None, slurm: bool) -> str:
    if hostfile is not None:
        return _line(f"nodes: {{hostfile: {json.dumps(hostfile)}}}", "`host slots=N` lines")
    if slurm:
        return _line("nodes: {slurm: auto}", "the Slurm allocation mntui runs in")
    items = [f"  - {item}" for item in node_entries(hosts)]
    return "\n".join([_line("nodes:", "the first is the main, rank 0"), *items])


def render(
    *,
    job: str,
    nodes: str,
    workdir: str,
    command: str,
    nproc: int,
    port: int,
    ssh_config: str | None,
) -> str:
    """The file: the keys a first launch needs, each with a line on what it does; the
    rest (restarts, sync, notifications) named in comments, at their defaults."""
    ssh = f"  config: {json.dumps(ssh_config)}" if ssh_config else "  # config: ~/.ssh/config"
    lines = [
        f"# mntui.yaml, by `mntui init` on {time.strftime('%Y-%m-%d')}. Every key: docs/config.md",
        "# Next: `mntui doctor` checks every node; `mntui launch --dry-run` shows what each runs.",
        _line(f"job: {job}", "names run records and tmux sessions"),
        nodes,
        _line('# nodes: "g[369-376]"', "or a node set; {hostfile: F}; {slurm: auto}"),
        _line("# main: g369", "rank 0; default: the first node"),
        "",
        _line(f"workdir: {json.dumps(workdir)}", "`cd` here on every node (~: its home)"),
        _line("# setup:", "shell lines run first, in the same shell"),
        "#   - source ~/venv/bin/activate",
        _line("env:", "for every node (NODE_RANK etc. are mntui's)"),
        "  OMP_NUM_THREADS: 1",
        "",
        _line(f"master_port: {port}", "torchrun's rendezvous, on the main"),
        _line(f"nproc_per_node: {nproc}", "processes per node: its GPU count"),
        "# Placeholders, substituted per node: {nnodes} {node_rank} {nproc_per_node}",
        "# {master_addr} {master_port} {node} {restart_count}; {{ and }} are literal braces.",
        f"command:{_folded(command)}",
        "",
        "launch:",
        _line("  ready: port", "up when master_port listens (or: log, delay)"),
        _line("  ready_timeout: 300", "seconds"),
        "kill:",
        _line("  grace: 10", "seconds between SIGTERM and SIGKILL"),
        _line("watch:", "on the nodes themselves: this machine may sleep"),
        _line("  # where: auto", "the cluster's watch; launch --no-watch: none"),
        _line("  on_failure: kill_all", "a node failed or hung: take the job down"),
        _line("  on_stall: notify", "no output for stall_after seconds"),
        "  stall_after: 600",
        _line("# restart: {max: 3}", "bring the job back after a teardown"),
        _line("# sync: {source: .}", "copy the code to every node first"),
        "ssh:",
        "  connect_timeout: 10",
        ssh,
    ]
    return "\n".join(lines) + "\n"


def cmd_init(args: argparse.Namespace) -> int:
    """Write ./mntui.yaml (or -c FILE) for the hosts; exit 2 if it exists or the input is
    bad, 0 otherwise: an unreachable host is a warning, the file is still written."""
    path = Path(args.config or DEFAULT_CONFIG)
    if path.exists():
        raise UsageError(f"init: {path} exists; not overwriting it (remove it or pass -c NEW.yaml)")
    hosts, words = args.hosts, getattr(args, "command", [])
    sources = sum((bool(hosts), args.hostfile is not None, args.slurm))
    if sources != 1:
        raise UsageError("init: name the nodes once: HOST..., --hostfile FILE or --slurm")
    hostfile = None
    if args.hostfile is not None:
        hostfile = os.path.relpath(Path(args.hostfile).resolve(), path.resolve().parent)
    ssh_config = str(Path(args.ssh_config).expanduser().resolve()) if args.ssh_config else None
    text = render(
        job=args.job or default_job(Path.cwd()),
        nodes=nodes_block(hosts, hostfile, args.slurm),
        workdir=args.workdir or default_workdir(Path.cwd()),
        command=command_template(words),
        nproc=args.nproc,
        port=args.port,
        ssh_config=ssh_config,
    )
    cfg = _write_checked(path, text, strict=not args.slurm)
    if cfg is not None:
        from .hostcheck import check_hosts

        say(f"checking {len(cfg.nodes)} host(s): `ssh -G`, then a connect")
        results = check_hosts(cfg.nodes, cfg.ssh.config)
        for result in results:
            say(result.line())
        bad = sum(not r.ok for r in results)
        if bad:
            say(f"warning: {bad} of {len(results)} host(s) did not answer; the file is written")
    say(f"wrote {path}: job {args.job or default_job(Path.cwd())}; edit it, then:")
    say("  mntui doctor        # SSH, tmux, python, torch, GPUs and ports on every node")
    return ExitCode.OK


def _create_beside(path: Path, text: str) -> Path:
    """A new file holding `text` beside `path`, at a name no one can guess and opened
    only if nothing is there: in a shared directory, a link planted at the copy's name
    must never make init write through it (to someone's ~/.bashrc). Its mode is the
    umask's, as the kept config's always was."""
    tmp = path.with_name(f".{path.name}.init-{os.getpid()}-{secrets.token_hex(8)}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o666)
    except FileExistsError:
        raise UsageError(f"init: {tmp} exists; not writing through it (remove it)") from None
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _write_checked(path: Path, text: str, *, strict: bool) -> JobConfig | None:
    """Read `text` back with the config loader, beside `path` (relative paths resolve
    the same), and keep it only under a name nothing holds yet (a link never replaces).
    A config that does not load is a usage error, but with --slurm outside an
    allocation, where the nodes cannot be read now: written, with a warning."""
    tmp = _create_beside(path, text)
    try:
        try:
            cfg: JobConfig | None = load_config(tmp)
        except ConfigError as exc:
            why = str(exc).replace(str(tmp), str(path))
            if strict:
                raise UsageError(f"init: the config would not load: {why}") from None
            say(f"warning: the nodes cannot be read now: {why}")
            cfg = None
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise UsageError(f"init: {path} exists; not overwriting it") from None
    finally:
        tmp.unlink(missing_ok=True)
    return cfg
