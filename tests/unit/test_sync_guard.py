"""The rule that refuses `sync: {delete: true}` into a home, above one, or into mntui's own
directories: on the config text (file, line, key and the fix; exit 2 as every ConfigError),
on real paths (a link to the home), and the node's own check (sh, physical paths)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mntui.sessions.config import ConfigError
from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.config.syncguard import (
    GUARD_SCRIPT,
    NODE_DIR,
    Refused,
    local_refusal,
    normal,
    parse_refused,
    refusal,
    target,
)
from mntui.sessions.errors import ExitCode
from mntui.sessions.procs import RUNS_DIR
from mntui.sessions.sync.rsync import rsync_argv

HOME = "/home/alice"
FIX = (
    "sync.delete: true deletes everything there that the source lacks: set workdir to the "
    "project's own directory (like ~/code), or drop sync.delete"
)


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch) -> None:
    """A home, and mntui's own directories here, that are no real ones: only compared."""
    monkeypatch.setenv("HOME", HOME)
    monkeypatch.setenv("XDG_STATE_HOME", "/srv/xdg")  # never created: only compared


def job(workdir: str, sync: str = "{source: ., delete: true}", extra: str = "") -> str:
    return f"job: j\nnodes: [a, b]\nworkdir: {workdir}\ncommand: x\nsync: {sync}\n{extra}"


REFUSED = {
    '"~"': "is the home directory",
    '"~/"': "is the home directory",
    '"~//"': "is the home directory",
    '"~/."': "is the home directory",
    "~/code/..": "is the home directory",
    ".": "is the home directory",
    "./": "is the home directory",
    "code/..": "is the home directory",
    "/home/alice": "is the home directory",
    "/home/alice/": "is the home directory",
    "/home//alice/./": "is the home directory",
    "/": "is /",
    "//": "is /",
    "/home": "holds the home directory",
    "..": "holds the home directory",
    '"~/.."': "holds the home directory",
    "~/.mntui": "is mntui's own ~/.mntui",
    "~/.mntui/runs/j": "is inside mntui's own ~/.mntui",
    "/home/alice/.mntui/runs": "is inside mntui's own ~/.mntui",
}


@pytest.mark.parametrize(("workdir", "why"), sorted(REFUSED.items()))
def test_delete_into_the_home_is_refused_at_the_workdir_line(workdir: str, why: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(job(workdir), "c.yaml")
    shown = workdir.strip('"')
    assert str(err.value) == f"c.yaml:3 workdir: {shown} {why}; {FIX}"
    assert "\n" not in str(err.value) and err.value.line == 3


@pytest.mark.parametrize(
    "workdir",
    ["~/code", "code", "/home/alice/code", "/home/bob", "~/../bob", "/data/x", "~/.mntuix"],
)
def test_a_project_directory_is_fine(workdir: str) -> None:
    assert parse_config(job(workdir), "c.yaml").nodes[0].workdir == workdir


@pytest.mark.parametrize(
    "sync", ["{source: .}", "{source: ., delete: false}", "{git: {checkout: same-commit}}"]
)
def test_without_delete_the_home_is_a_workdir(sync: str) -> None:
    """Only rsync's --delete removes what the source lacks; git mode never deletes an
    untracked or ignored file (its checkout refuses to overwrite one)."""
    assert parse_config(job('"~"', sync), "c.yaml").nodes[0].workdir == "~"


def test_the_state_directory_here_is_mntuis_own() -> None:
    for workdir, why in [
        ("/srv/xdg", "holds mntui's own /srv/xdg/mntui"),
        ("/srv/xdg/mntui/j", "is inside mntui's own /srv/xdg/mntui"),
    ]:
        with pytest.raises(ConfigError) as err:
            parse_config(job(workdir), "c.yaml")
        assert err.value.message == f"{workdir} {why}; {FIX}"


@pytest.mark.parametrize(
    ("extra", "line", "key"),
    [
        ("overrides: {b: {workdir: '~'}}", 6, "overrides.b.workdir"),
        ("spares: [{name: s, workdir: /home/alice}]", 6, "spares[0].workdir"),
    ],
)
def test_an_override_or_a_spare_is_refused_at_its_own_line(extra: str, line: int, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(job("~/code", extra=extra), "c.yaml")
    assert (err.value.line, err.value.keypath) == (line, key)
    assert err.value.message.endswith(FIX)


def test_a_node_mapping_is_refused_at_its_own_line() -> None:
    text = "job: j\nnodes:\n  - a\n  - {name: b, workdir: .}\ncommand: x\nsync: {source: ., delete: true}\n"
    with pytest.raises(ConfigError) as err:
        parse_config(text, "c.yaml")
    assert (err.value.line, err.value.keypath) == (4, "nodes[1].workdir")


def test_the_cli_says_it_in_one_line_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(job('"~"'))
    res = subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "launch", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert res.returncode == ExitCode.USAGE == 2
    assert res.stderr.splitlines() == [f"mntui: {path}:3 workdir: ~ is the home directory; {FIX}"]


# ---- the rule on paths ------------------------------------------------------------


def test_target_reads_workdirs_as_the_node_does() -> None:
    assert target("~", HOME) == target("~/", HOME) == target(".", HOME) == HOME
    assert target("code", HOME) == target("~/code/", HOME) == f"{HOME}/code"
    assert target("/x/../y", HOME) == "/y" and normal("//a//b/") == "/a/b"


def test_refusal_on_paths() -> None:
    owned = [f"{HOME}/.mntui"]
    assert refusal("/", HOME, owned) == "is /"
    assert refusal("/home", HOME, owned) == "holds the home directory"
    assert refusal("/home/al", HOME, owned) is None  # a prefix is no ancestor
    assert refusal(f"{HOME}/.mntui/runs", HOME, owned) == "is inside mntui's own ~/.mntui"
    assert refusal("/srv/x", HOME, ["/srv/x/y"]) == "holds mntui's own /srv/x/y"
    assert refusal(f"{HOME}/code", HOME, owned) is None


def test_a_local_link_to_the_home_is_the_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / "code").mkdir(parents=True)
    (tmp_path / "link").symlink_to(home)
    monkeypatch.setenv("HOME", str(home))
    assert local_refusal(str(tmp_path / "link")) == "is the home directory"
    assert local_refusal("~/code/..") == "is the home directory"
    assert local_refusal(str(tmp_path / "link" / ".mntui")) == "is mntui's own ~/.mntui"
    assert local_refusal("~/code") is None and local_refusal(str(tmp_path / "new")) is None


def test_the_node_directory_holds_the_runs() -> None:
    assert RUNS_DIR.startswith(f"{NODE_DIR}/")


# ---- the node's check: sh, physical paths -------------------------------------------


def guard(home: Path, dest: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", GUARD_SCRIPT, "mntui-guard", dest, "MARK"],
        cwd=home,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_node_guard_refuses_the_home_by_its_physical_path(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for d in ("code", ".mntui/runs/j"):
        (home / d).mkdir(parents=True)
    (home / "link").symlink_to(home)
    expected = {
        ".": Refused.HOME,
        "link": Refused.HOME,
        str(home): Refused.HOME,
        "code/..": Refused.HOME,
        "..": Refused.ABOVE,
        "/": Refused.ABOVE,
        ".mntui": Refused.OWN,
        ".mntui/runs/j": Refused.OWN,
        "code": None,
        str(tmp_path): Refused.ABOVE,
    }
    for dest, refused in expected.items():
        res = guard(home, dest)
        assert res.returncode == (0 if refused is None else 3), (dest, res.stderr)
        assert parse_refused(res.stderr, "MARK") == refused, dest


def test_the_guard_parser_is_strict() -> None:
    assert parse_refused("noise\nMARK REFUSED HOME\n", "MARK") is Refused.HOME
    assert parse_refused("OTHER REFUSED HOME", "MARK") is None  # not this run's marker
    assert parse_refused("MARK REFUSED NOPE", "MARK") is None
    assert parse_refused("MARK REFUSED HOME and more", "MARK") is None
    assert parse_refused("", "MARK") is None


def test_rsync_deletes_after_and_the_node_checks_first(tmp_path: Path) -> None:
    cfg = parse_config(
        "job: j\nnodes: [n0]\nworkdir: ~/my code\ncommand: x\n"
        "sync: {source: src, delete: true, excludes: [data/]}\n",
        str(tmp_path / "job.yaml"),
    )
    argv = rsync_argv(cfg, cfg.node("n0"), "MARK")
    assert "--delete-after" in argv and not any(a.startswith("--delete-excluded") for a in argv)
    path = next(a for a in argv if a.startswith("--rsync-path="))
    guard_call = f"sh -c {shlex.quote(GUARD_SCRIPT)} mntui-guard 'my code' MARK"
    assert path == (
        f"--rsync-path=cd && mkdir -p -- 'my code' && {guard_call} && printf %s MARK && exec rsync"
    )
    plain = parse_config(
        "job: j\nnodes: [n0]\nworkdir: ~/c\ncommand: x\nsync: {source: src}\n",
        str(tmp_path / "job.yaml"),
    )
    argv = rsync_argv(plain, plain.node("n0"), "MARK")
    assert not any(a.startswith("--delete") for a in argv) and "mntui-guard" not in " ".join(argv)


def test_the_guard_passes_shellcheck(tmp_path: Path) -> None:
    shellcheck = Path(sys.executable).parent / "shellcheck"
    script = tmp_path / "guard.sh"
    script.write_text(GUARD_SCRIPT)
    res = subprocess.run([str(shellcheck), "-s", "sh", str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
