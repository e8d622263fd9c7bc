"""Git-mode sync on real sshd nodes whose login shells print noise: every node's clone
ends detached at the local HEAD, an unpushed commit included; a node with uncommitted
work, or with no clone, is refused, left as it was, and nothing starts."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from fakecluster import FakeCluster, tagged, wait_for
from helpers import Cfg, free_port

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.sync import SyncError, sync_nodes


def git(repo: Path, *args: str) -> str:
    base = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    return subprocess.run([*base, *args], capture_output=True, text=True, check=True).stdout


def commit(src: Path, version: str) -> str:
    (src / "VERSION").write_text(f"{version}\n")
    git(src, "commit", "-qam", version)
    return head(src)


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def has(repo: Path, rev: str) -> bool:
    res = subprocess.run(["git", "-C", str(repo), "rev-parse", "-q", "--verify", rev])
    return res.returncode == 0


def detached(repo: Path) -> bool:
    return subprocess.run(["git", "-C", str(repo), "symbolic-ref", "-q", "HEAD"]).returncode == 1


def make_repo(root: Path) -> Path:
    src = root / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "VERSION").write_text("v1\n")
    (src / "pkg" / "train.py").write_text("print('train')\n")
    git(src, "init", "-q")
    git(src, "add", ".")
    git(src, "commit", "-qm", "v1")
    return src


def clone_on(fake: FakeCluster, node: str, src: Path, name: str) -> Path:
    work = fake.node(node).home / f"{name}-code"
    subprocess.run(["git", "clone", "-q", str(src), str(work)], check=True)
    return work


def ran(fake: FakeCluster, node: str, name: str, line: str) -> None:
    """The job's first line in its log: the launch returns once the sessions run, not
    once each has printed (the worker's echo may come a moment later)."""
    wait_for(lambda: line in fake.node(node).log(name), 20, what=f"{line!r} on {node}")


def job(name: str, git_section: str = "{checkout: same-commit}", extra: str = "") -> str:
    return f"""
    job: {name}
    nodes: [node0, node1]
    workdir: ~/{name}-code
    master_port: {free_port()}
    sync: {{source: src, git: {git_section}}}
    command: echo "node {{node}} runs $(cat VERSION)"; exec sleep 300
    launch: {{ready: log, ready_pattern: "runs", ready_timeout: 20}}
    kill: {{grace: 2}}
    {extra}
    """


def test_launch_checks_out_the_local_commit_on_every_node(fake: FakeCluster, cfg: Cfg) -> None:
    name = "tgitsync"
    src = make_repo(cfg.tmp)
    old = head(src)
    empty = fake.node("node1").home / f"{name}-code"
    empty.mkdir()
    git(empty, "init", "-q")  # a clone-to-be, with no commit yet
    works = {"node0": clone_on(fake, "node0", src, name), "node1": empty}
    sha = commit(src, "v2")  # never pushed anywhere: only the local repo has it
    assert not has(works["node0"], f"{sha}^{{commit}}")
    path = cfg.write(job(name))
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 0, res.stdout + res.stderr
    was = {"node0": f"was {old[:12]}", "node1": "was no commit"}
    for node, work in works.items():
        assert re.search(
            rf"{node}\[\d\]\s+notice\s+sync -> {node}:~/{name}-code \(git\)", res.stdout
        )
        line = rf"{node}\[\d\]\s+notice\s+synced: at {sha[:12]} \({was[node]}\) in [\d.]+s"
        assert re.search(line, res.stdout), res.stdout
        assert head(work) == sha and detached(work)
        assert git(work, "rev-parse", "refs/mntui/sync").strip() == sha
        ran(fake, node, name, "runs v2")
    assert res.stdout.index("synced") < res.stdout.index("starting")

    sha = commit(src, "v3")  # a one-file commit, then a relaunch
    again = cfg.mntui(path, "launch", "--no-ui", "--restart")
    assert again.returncode == 0, again.stdout + again.stderr
    assert len(re.findall(rf"synced: at {sha[:12]} \(was ", again.stdout)) == 2, again.stdout
    for node, work in works.items():
        assert head(work) == sha and (work / "VERSION").read_text() == "v3\n"
        ran(fake, node, name, "runs v3")
    assert cfg.mntui(path, "kill").returncode == 0

    rows = json.loads(cfg.mntui(path, "doctor", "--json", timeout=180).stdout)
    assert [r for r in rows if r["check"] == "code"] == []  # no FAIL: the commits agree
    git_rows = {r["node"]: (r["status"], r["detail"]) for r in rows if r["check"] == "git"}
    assert git_rows == {"node0": ("PASS", sha[:12]), "node1": ("PASS", sha[:12])}


def test_a_dirty_node_is_refused_untouched_and_nothing_starts(fake: FakeCluster, cfg: Cfg) -> None:
    name = "tgitdirty"
    src = make_repo(cfg.tmp)
    clean, dirty = clone_on(fake, "node0", src, name), clone_on(fake, "node1", src, name)
    before = head(dirty)
    (dirty / "VERSION").write_text("an edit made on node1\n")
    sha = commit(src, "v2")
    res = cfg.mntui(cfg.write(job(name)), "launch", "--no-ui")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "launch failed: code sync failed on 1 node(s); nothing was started" in res.stderr
    assert (
        f"  node1: ~/{name}-code has 1 uncommitted change(s) to tracked files; left untouched: "
        f"commit, stash or discard them there (git -C ~/{name}-code status)"
    ) in res.stderr.splitlines()
    assert (dirty / "VERSION").read_text() == "an edit made on node1\n"
    assert head(dirty) == before and not has(dirty, "refs/mntui/incoming")  # nothing was sent
    assert not has(dirty, "refs/mntui/sync")
    assert not has(dirty, f"{sha}^{{commit}}")
    assert tagged(name) == [] and not [s for s in fake.node("node0").sessions() if name in s]
    assert head(clean) == sha  # the others synced, as in rsync mode


def test_a_node_without_a_clone_fails_in_one_line(fake: FakeCluster, cfg: Cfg) -> None:
    name = "tgitnorepo"
    src = make_repo(cfg.tmp)
    clone_on(fake, "node0", src, name)
    plain = fake.node("node1").home / f"{name}-code"
    plain.mkdir()
    (plain / "VERSION").write_text("copied by hand\n")
    res = cfg.mntui(cfg.write(job(name)), "launch", "--no-ui")
    assert res.returncode == 1, res.stdout + res.stderr
    node1 = [x for x in res.stderr.splitlines() if x.startswith("  node1:")]
    assert node1 == [
        f"  node1: ~/{name}-code is not in a git clone (fatal: not a git repository "
        "(or any of the parent directories): .git): clone it there"
    ]
    assert sorted(p.name for p in plain.iterdir()) == ["VERSION"]
    assert tagged(name) == [] and not [s for s in fake.node("node0").sessions() if name in s]


def test_local_changes_are_refused_unless_allowed(fake: FakeCluster, cfg: Cfg) -> None:
    name = "tgitlocal"
    src = make_repo(cfg.tmp)
    work = clone_on(fake, "node0", src, name)
    clone_on(fake, "node1", src, name)
    sha = commit(src, "v2")
    (src / "VERSION").write_text("v3, not committed\n")
    res = cfg.mntui(cfg.write(job(name)), "launch", "--no-ui")
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        f"mntui: launch failed: {src} has 1 uncommitted change(s) (VERSION), and sync.git "
        "sends commits: commit them, or set sync.git.allow_dirty: true to sync HEAD "
        f"{sha[:12]} without them; nothing was started"
    ]
    assert "sync ->" not in res.stdout and head(work) != sha  # no node was touched

    path = cfg.write(job(name, "{checkout: same-commit, allow_dirty: true}"))
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"syncing HEAD {sha[:12]}; 1 uncommitted change(s) (VERSION) stay local" in res.stdout
    assert head(work) == sha and (work / "VERSION").read_text() == "v2\n"
    ran(fake, "node0", name, "runs v2")
    assert cfg.mntui(path, "kill").returncode == 0


def test_nodes_sharing_one_clone_take_turns(fake: FakeCluster, cfg: Cfg) -> None:
    """A shared home: every node's workdir is the same clone."""
    src = make_repo(cfg.tmp)
    shared = cfg.tmp / "shared-home" / "code"
    subprocess.run(["git", "clone", "-q", str(src), str(shared)], check=True)
    for version in ("v2", "v3"):
        sha = commit(src, version)
        loaded = parse_config(
            f"job: tgitshared\nnodes: [node0, node1, node2]\nworkdir: {shared}\ncommand: x\n"
            f"sync: {{source: src, git: {{}}}}\nssh: {{config: {fake.ssh_config}}}\n",
            str(cfg.tmp / "job.yaml"),
        )
        stats = sync_nodes(loaded)
        assert {n: s.commit for n, s in stats.items()} == dict.fromkeys(stats, sha)
        assert len(stats) == 3 and head(shared) == sha
    assert not (shared / ".git" / "mntui-sync.lock").exists()


def test_a_local_node_checks_out_without_ssh(tmp_path: Path) -> None:
    src = make_repo(tmp_path)
    work = tmp_path / "here" / "work"
    subprocess.run(["git", "clone", "-q", str(src), str(work)], check=True)
    sha = commit(src, "v2")
    bare = tmp_path / "published.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    loaded = parse_config(
        f"job: tgitlocalnode\nnodes: [{{name: l0, host: localhost}}]\nworkdir: {work}\n"
        f"command: x\nsync: {{source: src/pkg, git: {{push: {bare}}}}}\n",
        str(tmp_path / "job.yaml"),
    )
    said: list[str] = []
    assert sync_nodes(loaded, on_event=lambda e: said.append(e.message))["l0"].commit == sha
    assert head(work) == sha and detached(work)
    assert f"pushed HEAD {sha[:12]} to {bare}" in said  # sync.git.push, before the nodes
    assert git(bare, "rev-parse", git(src, "branch", "--show-current").strip()).strip() == sha
    (work / "VERSION").write_text("edited here\n")
    try:
        sync_nodes(loaded)
    except SyncError as exc:
        assert list(exc.failures) == ["l0"] and "1 uncommitted change(s)" in exc.failures["l0"]
    else:
        raise AssertionError("a dirty local node must be refused")
    assert (work / "VERSION").read_text() == "edited here\n"
