"""`sync: {delete: true}` never deletes what mntui does not own, on real sshd nodes and
on a local node: a workdir that is the home (written `~`, written out, or a link to it),
holds it, or holds mntui's own runs is refused before rsync runs, and in a proper
workdir the excluded and .gitignored paths survive.

A local node writes into the home of whoever runs mntui: its tests give mntui a fake
HOME under tmp, never the real one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakecluster import FakeCluster, tagged
from helpers import Cfg, free_port

from mntui.sessions.config import load_config
from mntui.sessions.sync import SyncError, sync_nodes

PLANTED = ("thesis", ".ssh", ".profile", ".mntui/runs/other-job")


def plant_home(home: Path) -> dict[str, str]:
    """A home worth keeping: a key, a dotfile, another project, another job's run; the
    files and their contents, to compare after."""
    files = {
        ".ssh/id_ed25519": "a private key\n",
        ".profile": "export EDITOR=vi\n",
        "thesis/chapter1.tex": "two years of work\n",
        ".mntui/runs/other-job/1/node2/output.log": "another job's output\n",
    }
    for rel, text in files.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    return files


def unplant(home: Path) -> None:
    import shutil

    for rel in PLANTED:
        path = home / rel
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


def intact(home: Path, files: dict[str, str]) -> list[str]:
    """The planted files that are gone or changed."""
    return [
        rel
        for rel, text in files.items()
        if not (home / rel).is_file() or (home / rel).read_text() != text
    ]


def make_source(root: Path) -> Path:
    src = root / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    return src


@pytest.fixture
def node2_home(fake: FakeCluster) -> Iterator[tuple[Path, dict[str, str]]]:
    home = fake.node("node2").home
    files = plant_home(home)
    try:
        yield home, files
    finally:
        unplant(home)


# ---- the home of a remote node ----------------------------------------------------


def test_delete_sync_into_home_is_refused(
    fake: FakeCluster, cfg: Cfg, node2_home: tuple[Path, dict[str, str]]
) -> None:
    """The review's case: `workdir: "~"` with delete emptied node2's home and said
    `synced`, exit 0. Now the config is refused: exit 2, one line, nothing started."""
    home, files = node2_home
    make_source(cfg.tmp)
    path = cfg.write("""
    job: tsafehome
    nodes: [node2]
    workdir: "~"
    command: sleep 30
    sync: {source: src, delete: true}
    launch: {ready: delay, ready_delay: 0.1}
    """)
    before = sorted(p.name for p in home.iterdir())
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip().splitlines() == [
        f"mntui: {path}:3 workdir: ~ is the home directory; sync.delete: true deletes "
        "everything there that the source lacks: set workdir to the project's own directory "
        "(like ~/code), or drop sync.delete"
    ]
    assert "synced" not in res.stdout
    assert sorted(p.name for p in home.iterdir()) == before
    assert intact(home, files) == []
    assert tagged("tsafehome") == []


def _config(cfg: Cfg, workdir: str, extra: str = "", excludes: str = "") -> Path:
    return cfg.write(f"""
    job: tsafenode
    nodes: [node2]
    workdir: {workdir}
    master_port: {free_port()}
    command: sleep 30
    sync: {{source: src, delete: true{excludes}}}
    launch: {{ready: delay, ready_delay: 0.1}}
    {extra}
    """)


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("home", "is this node's home directory"),
        ("link", "is this node's home directory"),
        ("above", "holds this node's home directory"),
        ("runs", "is or is inside mntui's own ~/.mntui"),
    ],
)
def test_node_refuses_what_only_it_knows_is_its_home(
    fake: FakeCluster,
    cfg: Cfg,
    node2_home: tuple[Path, dict[str, str]],
    where: str,
    said: str,
) -> None:
    """Written out, node2's home is no path this machine knows as a home (it is a
    directory under tmp here): the node itself refuses, before rsync, and names itself."""
    home, files = node2_home
    make_source(cfg.tmp)
    link = home / "tsafe-link"
    link.symlink_to(home)
    try:
        workdir = {
            "home": str(home),
            "link": "~/tsafe-link",
            "above": str(home.parent),
            "runs": str(home / ".mntui" / "runs"),
        }[where]
        loaded = load_config(_config(cfg, workdir))
        with pytest.raises(SyncError) as err:
            sync_nodes(loaded)
        assert list(err.value.failures) == ["node2"]
        assert err.value.failures["node2"].startswith(
            f"refused before rsync: workdir {workdir} {said};"
        )
        assert intact(home, files) == [] and link.is_symlink()
    finally:
        link.unlink()


def test_node_refusal_stops_the_launch(
    fake: FakeCluster, cfg: Cfg, node2_home: tuple[Path, dict[str, str]]
) -> None:
    home, files = node2_home
    make_source(cfg.tmp)
    path = _config(cfg, str(home))
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "code sync failed on 1 node(s); nothing was started" in res.stderr
    assert (
        f"node2: refused before rsync: workdir {home} is this node's home directory" in res.stderr
    )
    assert "synced" not in res.stdout and intact(home, files) == []
    assert tagged("tsafenode") == []


def test_an_override_into_the_home_is_refused_at_its_line(
    fake: FakeCluster, cfg: Cfg, node2_home: tuple[Path, dict[str, str]]
) -> None:
    home, files = node2_home
    make_source(cfg.tmp)
    path = _config(cfg, "~/tsafe-code", "overrides: {node2: {workdir: ~/tsafe-code/..}}")
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{path}:8 overrides.node2.workdir: ~/tsafe-code/.. is the home directory" in res.stderr
    assert intact(home, files) == []


# ---- a workdir the node reads otherwise (issue 28: `$HOME`, RSYNC_OLD_ARGS=1) ---------

OLD_ARGS = {**os.environ, "RSYNC_OLD_ARGS": "1"}  # as rsync < 3.2.4 passes remote paths


def test_dollar_home_workdir_with_delete_is_refused_in_one_line(
    fake: FakeCluster, cfg: Cfg, node2_home: tuple[Path, dict[str, str]]
) -> None:
    """A new user's `workdir: $HOME`: the checks read a directory named `$HOME`, the
    node's shell the home, which --delete emptied. Refused at its line, nothing synced."""
    home, files = node2_home
    make_source(cfg.tmp)
    path = _config(cfg, "$HOME")
    before = sorted(p.name for p in home.iterdir())
    res = cfg.mntui(path, "launch", "--no-ui", env=OLD_ARGS)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip().splitlines() == [
        f"mntui: {path}:3 workdir: $HOME has '$', which the node's shell or rsync may expand "
        "to another directory than the one checked (write the path out, with ~ for the home); "
        "sync.delete: true deletes everything there that the source lacks: set workdir to "
        "the project's own directory (like ~/code), or drop sync.delete"
    ]
    assert "synced" not in res.stdout
    assert sorted(p.name for p in home.iterdir()) == before and intact(home, files) == []
    assert tagged("tsafenode") == []


def test_delete_sync_under_old_args_writes_only_the_workdir_as_written(
    fake: FakeCluster,
    cfg: Cfg,
    node2_home: tuple[Path, dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With RSYNC_OLD_ARGS=1 the node's shell split `~/tsafe code` and --delete emptied
    ~/tsafe, another project: rsync now gets its paths through the protocol (-s)."""
    home, files = node2_home
    make_source(cfg.tmp)
    other = home / "tsafe"
    other.mkdir()
    (other / "keep.py").write_text("another project\n")
    monkeypatch.setenv("RSYNC_OLD_ARGS", "1")
    try:
        sync_nodes(load_config(_config(cfg, '"~/tsafe code"')))
        assert (home / "tsafe code" / "train.py").is_file()
        assert (other / "keep.py").read_text() == "another project\n"
        assert intact(home, files) == []
    finally:
        subprocess.run(["rm", "-rf", "--", str(other), str(home / "tsafe code")], check=True)


# ---- what a delete sync keeps in a proper workdir ---------------------------------


def ignored_tree(root: Path, work: Path) -> Path:
    """A source whose .gitignore files (top and nested) and `excludes` cover what a node
    keeps of its own, and a workdir that has that, before the first sync brought any
    .gitignore; also a stale file that `delete` is for."""
    src = make_source(root)
    (src / ".gitignore").write_text("checkpoints/\n*.log\n")
    (src / "sub").mkdir()
    (src / "sub" / ".gitignore").write_text("cache/\n")
    (src / "sub" / "model.py").write_text("x = 1\n")
    for rel in ("checkpoints/step100.pt", "train.log", "sub/cache/blob", "data/shard0", "stale.py"):
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(f"{rel} of the node\n")
    return src


KEPT = ("checkpoints/step100.pt", "train.log", "sub/cache/blob", "data/shard0")


def test_excluded_and_ignored_paths_survive_a_delete_sync(fake: FakeCluster, cfg: Cfg) -> None:
    work = fake.node("node2").home / "tsafe-keep"
    work.mkdir()
    try:
        ignored_tree(cfg.tmp, work)
        loaded = load_config(_config(cfg, "~/tsafe-keep", excludes=", excludes: [data/]"))
        sync_nodes(loaded)
        for rel in KEPT:
            assert (work / rel).read_text() == f"{rel} of the node\n", rel
        assert not (work / "stale.py").exists()  # what delete is for
        assert (work / "train.py").is_file() and (work / "sub" / "model.py").is_file()
        sync_nodes(loaded)  # and again, with the .gitignore files there
        assert all((work / rel).is_file() for rel in KEPT)
    finally:
        subprocess.run(["rm", "-rf", "--", str(work)], check=True)


# ---- a local node: the home of whoever runs mntui (a fake one here) ---------------


def _local(tmp: Path, workdir: str, extra: str = "") -> Path:
    path = tmp / "local.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        job: tsafelocal
        nodes: [{{name: l0, host: localhost}}]
        workdir: {workdir}
        command: sleep 30
        sync: {{source: src, delete: true{extra}}}
        launch: {{ready: delay, ready_delay: 0.1}}
        """)
    )
    return path


def _mntui(path: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "HOME": str(home)},
    )


@pytest.mark.parametrize("workdir", ['"~"', "HOME", "HOME/.", "HOME/.mntui"])
def test_local_node_home_is_refused_by_the_config(tmp_path: Path, workdir: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    files = plant_home(home)
    make_source(tmp_path)
    path = _local(tmp_path, workdir.replace("HOME", str(home)))
    res = _mntui(path, home, "launch", "--no-ui", "--no-watch")
    assert res.returncode == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert res.stderr.startswith(f"mntui: {path}:3 workdir: ") and "sync.delete" in res.stderr
    assert intact(home, files) == [] and not (home / "train.py").exists()


def test_local_node_link_to_the_home_is_refused_before_rsync(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    files = plant_home(home)
    make_source(tmp_path)
    (tmp_path / "elsewhere").symlink_to(home)
    path = _local(tmp_path, str(tmp_path / "elsewhere"))
    res = _mntui(path, home, "launch", "--no-ui", "--no-watch")
    assert res.returncode == 1, res.stdout + res.stderr
    assert (
        f"l0: refused before rsync: workdir {tmp_path / 'elsewhere'} is the home directory"
        in res.stderr
    )
    assert intact(home, files) == [] and not (home / "train.py").exists()
    assert tagged("tsafelocal") == []


def test_local_node_keeps_excluded_and_ignored_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    work = home / "code"
    work.mkdir(parents=True)
    files = plant_home(home)
    monkeypatch.setenv("HOME", str(home))
    ignored_tree(tmp_path, work)
    loaded = load_config(_local(tmp_path, "~/code", ", excludes: [data/]"))
    sync_nodes(loaded)
    for rel in KEPT:
        assert (work / rel).read_text() == f"{rel} of the node\n", rel
    assert not (work / "stale.py").exists() and (work / "train.py").is_file()
    assert intact(home, files) == []
