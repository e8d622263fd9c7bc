"""Code sync before a launch, on real sshd nodes whose login shells print noise on stdout
and stderr (as conda's init does): rsync over the job's ssh_config, .gitignore and
excludes honoured, only what changed, `--no-sync`, and doctor's commit check."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from fakecluster import FakeCluster, tagged, wait_for
from helpers import Cfg, free_port

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.sync import sync_nodes
from mntui.sessions.sync.fanout import SyncError, SyncEvent


def git(repo: Path, *args: str) -> str:
    base = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    return subprocess.run([*base, *args], capture_output=True, text=True, check=True).stdout


def make_repo(root: Path) -> Path:
    src = root / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "VERSION").write_text("v1\n")
    (src / "pkg" / "train.py").write_text("print('train')\n")
    (src / ".gitignore").write_text("*.log\n__pycache__/\n")
    (src / "run.log").write_text("local log: must not travel\n")
    (src / "data").mkdir()
    (src / "data" / "shard0").write_bytes(b"\0" * 1000)
    git(src, "init", "-q")
    git(src, "add", ".")
    git(src, "commit", "-qm", "v1")
    return src


def job(name: str, extra: str = "") -> str:
    return f"""
    job: {name}
    nodes: [node0, node1]
    workdir: ~/{name}-code
    master_port: {free_port()}
    sync: {{source: src, excludes: [data/]}}
    command: echo "node {{node}} runs $(cat VERSION)"; exec sleep 300
    launch: {{ready: log, ready_pattern: "runs", ready_timeout: 20}}
    kill: {{grace: 2}}
    {extra}
    """


def test_launch_syncs_only_what_changed(fake: FakeCluster, cfg: Cfg) -> None:
    name = "tsync"
    src = make_repo(cfg.tmp)
    path = cfg.write(job(name))
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 0, res.stdout + res.stderr
    for node in ("node0", "node1"):
        assert re.search(rf"{node}\[\d\]\s+notice\s+sync -> {node}:~/{name}-code", res.stdout)
        assert re.search(rf"{node}\[\d\]\s+notice\s+synced \d+ file\(s\)", res.stdout)
        work = fake.node(node).home / f"{name}-code"
        assert (work / "pkg" / "train.py").read_text() == "print('train')\n"
        assert not (work / "run.log").exists() and not (work / "data").exists()
        assert git(work, "rev-parse", "HEAD") == git(src, "rev-parse", "HEAD")
        wait_for(lambda n=node: "runs v1" in fake.node(n).log(name), 20, what="its first line")
    # sync ran after the preflight and before the start: its lines come first
    assert res.stdout.index("synced") < res.stdout.index("starting")

    (src / "VERSION").write_text("v2\n")
    skipped = cfg.mntui(path, "launch", "--no-ui", "--restart", "--no-sync")
    assert skipped.returncode == 0 and "sync ->" not in skipped.stdout
    assert (fake.node("node1").home / f"{name}-code" / "VERSION").read_text() == "v1\n"

    again = cfg.mntui(path, "launch", "--no-ui", "--restart")
    assert again.returncode == 0, again.stdout + again.stderr
    assert len(re.findall(r"synced 1 file\(s\)", again.stdout)) == 2, again.stdout
    for node in ("node0", "node1"):
        assert (fake.node(node).home / f"{name}-code" / "VERSION").read_text() == "v2\n"
        wait_for(lambda n=node: "runs v2" in fake.node(n).log(name), 20, what="its first line")
    assert cfg.mntui(path, "kill").returncode == 0


def test_doctor_commits_agree_after_sync(fake: FakeCluster, cfg: Cfg) -> None:
    name = "tsyncdoc"
    src = make_repo(cfg.tmp)
    for i, node in enumerate(("node0", "node1")):  # old checkouts, at different commits
        stale = fake.node(node).home / f"{name}-code"
        stale.mkdir()
        (stale / "VERSION").write_text(f"v0.{i}\n")
        git(stale, "init", "-q")
        git(stale, "add", ".")
        git(stale, "commit", "-qm", f"v0.{i}")
    path = cfg.write(job(name))

    def rows(check: str) -> dict[str, str]:
        res = cfg.mntui(path, "doctor", "--json", timeout=180)
        found = [r for r in json.loads(res.stdout) if r["check"] == check]
        return {r["node"]: f"{r['status']} {r['detail']}" for r in found}

    assert [v.split()[0] for v in rows("code").values()] == ["FAIL", "FAIL"]
    events: list[SyncEvent] = []
    loaded = parse_config(path.read_text(), str(path))
    sync_nodes(loaded, on_event=lambda e: events.append(e) if isinstance(e, SyncEvent) else None)
    assert {e.node for e in events if e.files is not None} == {"node0", "node1"}
    head = git(src, "rev-parse", "HEAD").strip()[:12]
    assert rows("code") == {}  # no FAIL: the commits agree
    commits = {n: v.split()[1].rstrip(",") for n, v in rows("git").items()}
    assert commits == {"node0": head, "node1": head}


def test_failed_sync_names_the_node_and_starts_nothing(fake: FakeCluster, cfg: Cfg) -> None:
    name = "tsyncfail"
    make_repo(cfg.tmp)
    path = cfg.write(job(name, "overrides: {node1: {workdir: /proc/mntui-cannot-be}}"))
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 1
    assert "launch failed: code sync failed on 1 node(s); nothing was started" in res.stderr
    assert re.search(r"node1: mkdir: cannot create directory .*\(rsync exit \d+\)", res.stderr)
    assert tagged(name) == [] and not [s for s in fake.node("node0").sessions() if name in s]
    assert (fake.node("node0").home / f"{name}-code" / "VERSION").exists()  # the others synced


def test_local_node_syncs_with_plain_rsync(tmp_path: Path) -> None:
    src = make_repo(tmp_path)
    dest = tmp_path / "here" / "work"
    loaded = parse_config(
        f"job: tsynclocal\nnodes: [{{name: l0, host: localhost}}]\nworkdir: {dest}\n"
        "command: x\nsync: {source: src, gitignore: false, delete: true}\n",
        str(tmp_path / "job.yaml"),
    )
    (dest / "old").mkdir(parents=True)
    stats = sync_nodes(loaded)
    assert stats["l0"].files is not None and stats["l0"].files >= 4
    assert (dest / "run.log").exists() and not (dest / "old").exists()  # gitignore off, delete on
    assert sync_nodes(loaded)["l0"].files == 0
    src.rename(tmp_path / "gone")
    try:
        sync_nodes(loaded)
    except Exception as exc:
        assert not isinstance(exc, SyncError) and "is not a directory" in str(exc)
    else:
        raise AssertionError("a missing source must be refused")
