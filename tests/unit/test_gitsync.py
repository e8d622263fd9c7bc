"""Git-mode sync without nodes: the `sync.git` config and its errors, the node scripts
under dash and shellcheck and run on real repositories, the parsers of what nodes and
git say, the local repository's checks, and the command lines."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mntui.sessions.config import ConfigError
from mntui.sessions.config.jobconfig import JobConfig, parse_config
from mntui.sessions.config.settings import GitCheckout, GitSync
from mntui.sessions.errors import MntuiError, UsageError
from mntui.sessions.sync import SyncError, sync_nodes
from mntui.sessions.sync.gitnode import SYNC_SCRIPT, Answer, git_error, parse_answer, refusal
from mntui.sessions.sync.gitsync import local_notices, parse_status, publish, read_head, sync_argv

SHELLCHECK = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or "shellcheck"
SHA = "a" * 40
M = "__MNTUI_SYNC_0123456789abcdef__"


def git(repo: Path, *args: str) -> str:
    base = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    return subprocess.run([*base, *args], capture_output=True, text=True, check=True).stdout


def repo(path: Path, files: dict[str, str] | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    for name, text in (files or {"VERSION": "v1\n"}).items():
        (path / name).write_text(text)
    git(path, "add", ".")
    git(path, "commit", "-qm", "c")
    return path


def head(path: Path) -> str:
    return git(path, "rev-parse", "HEAD").strip()


# ---- config ------------------------------------------------------------------------


def git_cfg(tmp_path: Path, sync: str, extra: str = "") -> str:
    return (
        f"job: j\nnodes: [n0, {{name: here, host: localhost}}]\nworkdir: ~/my code\n"
        f"command: x\nsync: {sync}\nssh: {{config: ssh_config}}\n{extra}"
    )


def test_git_section_defaults_and_source(tmp_path: Path) -> None:
    cfg = parse_config(git_cfg(tmp_path, "{git: {}}"), str(tmp_path / "job.yaml"))
    assert cfg.sync is not None and cfg.sync.git == GitSync(GitCheckout.SAME_COMMIT, None, False)
    assert cfg.sync.source == str(tmp_path / ".")  # the config's directory: in the repository
    full = "{source: .., git: {checkout: same-commit, push: origin, allow_dirty: true}}"
    cfg = parse_config(git_cfg(tmp_path, full), str(tmp_path / "job.yaml"))
    assert cfg.sync is not None and cfg.sync.git == GitSync(GitCheckout.SAME_COMMIT, "origin", True)
    assert cfg.sync.source == str(tmp_path / "..")


@pytest.mark.parametrize(
    ("sync", "said"),
    [
        (
            "{git: {checkout: same-commit}, excludes: [data/]}",
            "c.yaml:5 sync.excludes: an rsync setting, but sync.git syncs a commit instead: "
            "keep one of the two",
        ),
        (
            "{delete: true, source: ., git: {}}",
            "c.yaml:5 sync.delete: an rsync setting, but sync.git",
        ),
        ("{gitignore: false, git: {}}", "c.yaml:5 sync.gitignore: an rsync setting"),
        ("{source: ., git: }", "c.yaml:5 sync.git: expected a mapping ({checkout: same-commit})"),
        ("{git: {checkout: latest}}", "sync.git.checkout: expected one of same-commit, got"),
        ("{git: {push: --force}}", "sync.git.push: '--force' starts with '-': name a remote"),
        ("{git: {allow_dirty: yes please}}", "sync.git.allow_dirty: expected true or false"),
        ("{git: {checkuot: same-commit}}", "sync.git.checkuot: unknown key (did you mean"),
        ("{git: same-commit}", "sync.git: expected a mapping, got str"),
        ("{excludes: [x]}", "c.yaml:5 sync.source: required"),  # rsync mode still needs it
    ],
)
def test_bad_git_sections_are_one_line(tmp_path: Path, sync: str, said: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(git_cfg(tmp_path, sync), "c.yaml")
    assert said in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_bad_git_section_exits_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(git_cfg(tmp_path, "\n  git: {checkout: same-commit}\n  excludes: [x]"))
    res = subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "launch", "--no-ui"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [
        f"mntui: {path}:7 sync.excludes: an rsync setting, but sync.git syncs a commit "
        "instead: keep one of the two"
    ]


# ---- the node scripts ---------------------------------------------------------------


def test_node_script_passes_dash_and_shellcheck() -> None:
    assert subprocess.run(["dash", "-n"], input=SYNC_SCRIPT, text=True).returncode == 0
    res = subprocess.run(
        [SHELLCHECK, "-s", "sh", "-"], input=SYNC_SCRIPT, text=True, capture_output=True
    )
    assert res.returncode == 0, res.stdout


def run_script(home: Path, workdir: str) -> subprocess.CompletedProcess[str]:
    """The script as a node's sh (dash) runs it for git push: in $HOME, with its arguments
    and the path git appends; no git client on stdin."""
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["dash", "-c", SYNC_SCRIPT, "mntui-sync", workdir, M, "PREAMBLE", SHA, "'.'"],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def answer(res: subprocess.CompletedProcess[str]) -> tuple[Answer, tuple[str, ...]] | None:
    return parse_answer(res.stdout + res.stderr, M)


def test_node_script_refuses_before_receiving_and_touches_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    clone = repo(home / "code")
    (home / "plain").mkdir()
    res = run_script(home, "nowhere")
    assert (res.returncode, answer(res), res.stdout) == (3, (Answer.NO_WORKDIR, ()), "")
    res = run_script(home, "plain")
    assert (answer(res), res.stdout) == ((Answer.NO_REPO, ()), "")
    assert "is not in a git clone (fatal: not a git repository" in refusal(
        Answer.NO_REPO, (), "plain", git_error(res.stderr, M)
    )
    (clone / "VERSION").write_text("edited on the node\n")
    (clone / "untracked.txt").write_text("notes\n")  # untracked files are no refusal
    res = run_script(home, "code")
    assert (answer(res), res.stdout) == ((Answer.DIRTY, ("1",)), "")  # receive-pack never ran
    assert (clone / "VERSION").read_text() == "edited on the node\n"
    assert not (clone / ".git" / "mntui-sync.lock").exists()  # unlocked on the way out


def test_node_script_refuses_a_detached_commit_no_ref_keeps(tmp_path: Path) -> None:
    home = tmp_path / "home"
    clone = repo(home / "code")
    git(clone, "checkout", "-q", "--detach")
    res = run_script(home, "code")  # detached at a branch's commit: on to receive-pack
    assert answer(res) is None and res.stdout.startswith("PREAMBLE")
    (clone / "VERSION").write_text("work done on the node\n")
    git(clone, "commit", "-qam", "node work")
    orphan = head(clone)
    res = run_script(home, "code")
    assert answer(res) == (Answer.ORPHAN, (orphan,)) and res.stdout == ""
    assert "keep it with git -C ~/code branch <name>" in refusal(
        Answer.ORPHAN, (orphan,), "~/code", ""
    )
    git(clone, "update-ref", "refs/mntui/sync", orphan)  # where an earlier sync left it
    assert answer(run_script(home, "code")) is None


def detached(clone: Path) -> bool:
    return subprocess.run(["git", "-C", str(clone), "symbolic-ref", "-q", "HEAD"]).returncode == 1


def local_job(tmp_path: Path, workdir: Path, source: str = "src") -> JobConfig:
    """A node on this machine: the same git push and script, without ssh."""
    return parse_config(
        f"job: j\nnodes: [{{name: l0, host: localhost}}]\nworkdir: {workdir}\ncommand: x\n"
        f"sync: {{source: {source}, git: {{}}}}\n",
        str(tmp_path / "job.yaml"),
    )


def test_a_subdirectory_workdir_is_checked_out_detached(tmp_path: Path) -> None:
    src = repo(tmp_path / "src", {"VERSION": "v1\n"})
    clone = tmp_path / "node" / "code"
    subprocess.run(["git", "clone", "-q", str(src), str(clone)], check=True)
    (clone / "train").mkdir()
    (src / "train").mkdir()
    (src / "train" / "run.py").write_text("v2\n")
    git(src, "add", ".")
    git(src, "commit", "-qm", "v2")
    events: list[str] = []
    cfg = local_job(tmp_path, clone / "train", source="src/train")
    stats = sync_nodes(cfg, on_event=lambda e: events.append(e.format()))
    assert stats["l0"].commit == head(src) == head(clone) and detached(clone)
    assert (clone / "train" / "run.py").read_text() == "v2\n"
    assert events[0].split() == ["l0[0]", "notice", "sync", "->", f"{clone}/train", "(git)"]
    assert f"synced: at {head(src)[:12]} (was " in events[1]
    again: list[str] = []
    sync_nodes(cfg, on_event=lambda e: again.append(e.message))
    assert again[-1].startswith(f"synced: at {head(src)[:12]} (already there) in ")


def test_an_untracked_file_in_the_way_is_never_overwritten(tmp_path: Path) -> None:
    src = repo(tmp_path / "src")
    clone = tmp_path / "node" / "code"
    subprocess.run(["git", "clone", "-q", str(src), str(clone)], check=True)
    (src / "new.py").write_text("committed\n")
    git(src, "add", "new.py")
    git(src, "commit", "-qm", "adds new.py")
    (clone / "new.py").write_text("the node's own, untracked\n")
    before = head(clone)
    with pytest.raises(SyncError) as err:
        sync_nodes(local_job(tmp_path, clone))
    why = err.value.failures["l0"]
    assert why.startswith("git checkout refused: error: The following untracked working tree")
    assert why.endswith("would be overwritten by checkout: new.py"), why
    assert (clone / "new.py").read_text() == "the node's own, untracked\n"
    assert head(clone) == before


def test_ignored_files_on_a_node_are_never_overwritten(tmp_path: Path) -> None:
    """git's checkout takes ignored files for disposable: a node's own `.env` and
    checkpoint directory were replaced by the commit's files, and the sync said done."""
    src = repo(tmp_path / "src", {".gitignore": "conf.local\nckpt/\n", "VERSION": "v1\n"})
    clone = tmp_path / "node" / "code"
    subprocess.run(["git", "clone", "-q", str(src), str(clone)], check=True)
    (clone / "conf.local").write_text("the node's own settings\n")
    (clone / "ckpt").mkdir()
    (clone / "ckpt" / "model.pt").write_text("weights\n")
    (src / ".gitignore").write_text("")
    (src / "conf.local").write_text("committed\n")
    (src / "ckpt").write_text("a file where the node has a directory\n")
    git(src, "add", ".")
    git(src, "commit", "-qm", "tracks them")
    before = head(clone)
    with pytest.raises(SyncError) as err:
        sync_nodes(local_job(tmp_path, clone))
    assert err.value.failures["l0"].startswith("git checkout refused: error: "), err.value
    assert (clone / "conf.local").read_text() == "the node's own settings\n"
    assert (clone / "ckpt" / "model.pt").read_text() == "weights\n"
    assert head(clone) == before
    sync_ref = ["git", "-C", str(clone), "rev-parse", "-q", "--verify", "refs/mntui/sync"]
    assert subprocess.run(sync_ref, capture_output=True).returncode == 1  # moves on success only


def test_a_workdir_in_another_repository_is_refused(tmp_path: Path) -> None:
    """The workdir not cloned yet, inside a dotfiles repository in $HOME: the commit was
    checked out over that repository, deleting its files (`.bashrc`, `.ssh/`)."""
    repo(tmp_path / "src", {"train.py": "print('train')\n"})
    home = repo(tmp_path / "home", {".bashrc": "# mine\n"})
    (home / "proj").mkdir()
    before = head(home)
    with pytest.raises(SyncError) as err:
        sync_nodes(local_job(tmp_path, home / "proj"))
    why = err.value.failures["l0"]
    assert why.startswith(f"{home}/proj is inside a repository whose HEAD {before[:12]} shares")
    assert why.endswith(f"left untouched: clone the project into {home}/proj"), why
    assert (home / ".bashrc").read_text() == "# mine\n" and head(home) == before
    assert not detached(home)


def test_a_refused_checkout_leaves_no_false_orphan(tmp_path: Path) -> None:
    """After a checkout refused for a file in the way, the node's HEAD is still the last
    synced commit, and a retry goes on, even when that commit is gone from the source."""
    src = repo(tmp_path / "src")
    clone = tmp_path / "node" / "code"
    subprocess.run(["git", "clone", "-q", str(src), str(clone)], check=True)
    first = commit_to(src, "v2")
    sync_nodes(local_job(tmp_path, clone))
    assert head(clone) == first and detached(clone)
    (src / "new.py").write_text("x\n")
    git(src, "add", "new.py")
    git(src, "commit", "-q", "--amend", "-m", "v2, amended")  # `first` is gone locally
    (clone / "new.py").write_text("in the way\n")
    with pytest.raises(SyncError):
        sync_nodes(local_job(tmp_path, clone))
    assert head(clone) == first
    (clone / "new.py").unlink()
    sync_nodes(local_job(tmp_path, clone))
    assert head(clone) == head(src) != first


def test_the_users_git_environment_does_not_steer_the_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIT_NAMESPACE wrote the ref under refs/namespaces/..., and the check that it
    arrived then failed without a word; GIT_DIR would have read another repository."""
    src = repo(tmp_path / "src")
    clone = tmp_path / "node" / "code"
    subprocess.run(["git", "clone", "-q", str(src), str(clone)], check=True)
    sha = commit_to(src, "v2")
    other = repo(tmp_path / "other")
    monkeypatch.setenv("GIT_NAMESPACE", "ns")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.bare")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "true")
    stats = sync_nodes(local_job(tmp_path, clone))
    monkeypatch.undo()  # the test's own git reads go to the clone again
    assert stats["l0"].commit == sha == head(clone)


def test_a_held_lock_makes_the_node_wait(tmp_path: Path) -> None:
    """Nodes sharing one clone take turns: a second waits for the first's lock."""
    src = repo(tmp_path / "src")
    clone = tmp_path / "node" / "code"
    subprocess.run(["git", "clone", "-q", str(src), str(clone)], check=True)
    sha = commit_to(src, "v2")
    lock = clone / ".git" / "mntui-sync.lock"
    lock.mkdir()
    done: list[object] = []
    worker = threading.Thread(target=lambda: done.append(sync_nodes(local_job(tmp_path, clone))))
    worker.start()
    worker.join(timeout=1)
    assert worker.is_alive() and head(clone) != sha  # waiting: the lock is held
    lock.rmdir()
    worker.join(timeout=60)
    assert done and head(clone) == sha and not lock.exists()


def commit_to(src: Path, version: str) -> str:
    (src / "VERSION").write_text(f"{version}\n")
    git(src, "commit", "-qam", version)
    return head(src)


# ---- what nodes and git say -----------------------------------------------------------


def test_answers_are_read_strictly() -> None:
    noise = "Welcome (noise)\nconda: base environment activated\n"
    assert parse_answer(noise + f"{M} AT {SHA} -\n", M) == (Answer.AT, (SHA, "-"))
    assert parse_answer(noise + f"{M} DIRTY 3\r\n", M) == (Answer.DIRTY, ("3",))
    forged = [
        f"__MNTUI_SYNC_ffffffffffffffff__ AT {SHA} -",  # another run's marker
        f"{M} AT {SHA} $(reboot)",  # an argument of the wrong shape
        f"{M} AT {SHA} - -",  # too many
        f"{M} REBOOT",  # no such word
        f"x{M} DIRTY 1",
        f"{M}  DIRTY 1",
        f"{M} DIRTY 1234567890",
        f"{M} AT {SHA[:39]}",
    ]
    assert parse_answer("\n".join(forged), M) is None
    assert parse_answer("\n".join([*forged, f"{M} NOREPO"]), M) == (Answer.NO_REPO, ())


def test_git_error_is_the_cause_in_one_line() -> None:
    ssh_down = (
        "ssh: connect to host 10.0.0.9 port 22: Connection refused\r\n"
        "fatal: Could not read from remote repository.\n\n"
        "Please make sure you have the correct access rights\nand the repository exists.\n"
    )
    assert git_error(ssh_down, M) == "ssh: connect to host 10.0.0.9 port 22: Connection refused"
    denied = "Permission denied (publickey).\nfatal: Could not read from remote repository.\n"
    assert git_error(denied, M) == "Permission denied (publickey)."
    rejected = (
        "conda: base environment activated\n"
        f" ! [remote rejected] {SHA} -> refs/mntui/sync (shallow update not allowed)\n"
        "error: failed to push some refs to 'node0:.'\n"
    )
    assert git_error(rejected, M).startswith("! [remote rejected]")
    assert git_error("\x1b]0;evil\x07\n", M) == "no message"  # escapes only: no cause
    assert git_error("fatal: \x1b[2Jbad\x9b2J \x1b]52;c;eA==\x07ref\n", M) == "fatal: bad ref"
    assert git_error("", M) == "no message"
    assert git_error(f"{M} DIRTY 1\n", M) == "no message"


def test_refusals_name_the_fix() -> None:
    dirty = refusal(Answer.DIRTY, ("2",), "~/my code", "")
    assert dirty == (
        "~/my code has 2 uncommitted change(s) to tracked files; left untouched: "
        "commit, stash or discard them there (git -C ~/'my code' status)"
    )
    assert refusal(Answer.NO_WORKDIR, (), "/w", "") == (
        "workdir /w does not exist: clone the repository there"
    )
    assert "remove it if none runs" in refusal(Answer.BUSY, (), "/w", "")


# ---- the local repository -----------------------------------------------------------------


def test_status_entries() -> None:
    z = " M a.py\0R  new.py\0old.py\0?? notes/\0A  b.py\0D  c\0?? x y\0"
    assert parse_status(z) == (("a.py", "new.py", "b.py", "c"), 2)
    assert parse_status("") == ((), 0)


def test_local_head_and_what_stays_behind(tmp_path: Path) -> None:
    src = repo(tmp_path / "src")
    (src / "sub").mkdir()
    found = read_head(str(src / "sub"))  # any directory inside the repository
    assert (found.repo, found.sha, found.changed, found.untracked) == (str(src), head(src), (), 0)
    assert local_notices(found, GitSync()) == []
    (src / "VERSION").write_text("v2\n")
    (src / "new.py").write_text("x\n")
    found = read_head(str(src))
    assert found.changed == ("VERSION",) and found.untracked == 1
    with pytest.raises(MntuiError) as err:
        local_notices(found, GitSync())
    assert str(err.value) == (
        f"{src} has 1 uncommitted change(s) (VERSION), and sync.git sends commits: commit "
        f"them, or set sync.git.allow_dirty: true to sync HEAD {found.sha[:12]} without them"
    )
    assert local_notices(found, GitSync(allow_dirty=True)) == [
        f"syncing HEAD {found.sha[:12]}; 1 uncommitted change(s) (VERSION) stay local "
        "(allow_dirty)",
        "1 untracked path(s) stay local: git add them to sync them",
    ]


def test_a_source_without_commits_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    with pytest.raises(UsageError) as err:
        read_head(str(tmp_path / "plain"), "job.yaml")
    assert str(err.value) == (
        f"job.yaml sync.source: {tmp_path / 'plain'} is in no git repository (sync.git syncs "
        "the HEAD of one): set sync.source to a directory of it, or drop sync.git to rsync"
    )
    git(tmp_path / "plain", "init", "-q")
    with pytest.raises(MntuiError, match=r"plain has no commit yet: commit, then launch"):
        read_head(str(tmp_path / "plain"))


def test_publish_pushes_the_branch_or_says_why(tmp_path: Path) -> None:
    src = repo(tmp_path / "src")
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    found = read_head(str(src))
    assert publish(found, str(bare)) == f"pushed HEAD {found.sha[:12]} to {bare}"
    branch = git(src, "branch", "--show-current").strip()
    assert git(bare, "rev-parse", branch).strip() == found.sha
    git(src, "checkout", "-q", "--detach")
    with pytest.raises(MntuiError) as err:
        publish(found, "https://user:s3cret@127.0.0.1:9/x.git")
    assert "s3cret" not in str(err.value) and str(err.value).startswith(
        "sync.git.push: git push https://***@127.0.0.1:9/x.git HEAD failed: fatal: "
    )


# ---- the command lines --------------------------------------------------------------------


def test_command_line(tmp_path: Path) -> None:
    cfg = parse_config(git_cfg(tmp_path, "{git: {}}"), str(tmp_path / "job.yaml"))
    src = repo(tmp_path / "src")
    found = read_head(str(src))
    argv = sync_argv(cfg, cfg.node("n0"), found, M)
    assert argv[:4] == ["git", "-C", str(src), "push"]
    assert argv[-3:] == ["--", "n0:.", f"+{found.sha}:refs/mntui/incoming"]
    receive_pack = next(a for a in argv if a.startswith("--receive-pack="))
    words = shlex.split(receive_pack.removeprefix("--receive-pack="))
    assert words == ["exec", "sh", "-c", SYNC_SCRIPT, "mntui-sync", "my code", M, M, found.sha]
    local = sync_argv(cfg, cfg.node("here"), found, M)
    assert local[-2] == str(Path.home()) and shlex.split(local[-4])[-2] == ""  # no preamble
    bad = parse_config(
        git_cfg(tmp_path, "{git: {}}").replace("[n0,", "[{name: n0, host: -oProxyCommand=x},"),
        str(tmp_path / "job.yaml"),
    )
    with pytest.raises(UsageError, match="starts with '-'"):
        sync_argv(bad, bad.node("n0"), found, M)
