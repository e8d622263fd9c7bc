"""`mntui init`: the file it writes loads, its command carries the placeholders, hosts
are checked as ssh resolves them, and an existing file is never overwritten."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mntui.sessions.config import load_config
from mntui.sessions.errors import UsageError
from mntui.sessions.launch.nodeplan import render_command
from mntui.tui.cli.init_config import _write_checked, command_template

FLAGS = (
    "--nnodes={nnodes} --node_rank={node_rank} --nproc_per_node={nproc_per_node} "
    "--master_addr={master_addr} --master_port={master_port}"
)


def mntui(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once it is closed


def ssh_config(tmp: Path, **hosts: int) -> Path:
    path = tmp / "ssh_config"
    path.write_text(
        "".join(f"Host {h}\n    HostName 127.0.0.1\n    Port {p}\n" for h, p in hosts.items())
    )
    return path


@pytest.mark.parametrize(
    ("words", "template"),
    [
        ([], f"torchrun {FLAGS} train.py"),
        (["train.py", "--lr", "3e-4"], f"torchrun {FLAGS} train.py --lr 3e-4"),
        (["torchrun", "--nproc_per_node=8", "t.py"], None),
        (["python3", "-m", "torch.distributed.run", "t.py"], None),
        (["bash", "run.sh", "{node_rank}"], "bash run.sh {node_rank}"),
        (["t.py", "--cfg", '{"a": 1}', "--name", "my run"], None),
    ],
)
def test_the_command_gets_torchrun_and_the_placeholders(
    words: list[str], template: str | None
) -> None:
    got = command_template(words)
    if template is not None:
        assert got == template
    values = {"nnodes": 2, "node_rank": 1, "nproc_per_node": 8, "master_addr": "g369"}
    rendered = render_command(got, {**values, "master_port": 29500, "node": "g375"})
    if words and words[0] == "torchrun":  # the user's own flag wins; the others are added
        assert rendered.count("--nproc_per_node") == 1 and "--node_rank=1" in rendered
    if "--cfg" in words:
        assert """'{"a": 1}'""" in rendered and "'my run'" in rendered  # as typed, quoted
    if words[:1] == ["python3"]:
        assert rendered.startswith("python3 -m torch.distributed.run --nnodes=2 --node_rank=1")


def test_words_after_the_double_dash_are_the_command(tmp_path: Path) -> None:
    res = mntui(tmp_path, "init", "localhost", "--nproc", "2", "--", "torchrun", "t.py", "--", "x")
    assert res.returncode == 0, res.stderr
    cfg = load_config(tmp_path / "mntui.yaml")
    assert cfg.nodes[0].command.endswith(" t.py -- x") and cfg.nproc_per_node == 2


def test_init_writes_a_config_that_loads_and_checks_each_host(tmp_path: Path) -> None:
    with socket.socket() as live:  # an SSH-looking server, and a host where none listens
        live.bind(("127.0.0.1", 0))
        live.listen()
        live.settimeout(30)
        conf = ssh_config(tmp_path, g369=live.getsockname()[1], g375=closed_port())
        proc = subprocess.Popen(
            [sys.executable, "-m", "mntui.tui.cli", "init", "g369", "alice@g375",
             "--ssh-config", str(conf), "--nproc", "8", "--", "train.py", "--lr", "3e-4"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        conn, _ = live.accept()
        with conn:
            conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 fake\r\n")
            out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert re.search(r"\n  g369  \S*127\.0\.0\.1:\d+  reachable: SSH-2\.0-OpenSSH_9\.2p1", out)
    assert re.search(r"warning: g375  alice@127\.0\.0\.1:\d+  unreachable: ", out)
    assert out.rstrip().endswith(
        "mntui doctor        # SSH, tmux, python, torch, GPUs and ports on every node"
    )
    cfg = load_config(tmp_path / "mntui.yaml")
    assert [(n.name, n.host) for n in cfg.nodes] == [("g369", "g369"), ("g375", "alice@g375")]
    assert cfg.main == "g369" and cfg.nproc_per_node == 8 and cfg.ssh.config == str(conf)
    assert cfg.nodes[0].command == f"torchrun {FLAGS} train.py --lr 3e-4"
    assert cfg.job == re.sub(r"[^A-Za-z0-9_-]+", "-", tmp_path.name).strip("-_")[:64]


def test_init_never_overwrites(tmp_path: Path) -> None:
    (tmp_path / "mntui.yaml").write_text("mine\n")
    res = mntui(tmp_path, "init", "localhost")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and "mntui.yaml exists; not overwriting" in res.stderr
    assert (tmp_path / "mntui.yaml").read_text() == "mine\n"


def test_init_from_a_hostfile_or_slurm(tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text("localhost slots=2\n")
    res = mntui(tmp_path, "init", "--hostfile", "hosts", "-c", "a.yaml")
    assert res.returncode == 0, res.stderr
    assert "localhost  this machine: no SSH" in res.stdout
    cfg = load_config(tmp_path / "a.yaml")
    assert [n.name for n in cfg.nodes] == ["localhost"] and cfg.nproc(cfg.nodes[0]) == 2
    res = mntui(tmp_path, "init", "--slurm", "-c", "b.yaml", "--", "torchrun", "t.py")
    assert res.returncode == 0, res.stderr  # outside an allocation: written, with a warning
    assert "nodes: {slurm: auto}" in (tmp_path / "b.yaml").read_text()
    res = mntui(tmp_path, "init", "-c", "c.yaml")
    assert res.returncode == 2 and "HOST..., --hostfile FILE or --slurm" in res.stderr
    assert not (tmp_path / "c.yaml").exists()
    res = mntui(tmp_path, "init", "g1", "--job", "bad name", "-c", "d.yaml")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "job" in res.stderr
    assert not (tmp_path / "d.yaml").exists()
    assert not list(tmp_path.glob(".*.init-*")), "the check's copy is left behind"


def test_init_never_writes_through_a_link_at_its_temp_name(tmp_path: Path) -> None:
    """Issue 28, finding 9: init's copy, `.<name>.init-<pid>` beside the target, was
    opened with Path.write_text (O_CREAT|O_TRUNC, follows links) at a name anyone could
    guess: in a shared directory another user's link there made init overwrite what it
    points to (their victim's ~/.bashrc), then unlink the link and leave no trace."""
    victim = tmp_path / "victim_bashrc"
    victim.write_text("export PATH=$HOME/bin:$PATH\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    path = shared / "mntui.yaml"
    os.symlink(victim, shared / f".mntui.yaml.init-{os.getpid()}")  # planted by someone else
    text = "job: demo\nnodes: [localhost]\ncommand: sleep 1\n"
    try:
        _write_checked(path, text, strict=True)
    except Exception:  # refusing is fine; writing through the link is not
        pass
    assert victim.read_text() == "export PATH=$HOME/bin:$PATH\n", (
        f"the victim file now holds: {victim.read_text()[:60]!r}"
    )
    # written beside it under a name of its own, with the umask's mode, and no copy left
    assert path.read_text() == text and not path.is_symlink()
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask()
    assert [p.name for p in shared.glob(".*.init-*")] == [f".mntui.yaml.init-{os.getpid()}"]


def test_a_link_at_the_target_is_never_replaced(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("mine\n")
    (tmp_path / "mntui.yaml").symlink_to(victim)
    (tmp_path / "new.yaml").symlink_to(tmp_path / "nowhere")  # dangling
    for name in ("mntui.yaml", "new.yaml"):
        with pytest.raises(UsageError, match="exists; not overwriting"):
            _write_checked(
                tmp_path / name, "job: demo\nnodes: [localhost]\ncommand: x\n", strict=True
            )
    assert victim.read_text() == "mine\n" and not (tmp_path / "nowhere").exists()
    assert not list(tmp_path.glob(".*.init-*")), "the check's copy is left behind"


def umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
