"""Node sources, per-node nproc and the sync plan, without nodes: hostfile and scontrol
parsing, which nodes a command sees (now, or as a run recorded them), WORLD_SIZE and
the placeholders when nodes differ, and the rsync command lines."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mntui.sessions.config import GUARD_SCRIPT, ConfigError
from mntui.sessions.config.jobconfig import load_config, parse_config
from mntui.sessions.config.nodesource import (
    Listed,
    NodeSource,
    SourceKind,
    choose,
    from_record,
    parse_hostfile,
)
from mntui.sessions.config.slurmjobs import job_problem, parse_job
from mntui.sessions.errors import LaunchError
from mntui.sessions.launch.plan import build_plan, run_record
from mntui.sessions.launch.start import check_nodes_fresh
from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus
from mntui.sessions.sync.fanout import remote_dest
from mntui.sessions.sync.rsync import parse_stats, rsync_argv, rsync_error
from mntui.tui.cli.nodes_view import format_listing, listing

TORCHRUN = (
    "torchrun --nnodes={nnodes} --node_rank={node_rank} --nproc_per_node={nproc_per_node} "
    "--master_addr={master_addr} --master_port={master_port} train.py"
)


def write_job(tmp: Path, hosts: str, extra: str = "", job: str = "j") -> Path:
    (tmp / "hosts").write_text(hosts)
    path = tmp / "job.yaml"
    path.write_text(f"job: {job}\nnodes: {{hostfile: hosts}}\ncommand: {TORCHRUN}\n{extra}")
    return path


# ---- hostfiles ---------------------------------------------------------------------


def test_hostfile_format() -> None:
    text = "# DeepSpeed\n\ng369 slots=8\n  g370 slots=4 max_slots=8  # comment\ng371\n"
    assert parse_hostfile(text) == (Listed("g369", 8), Listed("g370", 4), Listed("g371", None))


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("a slots=1\nb slots=0\n", "f:2: slots=0: expected slots=N, N from 1 to 1024"),
        ("a slots=1\nb slots=-1\n", "f:2: slots=-1: expected slots=N"),
        ("a slots=8 slots=4\n", "f:1: slots given twice"),
        ("a\n\nb\na slots=2\n", "f:4: a is listed twice (also line 1)"),
        ("a slots 8\n", "f:1: unknown 'slots': a line is `host slots=N`"),
        ("a gpus=8\n", "f:1: unknown 'gpus=8'"),
        ("a;rm slots=1\n", "f:1: bad host name 'a;rm'"),
        ("-oProxyCommand=x\n", "f:1: bad host name '-oProxyCommand=x'"),
        ("# only comments\n\n", "f: names no host"),
        ("a\x1b[2J slots=1\n", "f:1: contains a control character"),
    ],
)
def test_bad_hostfile_lines_name_file_and_line(text: str, said: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_hostfile(text, "f")
    assert str(err.value).startswith(said), str(err.value)


def test_hostfile_relative_to_the_config_and_its_errors(tmp_path: Path) -> None:
    path = write_job(tmp_path, "n0 slots=2\nn1 slots=x\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"{tmp_path / 'hosts'}:2: slots=x: expected slots=N, N from 1 to 1024 "
        f"(nodes.hostfile of {path}:2)"
    )
    (tmp_path / "hosts").unlink()
    with pytest.raises(ConfigError, match=r"job.yaml:2 nodes.hostfile: cannot read hostfile"):
        load_config(path)


@pytest.mark.parametrize(
    ("nodes", "said"),
    [
        ("{hostfile: a, slurm: 1}", "nodes: one source only"),
        ("{hosts: a}", "nodes.hosts: unknown key: a node source is {hostfile: PATH}"),
        ("{slurm: 12ab}", "nodes.slurm: '12ab' is not a Slurm job id"),
        ("{slurm: yes}", "nodes.slurm: expected a job id"),
        ("{slurm: [1]}", "nodes.slurm: expected a job id"),
        ("{}", "nodes: one source only"),
    ],
)
def test_bad_node_sources(nodes: str, said: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(f"job: j\nnodes: {nodes}\ncommand: x\n", "c.yaml")
    assert said in str(err.value) and str(err.value).startswith("c.yaml:2 ")


# ---- per-node nproc ----------------------------------------------------------------


def test_slots_that_differ_flow_into_world_size_and_placeholders(tmp_path: Path) -> None:
    cfg = load_config(write_job(tmp_path, "a slots=8\nb slots=2\nc\n", "nproc_per_node: 4\n"))
    assert [cfg.nproc(n) for n in cfg.nodes] == [8, 2, 4] and cfg.world_size == 14
    plan = build_plan(cfg, "20260101-000000-abcd", "10.0.0.1")
    assert plan.world_size == 14 and [n.nproc for n in plan.nodes] == [8, 2, 4]
    for n, nproc in zip(plan.nodes, (8, 2, 4), strict=True):
        assert n.env["WORLD_SIZE"] == "14" and n.env["NNODES"] == "3"
        assert f"--node_rank={n.rank} --nproc_per_node={nproc} " in n.command
    record = run_record(plan, str(tmp_path / "job.yaml"))
    assert [r.nproc for r in record.nodes] == [8, 2, 4]


def test_per_node_nproc_key_and_overrides_by_name(tmp_path: Path) -> None:
    cfg = parse_config(
        "job: j\nnodes: [a, {name: b, nproc_per_node: 3}, c]\nnproc_per_node: 2\n"
        f"command: {TORCHRUN}\noverrides: {{c: {{nproc_per_node: 5}}}}\n"
    )
    assert [cfg.nproc(n) for n in cfg.nodes] == [2, 3, 5] and cfg.world_size == 10
    sourced = load_config(
        write_job(
            tmp_path,
            "a slots=8\nb\n",
            "overrides: {a: {nproc_per_node: 1, host: a-ib}, gone: {env: {X: '1'}}}\nmain: b\n",
        )
    )
    assert [(n.name, n.host, n.rank, sourced.nproc(n)) for n in sourced.nodes] == [
        ("b", "b", 0, 1),
        ("a", "a-ib", 1, 1),
    ]
    with pytest.raises(ConfigError, match=r"overrides.gone.envv: unknown key"):
        load_config(write_job(tmp_path, "a\n", "overrides: {gone: {envv: 1}}\n"))
    with pytest.raises(ConfigError, match=r"overrides.gone: unknown node 'gone'"):
        parse_config("job: j\nnodes: [a]\ncommand: x\noverrides: {gone: {workdir: /x}}\n")


def test_a_plain_list_never_loads_the_node_sources() -> None:
    """Config loading stays fast: no nodesource import, so no Slurm call, for a list."""
    code = (
        "import sys; from mntui.sessions.config.jobconfig import parse_config; "
        "parse_config('job: j\\nnodes: g[1-64]\\ncommand: x\\n'); "
        "assert 'mntui.sessions.config.nodesource' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- Slurm's answers ---------------------------------------------------------------

RUNNING = (
    "JobId=42 JobName=train UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A "
    "Priority=1 JobState=RUNNING Reason=None Dependency=(null) ReqNodeList=(null) "
    "ExcNodeList=(null) NodeList=g[369-372] BatchHost=g369 NumNodes=4\n"
)


def test_scontrol_job_record() -> None:
    job = parse_job(RUNNING)
    assert (job.job_id, job.state, job.user, job.uid, job.nodelist) == (
        "42",
        "RUNNING",
        "alice",
        1000,
        "g[369-372]",
    )
    assert job_problem(job, 1000) is None
    assert "belongs to alice (uid 1000), not to you (uid 0)" in (job_problem(job, 0) or "")
    done = parse_job(RUNNING.replace("RUNNING Reason=None", "TIMEOUT Reason=TimeLimit"))
    assert (job_problem(done, 1000) or "").startswith(
        "Slurm job 42 is TIMEOUT (TimeLimit), not running: its nodes are given back"
    )
    waiting = parse_job(RUNNING.replace("RUNNING Reason=None", "PENDING Reason=Resources"))
    assert "PENDING (Resources), not running yet: wait" in (job_problem(waiting, 1000) or "")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # a job name that forges keys: refused, never read as the answer
        (RUNNING.replace("JobName=train", "JobName=x NodeList=evil"), "NodeList= more than once"),
        (RUNNING.replace("JobName=train", "JobName=x UserId=root(0)"), "UserId= more than once"),
        (RUNNING.replace(" NodeList=g[369-372]", ""), "no NodeList="),
        (RUNNING + RUNNING, "2 records: an array or heterogeneous job"),
        (RUNNING.replace("alice(1000)", "alice"), "unreadable UserId='alice'"),
    ],
)
def test_scontrol_answers_that_are_refused(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=re.escape(said)):
        parse_job(text)


# ---- now, or as the run recorded them ------------------------------------------------


def source(*names: str, run: str | None = None) -> NodeSource:
    nodes = tuple(Listed(n) for n in names)
    return NodeSource(SourceKind.SLURM, "slurm auto", f"Slurm job {names}", nodes, run=run)


def test_choose_between_the_source_now_and_the_recorded_run() -> None:
    now, was = source("a", "b"), source("c", "d", run="R")
    failed = ConfigError("c.yaml", 2, "nodes.slurm", "Slurm job 7 is COMPLETED, not running")
    assert choose(now, None) is now
    assert choose(now, (was, False)) is now  # that run is over: a launch takes the new nodes
    assert choose(source("c", "d"), (was, True)).run is None  # same nodes: read now
    live = choose(now, (was, True))
    assert live.nodes == was.nodes and live.run == "R" and "`mntui kill`" in (live.why or "")
    gone = choose(failed, (was, False))
    assert gone.nodes == was.nodes and gone.why == "Slurm job 7 is COMPLETED, not running"
    with pytest.raises(ConfigError):
        choose(failed, None)
    assert from_record(was.to_record(), "R") == was
    for bad in (None, {}, {**was.to_record(), "nodes": [["a;b", 1]]}, {"kind": "x"}):
        assert from_record(bad, "R") is None


def test_recorded_nodes_serve_the_run_and_a_launch_refuses_them(tmp_path: Path) -> None:
    path = write_job(tmp_path, "a slots=2\nb\n", job="jrec")
    cfg = load_config(path)
    plan = build_plan(cfg, "20260101-000000-abcd", "127.0.0.1")
    record = run_record(plan, str(path))
    assert cfg.nodes_from is not None
    record.node_source = cfg.nodes_from.to_record()
    record.status = RunStatus.RUNNING
    record.create()
    (tmp_path / "hosts").write_text("c\nd\n")
    during = load_config(path)
    assert [n.name for n in during.nodes] == ["a", "b"] and during.world_size == 3
    assert during.nodes_from is not None and during.nodes_from.run == "20260101-000000-abcd"
    with pytest.raises(LaunchError, match=r"not launching on the nodes run 20260101-000000-abcd"):
        check_nodes_fresh(during)
    text = format_listing(listing(during))
    assert "as recorded by run 20260101-000000-abcd: hostfile" in text and "gives c,d now" in text
    record.update(lambda r: setattr(r, "status", RunStatus.KILLED))
    after = load_config(path)
    assert [n.name for n in after.nodes] == ["c", "d"] and after.nodes_from is not None
    assert after.nodes_from.run is None
    check_nodes_fresh(after)
    (tmp_path / "hosts").unlink()  # the source fails: the ended run's nodes are still shown
    gone = load_config(path)
    assert [n.name for n in gone.nodes] == ["a", "b"] and "cannot read hostfile" in str(
        gone.nodes_from and gone.nodes_from.why
    )


def test_listing() -> None:
    cfg = parse_config("job: j\nnodes: [a, {name: b, nproc_per_node: 2}]\ncommand: x\n", "c.yaml")
    data = listing(cfg)
    assert data["source"] == {"kind": "list", "detail": "the list in c.yaml"}
    assert data["world_size"] == 3
    assert format_listing(data).splitlines() == [
        "job j: 2 node(s), world size 3",
        "nodes from the list in c.yaml",
        "RANK  NODE  HOST  NPROC  ROLE",
        "0     a     a     1      main",
        "1     b     b     2      worker",
    ]


def test_old_records_still_load(tmp_path: Path) -> None:
    assert NodeRecord("a", "a", 0, "s", "t", "d").nproc is None
    assert RunRecord("j", "20260101-000000-abcd", "c", "m", 1, []).node_source is None


# ---- the sync plan ----------------------------------------------------------------


def sync_cfg(tmp_path: Path, extra: str = "", sync: str = "{source: src}") -> str:
    return (
        f"job: j\nnodes: [n0, {{name: here, host: localhost}}]\nworkdir: ~/my code\n"
        f"command: x\nsync: {sync}\nssh: {{config: ssh_config, connect_timeout: 7.5}}\n{extra}"
    )


def test_rsync_command_lines(tmp_path: Path) -> None:
    cfg = parse_config(
        sync_cfg(tmp_path, sync="{source: src, excludes: ['*.ckpt', data/], delete: true}"),
        str(tmp_path / "job.yaml"),
    )
    assert cfg.sync is not None and cfg.sync.source == str(tmp_path / "src")
    remote = rsync_argv(cfg, cfg.node("n0"), "MARK")
    assert remote[:7] == [
        "rsync",
        "--archive",
        "--checksum",
        "--stats",
        "--timeout=120",
        "--delete",
        "--filter=:- .gitignore",
    ]
    assert remote[7:9] == ["--exclude=*.ckpt", "--exclude=data/"]
    relay = remote[remote.index("-e") + 1]
    assert relay.startswith(f"{sys.executable} -m mntui.sessions.sync.relay MARK ssh -F ")
    assert f"{tmp_path / 'ssh_config'} -o BatchMode=yes -o ConnectTimeout=8" in relay
    guard = f"sh -c {shlex.quote(GUARD_SCRIPT)} mntui-guard 'my code' MARK && "
    assert (
        f"--rsync-path=cd && mkdir -p -- 'my code' && {guard}printf %s MARK && exec rsync" in remote
    )
    assert remote[-2:] == [f"{tmp_path / 'src'}/", "n0:my code/"]
    local = rsync_argv(cfg, cfg.node("here"), "MARK")
    assert "-e" not in local and local[-1].endswith("/my code/") and not local[-1].startswith("~")
    assert [remote_dest(w) for w in ("~", "~/x", "/abs", "rel")] == [".", "x", "/abs", "rel"]


@pytest.mark.parametrize(
    ("sync", "said"),
    [
        ("{excludes: [x]}", "c.yaml:5 sync.source: required"),
        ("{source: src, gitignore: 1}", "sync.gitignore: expected true or false, got int 1"),
        ("{source: src, exclude: x}", "sync.exclude: unknown key (did you mean 'excludes'?)"),
        ("src", "sync: expected a mapping"),
    ],
)
def test_bad_sync_sections(tmp_path: Path, sync: str, said: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(sync_cfg(tmp_path, sync=sync), "c.yaml")
    assert said in str(err.value), str(err.value)


def test_sync_needs_a_workdir_everywhere() -> None:
    text = "job: j\nnodes: [a, {name: b, workdir: /w}, c]\ncommand: x\nsync: {source: .}\n"
    with pytest.raises(ConfigError) as err:
        parse_config(text, "c.yaml")
    assert str(err.value) == (
        "c.yaml:4 sync: copies into each node's workdir, and a,c has none: set workdir"
    )


def test_rsync_answers() -> None:
    out = (
        "Number of files: 6 (reg: 4, dir: 2)\nNumber of regular files transferred: 1,204\n"
        "Total bytes sent: 52,431,870\nTotal bytes received: 1,234\n"
    )
    stats = parse_stats(out, 1.5)
    assert (stats.files, stats.sent) == (1204, 52431870)
    assert stats.describe() == "1204 file(s), 52.4 MB sent in 1.5s"
    assert parse_stats("Total bytes sent: 12 kB\n", 0.1).sent is None  # strict: not ours
    noisy = (
        "conda: base environment activated\n"
        "mkdir: cannot create directory '/proc/x': No such file or directory\n"
        "rsync: connection unexpectedly closed (0 bytes received so far) [sender]\n"
        "rsync error: error in rsync protocol data stream (code 12) at io.c(232)\n"
    )
    assert rsync_error(noisy, 12) == (
        "mkdir: cannot create directory '/proc/x': No such file or directory (rsync exit 12)"
    )
    assert rsync_error("\x1b]0;evil\x07\n", 255) == "no message (rsync exit 255)"  # termsafe
