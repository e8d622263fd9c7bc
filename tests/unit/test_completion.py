"""Shell completion: `mntui completion SHELL` prints a script, and TAB completes verbs,
node names from the config and run ids from the records (argcomplete's protocol, and
bash running the printed script for real)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mntui.sessions.runs import NodeRecord, RunRecord

CONFIG = "job: tcomp\nnodes: [{name: g369, host: localhost}, {name: g375, host: localhost}]\ncommand: x\n"
RUNS = ("20261124-070000-aaaa", "20261124-080000-bbbb")
BIN = str(Path(sys.executable).parent)  # where `mntui` is installed, for the scripts


def setup(tmp: Path) -> None:
    (tmp / "mntui.yaml").write_text(CONFIG)
    for run_id in RUNS:
        RunRecord(
            "tcomp", run_id, "mntui.yaml", "127.0.0.1", 29500,
            [NodeRecord("g369", "localhost", 0, "s", "t", "d")],
        ).create()  # fmt: skip


def complete(tmp: Path, line: str) -> list[str]:
    """What argcomplete answers for `line` (the cursor at its end)."""
    out = tmp / "completions"
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
    }
    res = subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli"], cwd=tmp, env=env, capture_output=True,
        text=True, timeout=30,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return sorted(w.strip() for w in out.read_text().split("\n") if w.strip())


def test_tab_completes_verbs_nodes_and_runs(tmp_path: Path) -> None:
    setup(tmp_path)
    assert complete(tmp_path, "mntui ki") == ["kill"]
    assert {"init", "completion", "status"} <= set(complete(tmp_path, "mntui "))
    assert complete(tmp_path, "mntui kill g") == ["g369", "g375"]
    assert complete(tmp_path, "mntui attach g36") == ["g369"]
    assert complete(tmp_path, "mntui logs -f g") == ["g369", "g375"]
    assert complete(tmp_path, "mntui status --run 2026") == list(RUNS)
    assert complete(tmp_path, "mntui report --run 20261124-08") == [RUNS[1]]
    (tmp_path / "mntui.yaml").rename(tmp_path / "other.yaml")
    assert complete(tmp_path, "mntui kill g") == []  # no config here: no names, no error
    assert complete(tmp_path, "mntui -c other.yaml kill g") == ["g369", "g375"]


def test_bash_runs_the_printed_script(tmp_path: Path) -> None:
    setup(tmp_path)
    script = tmp_path / "mntui.bash"
    res = subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", "completion", "bash"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert res.returncode == 0 and "complete" in res.stdout
    script.write_text(res.stdout)
    probe = (
        f"source {script}; COMP_LINE='mntui kill g'; COMP_POINT=${{#COMP_LINE}}; "
        "COMP_WORDS=(mntui kill g); COMP_CWORD=2; COMP_TYPE=9; "
        "_python_argcomplete mntui; printf '%s\\n' \"${COMPREPLY[@]}\""
    )
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    got = subprocess.run(
        ["bash", "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30
    )
    assert sorted(got.stdout.split()) == ["g369", "g375"], got.stderr


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts(shell: str, tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", "completion", shell],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert res.returncode == 0 and "mntui" in res.stdout
    if shutil.which(shell):  # the shell parses it, where it is installed
        path = tmp_path / f"mntui.{shell}"
        path.write_text(res.stdout)
        check = ["zsh", "-n", str(path)] if shell == "zsh" else ["fish", "--no-execute", str(path)]
        assert subprocess.run(check, capture_output=True).returncode == 0
    if shell == "fish" and shutil.which("fish"):  # and completes, as fish asks it
        setup(tmp_path)
        env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
        probe = f"source {tmp_path / 'mntui.fish'}; complete -C 'mntui kill g'"
        got = subprocess.run(
            ["fish", "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert got.stdout.split() == ["g369", "g375"], got.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", "completion", "csh"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
