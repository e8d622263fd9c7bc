"""A workdir the node may read otherwise than mntui's checks (issue 28, finding 3).

`workdir: $HOME` passed every sync guard: the config check and the node's GUARD_SCRIPT
read it as a sub-directory named `$HOME`. But an rsync that hands its remote path to the
node's shell -- rsync before 3.2.4 (RHEL/Rocky 8, Ubuntu 20.04), or RSYNC_OLD_ARGS=1 --
expanded `$HOME/` there, and `--delete` emptied the home, `.ssh` included. Now rsync gets
its paths through the protocol (-s), whatever its version or environment, and a delete
into a workdir with `$`, backquotes or glob characters (which rsync expands on the node
even then) is refused: on the config text, and again just before rsync.

The node here is a fake ssh that runs the remote command under `sh -c` in a fake home,
as sshd does; the real-sshd tests are in tests/integration/test_sync_safety.py.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from mntui.sessions.config import ConfigError, JobConfig
from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.config.syncguard import FIX, config_refusal
from mntui.sessions.sync import SyncError, sync_nodes
from mntui.sessions.sync.fanout import relay_argv, remote_dest
from mntui.sessions.sync.gitsync import LocalHead, sync_argv
from mntui.sessions.sync.rsync import rsync_argv

FAKE_SSH = """#!/bin/sh
# rsync runs: <rsh> [opts] host command...: run `command` as sshd would, from $FAKEHOME
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) shift; break ;; esac; done
cd "$FAKEHOME" && HOME="$FAKEHOME" exec sh -c "$*"
"""
MARKER = "__MNTUI_SYNC_x__"
EXPANDED = ["$HOME", "${HOME}", "`pwd`"]  # each is the home to a shell started there


def job(workdir: str, sync: str = "{source: src, delete: true}") -> str:
    return f"job: j\nnodes: [{{name: n0, host: nodeA}}]\nworkdir: '{workdir}'\ncommand: x\nsync: {sync}\n"


def bypassed(tmp_path: Path, workdir: str) -> JobConfig:
    """The config as if its check were bypassed: a proper workdir, then this one."""
    cfg = parse_config(job("~/code"), str(tmp_path / "job.yaml"))
    return dataclasses.replace(cfg, nodes=(dataclasses.replace(cfg.nodes[0], workdir=workdir),))


def planted_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("KEY")
    (home / "thesis.tex").write_text("years of work")
    return home


def run_as_node(tmp_path: Path, argv: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    """The argv with rsync's ssh swapped for the fake sshd, under RSYNC_OLD_ARGS=1."""
    fake = tmp_path / "fakessh"
    fake.write_text(FAKE_SSH)
    fake.chmod(0o755)
    argv = list(argv)
    argv[argv.index("-e") + 1] = shlex.join(relay_argv(MARKER, [str(fake)]))
    env = {**os.environ, "FAKEHOME": str(home), "RSYNC_OLD_ARGS": "1"}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(shutil.which("rsync") is None, reason="no rsync")
@pytest.mark.parametrize("workdir", EXPANDED)
def test_workdir_dollar_home_with_delete_never_empties_the_home(
    tmp_path: Path, workdir: str
) -> None:
    """The repro: even past the config check, the rsync argv mntui builds writes into the
    workdir as written, with RSYNC_OLD_ARGS=1; the same argv without -s empties the home."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print(1)\n")
    cfg = bypassed(tmp_path, workdir)
    argv = rsync_argv(cfg, cfg.nodes[0], MARKER)
    assert "--delete" in argv and "-s" in argv

    home = planted_home(tmp_path)
    res = run_as_node(tmp_path, argv, home)
    left = sorted(p.name for p in home.iterdir())
    assert (home / "thesis.tex").exists() and (home / ".ssh" / "id_ed25519").exists(), (
        f"rsync exit {res.returncode} {res.stderr[-300:]}; home now holds {left}"
    )
    assert res.returncode == 0, res.stderr
    assert (home / workdir / "train.py").is_file()  # the directory as written: no shell

    without = [a for a in argv if a != "-s"]  # what mntui passed before: the hazard is real
    run_as_node(tmp_path, without, home)
    assert not (home / "thesis.tex").exists() and not (home / ".ssh").exists()


@pytest.mark.parametrize(
    ("workdir", "char"),
    [
        *((w, w[0]) for w in EXPANDED),
        ("~/$USER/code", "$"),
        ("~/code*", "*"),
        ("~/run?", "?"),
        ("/data/[ab]", "["),
        ("~/a\\b", "\\"),
    ],
)
def test_a_delete_into_a_workdir_the_node_may_expand_is_refused(workdir: str, char: str) -> None:
    why = (
        f"has '{char}', which the node's shell or rsync may expand to another directory than "
        "the one checked (write the path out, with ~ for the home)"
    )
    assert config_refusal(workdir) == why
    with pytest.raises(ConfigError) as err:
        parse_config(job(workdir), "c.yaml")
    assert str(err.value) == f"c.yaml:3 workdir: {workdir} {why}; {FIX}"
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("workdir", ["$HOME", "~/*", "~/run`date`"])
def test_without_delete_a_workdir_the_node_may_expand_is_refused_too(workdir: str) -> None:
    """A plain sync deletes nothing, but rsync on the node still expands a glob in it and
    writes into what it matches (`~/*` is `~/.ssh` too); `$HOME` was meant as the home,
    which `~` says. One line, naming the key and the fix, without the delete's advice."""
    with pytest.raises(ConfigError) as err:
        parse_config(job(workdir, "{source: src}"), "c.yaml")
    text = str(err.value)
    assert text.startswith(f"c.yaml:3 workdir: {workdir} has ") and "\n" not in text
    assert "with ~ for the home" in text and text.endswith("sync writes into it")
    assert FIX not in text


@pytest.mark.parametrize("workdir", ["*", "~/$HOME"])
def test_past_the_config_a_delete_is_refused_before_rsync(tmp_path: Path, workdir: str) -> None:
    """rsync on the node expands globs even with -s (`*` matched `.ssh`): a JobConfig
    built without the config check is refused before any connection."""
    (tmp_path / "src").mkdir()
    with pytest.raises(SyncError) as err:
        sync_nodes(bypassed(tmp_path, workdir))
    assert err.value.failures["n0"].startswith(
        f"refused before rsync: workdir {workdir} has '{workdir.lstrip('~/')[0]}', "
    )
    assert err.value.failures["n0"].endswith(FIX)


def test_a_dash_workdir_reaches_rsync_and_cd_as_a_path(tmp_path: Path) -> None:
    """`-x` was an option to rsync on the node, and `cd -- -` went to $OLDPWD."""
    assert [remote_dest(w) for w in ("-x", "~/-x", "~/x-", "/-x")] == ["./-x", "./-x", "x-", "/-x"]
    local = parse_config(
        "job: j\nnodes: [{name: l0, host: localhost}]\nworkdir: -x\ncommand: x\n"
        "sync: {source: src}\n",
        str(tmp_path / "job.yaml"),
    )
    assert rsync_argv(local, local.nodes[0], MARKER)[-1] == "./-x/"


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
@pytest.mark.parametrize("workdir", EXPANDED)
def test_git_sync_hands_the_node_the_workdir_as_written(tmp_path: Path, workdir: str) -> None:
    """Git mode's receive-pack line, run by the node's shell as git's ssh runs it: the
    workdir stays quoted, so `$HOME` is a directory of that name (none here), never the
    home, which is a git repository it would otherwise check the commit out in."""
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(["git", "init", "-q", str(home)], check=True)
    cfg = parse_config(job(workdir, "{source: ., git: {checkout: same-commit}}"), "c.yaml")
    head = LocalHead(str(tmp_path), "a" * 40, (), 0)
    argv = sync_argv(cfg, cfg.nodes[0], head, MARKER)
    receive_pack = next(a for a in argv if a.startswith("--receive-pack="))
    command = receive_pack.removeprefix("--receive-pack=") + " '.'"  # git appends the path
    env = {**os.environ, "HOME": str(home)}
    res = subprocess.run(
        ["sh", "-c", command], cwd=home, env=env, capture_output=True, text=True, timeout=30
    )
    assert f"{MARKER} NOWORKDIR" in res.stderr, res.stderr
