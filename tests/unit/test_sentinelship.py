"""launch/sentinelship.py's scripts under the shell that runs them (dash, with this
test's HOME) and shellcheck, and its parsers on what a node may answer instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mntui.sessions.launch import sentinelship as ship
from mntui.sessions.launch.sentinelship import ShipAnswer, ShipState

SHELLCHECK = Path(sys.executable).parent / "shellcheck"
DASH = shutil.which("dash") or "/bin/dash"  # a node's sh, found before a test narrows PATH
B = ship.bundle()


def sh(script: str, home: Path, path: str | None = None) -> str:
    env = {**os.environ, "HOME": str(home), "PATH": path or os.environ["PATH"]}
    res = subprocess.run([DASH, "-s"], input=script, capture_output=True, text=True, env=env)
    assert res.returncode == 0 and res.stderr == "", res
    return res.stdout


SCRIPTS = {
    "ship": ship.ship_script(B),
    "ship-py": "py=/opt/py/bin/python3\n" + ship.ship_script(B, '"$py"'),
    "presence": ship.presence_script(B),
    "python": ship.python_check_script(),
    "sentinel-python": ship.sentinel_python_check('cd -- "$HOME"/w || exit 97\n. ./env'),
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_scripts_pass_dash_and_shellcheck(name: str, tmp_path: Path) -> None:
    text = SCRIPTS[name]
    assert subprocess.run(["dash", "-n"], input=text, text=True).returncode == 0
    path = tmp_path / f"{name}.sh"
    path.write_text(text)
    res = subprocess.run([str(SHELLCHECK), "-s", "sh", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_bytes_never_travel_in_argv() -> None:
    """Only in the heredoc, whose end marker differs each time."""
    first, second = ship.ship_script(B), ship.ship_script(B)
    assert first != second
    body = [line for line in first.splitlines() if len(line) == 76]
    assert len(body) > 100 and all(" " not in line for line in body)


def test_shipped_then_present_private_and_whole(tmp_path: Path) -> None:
    target = tmp_path / ship.remote_path(B.sha)
    assert ship.parse_ship(sh(SCRIPTS["presence"], tmp_path), B.sha).state is ShipState.ABSENT
    assert ship.parse_ship(sh(SCRIPTS["ship"], tmp_path), B.sha) == ShipAnswer(
        ShipState.SHIPPED, None
    )
    assert target.read_bytes() == B.data
    assert target.stat().st_mode & 0o777 == 0o600
    assert target.parent.stat().st_mode & 0o777 == 0o700
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]  # no temp left
    assert ship.parse_ship(sh(SCRIPTS["ship"], tmp_path), B.sha).state is ShipState.PRESENT
    assert ship.parse_ship(sh(SCRIPTS["presence"], tmp_path), B.sha).state is ShipState.PRESENT
    target.write_bytes(B.data[:-1])  # cut short: not this bundle, shipped again
    assert ship.parse_ship(sh(SCRIPTS["presence"], tmp_path), B.sha).state is ShipState.ABSENT
    assert ship.parse_ship(sh(SCRIPTS["ship"], tmp_path), B.sha).state is ShipState.SHIPPED
    assert target.read_bytes() == B.data


def test_bytes_that_do_not_check_out_are_never_put_in_place(tmp_path: Path) -> None:
    script = SCRIPTS["ship"]
    line = next(ln for ln in script.splitlines() if len(ln) == 76)
    answer = ship.parse_ship(sh(script.replace(line, "A" * 76, 1), tmp_path), B.sha)
    assert answer == ShipAnswer(ShipState.FAILED, "checksum mismatch")
    assert list((tmp_path / ".mntui" / "sentinel").iterdir()) == []


def test_a_node_without_python3_nor_sha256sum_says_so(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("base64", "mkdir", "chmod", "mv", "rm"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or tool)
    home = tmp_path / "home"
    home.mkdir()
    answer = ship.parse_ship(sh(SCRIPTS["ship"], home, str(bin_dir)), B.sha)
    assert answer == ShipAnswer(ShipState.FAILED, "no python3 nor sha256sum")
    assert ship.parse_python(sh(SCRIPTS["python"], home, str(bin_dir))) is None


def test_a_node_without_python3_gets_the_bundle_checked_by_sha256sum(tmp_path: Path) -> None:
    """A kill runs the bundle on another python than the bare python3 (the job's own,
    launch/kill.py): the bundle reaches such a node all the same, checked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("base64", "mkdir", "chmod", "mv", "rm", "sha256sum", "cut"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or tool)
    home = tmp_path / "home"
    home.mkdir()
    answer = ship.parse_ship(sh(SCRIPTS["ship"], home, str(bin_dir)), B.sha)
    assert answer == ShipAnswer(ShipState.SHIPPED, None)
    assert (home / ship.remote_path(B.sha)).read_bytes() == B.data


def test_the_python_check_reads_this_python(tmp_path: Path) -> None:
    version = ship.parse_python(sh(SCRIPTS["python"], tmp_path))
    assert version is not None and ship.sentinel_usable(version)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("PY 3.9\n", (3, 9)),
        ("noise\nPY 3.12\n", (3, 12)),
        ("PY none\n", None),
        ("PY 3.9\nPY 3.10\n", None),
        ("PY 3\n", None),
        ("PY 3.9 extra\n", None),
        ("", None),
    ],
)
def test_parse_python(text: str, want: tuple[int, int] | None) -> None:
    assert ship.parse_python(text) == want


def test_sentinel_usable() -> None:
    assert ship.sentinel_usable((3, 9)) and ship.sentinel_usable((4, 0))
    assert not ship.sentinel_usable((3, 8)) and not ship.sentinel_usable(None)


S = B.sha


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (f"SENTINEL_BUNDLE {S} present\n", ShipAnswer(ShipState.PRESENT, None)),
        (f"x\nSENTINEL_BUNDLE {S} shipped\n", ShipAnswer(ShipState.SHIPPED, None)),
        (
            f"SENTINEL_BUNDLE {S} failed no\x1b[2J python3",
            ShipAnswer(ShipState.FAILED, "no python3"),
        ),
        ("", ShipAnswer(ShipState.FAILED, "0 SENTINEL_BUNDLE lines in the answer")),
        (
            f"SENTINEL_BUNDLE {S} present\nSENTINEL_BUNDLE {S} present\n",
            ShipAnswer(ShipState.FAILED, "2 SENTINEL_BUNDLE lines in the answer"),
        ),
        (
            "SENTINEL_BUNDLE 0123456789abcdef present",
            ShipAnswer(
                ShipState.FAILED, "unexpected answer: SENTINEL_BUNDLE 0123456789abcdef present"
            ),
        ),
        (
            f"SENTINEL_BUNDLE {S} present because",
            ShipAnswer(ShipState.FAILED, f"unexpected answer: SENTINEL_BUNDLE {S} present because"),
        ),
        (
            f"SENTINEL_BUNDLE {S} failed",
            ShipAnswer(ShipState.FAILED, f"unexpected answer: SENTINEL_BUNDLE {S} failed"),
        ),
    ],
)
def test_parse_ship(text: str, want: ShipAnswer) -> None:
    assert ship.parse_ship(text, S) == want
