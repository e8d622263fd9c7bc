"""`mntui doctor` on real sshd nodes: every check passes on a healthy cluster, and each
one is made to fail for real."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakecluster import FakeCluster, alive, free_port, tagged
from helpers import Cfg, listener_job, tagged_anywhere


def rows(res: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert res.stdout.strip(), (
        f"doctor printed nothing (exit {res.returncode}): {res.stderr[-2000:]}"
    )
    return json.loads(res.stdout)


def status(rs: list[dict[str, Any]], node: str, check: str) -> list[str]:
    return [r["status"] for r in rs if r["node"] == node and r["check"] == check]


def test_healthy_cluster_passes_with_allreduce(fake: FakeCluster, cfg: Cfg) -> None:
    """From a hostfile whose slots differ: each node's ranks are counted by its own slots.
    A real job called `<job>-smoke` (the name the smoke test once took) runs meanwhile:
    it is left alone (this was a test of its own, which ran a second smoke job)."""
    victim = cfg.write(listener_job("dhealthy-smoke", free_port()), name="victim.yaml")
    res = cfg.mntui(victim, "launch", "--no-ui")
    assert res.returncode == 0, res.stdout + res.stderr
    pids = {n: tagged("dhealthy-smoke", n) for n in ("node0", "node1")}
    assert all(pids.values()), pids
    sessions = {n: fake.node(n).sessions() for n in ("node0", "node1")}
    (cfg.tmp / "hosts").write_text("node0 slots=2\nnode1 slots=1\n")
    path = cfg.write(f"""
    job: dhealthy
    nodes: {{hostfile: hosts}}
    master_port: {free_port()}
    nproc_per_node: 4
    env: {{GLOO_SOCKET_IFNAME: lo, OMP_NUM_THREADS: "1"}}
    command: sleep 1
    """)
    res = cfg.mntui(path, "doctor", "--allreduce", "--json", "--timeout", "60", timeout=180)
    rs = rows(res)
    assert res.returncode == 0, [r for r in rs if r["status"] != "PASS"]
    checks = {r["check"] for r in rs}
    assert {
        "ssh",
        "tmux",
        "workdir",
        "torch",
        "stacks",
        "master_addr",
        "ifname",
        "leftovers",
        "clock",
        "ports",
        "tcp",
        "allreduce",
    } <= checks
    smoke = [r for r in rs if r["check"] == "allreduce"]
    assert [r["node"] for r in smoke] == ["node0", "node0", "node1"]
    assert all("sum 3.0 (expected 3.0)" in r["detail"] for r in smoke)
    assert all(re.search(r"latency \d+ us, algbw [\d.]+ GB/s", r["detail"]) for r in smoke)
    for node, before in pids.items():
        assert alive(before) == before, f"doctor --allreduce killed {node}'s job"
        assert set(fake.node(node).sessions()) == set(sessions[node])  # none left, none gone
    from mntui.sessions.doctor.smoke import smoke_job

    assert tagged_anywhere(smoke_job("dhealthy")) == []


def test_each_check_fails_for_real(fake: FakeCluster, cfg: Cfg, tmp_path: Path) -> None:
    port = free_port()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import socket, time; s = socket.socket(); "
            f"s.bind(('0.0.0.0', {port})); s.listen(); time.sleep(120)",
            "last-nights-run",
        ]
    )
    leftover = subprocess.Popen(
        ["sleep", "120"], env={"MNTUI_RUN": "dbroken/old-run/node1", "PATH": "/usr/bin:/bin"}
    )
    repos = []
    for i in range(2):  # per-node checkouts at different commits, one of them dirty
        repo = tmp_path / f"repo{i}"
        repo.mkdir()
        git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
        subprocess.run([*git[:3], "init", "-q"], check=True)
        (repo / "train.py").write_text(f"print({i})\n")
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", f"v{i}"], check=True)
        repos.append(repo)
    (repos[1] / "train.py").write_text("print('edited')\n")
    notorch = tmp_path / "notorch"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(notorch)], check=True)
    try:
        path = cfg.write(f"""
        job: dbroken
        nodes: [node0, node1]
        master_port: {port}
        env: {{NCCL_SOCKET_IFNAME: "nope0"}}
        command: sleep 1
        overrides:
          node0: {{workdir: {repos[0]}}}
          node1:
            workdir: {repos[1]}
            setup: ". {notorch}/bin/activate"
        """)
        res = cfg.mntui(path, "doctor", "--json", timeout=120)
        assert res.returncode == 2
        rs = rows(res)
        ports = next(r for r in rs if r["check"] == "ports")
        assert (
            ports["status"] == "FAIL"
            and f"pid {holder.pid}" in ports["detail"]
            and "last-nights-run" in ports["detail"]
        )
        assert status(rs, "node1", "leftovers") == ["FAIL"] and status(
            rs, "node0", "leftovers"
        ) == ["PASS"]
        assert status(rs, "node0", "ifname") == ["FAIL"]
        assert "no interface matches 'nope0'" in next(
            r["detail"] for r in rs if r["check"] == "ifname"
        )
        assert status(rs, "node1", "torch") == ["FAIL"] and status(rs, "node0", "torch") == ["PASS"]
        assert "ModuleNotFoundError" in next(
            r["detail"] for r in rs if r["node"] == "node1" and r["check"] == "torch"
        )
        assert status(rs, "node0", "code") == ["FAIL"] and status(rs, "node1", "code") == ["FAIL"]
        assert status(rs, "node1", "git") == ["WARN"]
        text = cfg.mntui(path, "doctor", timeout=120).stdout
        assert (
            re.search(r"node0\s+ports\s+FAIL\s+port \d+ held by pid", text)
            and "-> mntui cleanup" in text
        )
    finally:
        holder.kill()
        leftover.kill()
        holder.wait()
        leftover.wait()


def test_master_addr_resolving_differently_and_unreachable_port(
    tmp_path_factory: pytest.TempPathFactory, cfg: Cfg
) -> None:
    """node2 resolves the main's name elsewhere (its own /etc/hosts); the tcp check and the
    all-reduce fail for a worker that cannot reach the master port, and nothing is left."""
    hosts = {
        "hnode0": "127.0.0.1 mnmaster",
        "hnode1": "127.0.0.1 mnmaster",
        "hnode2": "127.0.0.7 mnmaster",
    }
    with FakeCluster(
        tmp_path_factory.mktemp("hostsfake"), 3, prefix="hnode", node_hosts=hosts
    ) as hf:
        hcfg = Cfg(hf, cfg.tmp)
        path = hcfg.write(f"""
        job: dresolve
        nodes: [hnode0, hnode1, hnode2]
        master_addr: mnmaster
        master_port: {free_port()}
        command: sleep 1
        """)
        res = hcfg.mntui(path, "doctor", "--json", timeout=120)
        rs = rows(res)
        assert res.returncode == 2
        bad = next(r for r in rs if r["node"] == "hnode2" and r["check"] == "master_addr")
        assert (
            bad["status"] == "FAIL" and "127.0.0.7 here, but 127.0.0.1 on the main" in bad["detail"]
        )
        assert status(rs, "hnode1", "master_addr") == ["PASS"]
        assert status(rs, "hnode2", "tcp") == ["FAIL"] and status(rs, "hnode1", "tcp") == ["PASS"]

        # The smoke test with hnode2 unable to reach the master port: fails, leaves nothing.
        # The others wait at the rendezvous until the doctor gives up (its --timeout, plus
        # 15 s to collect), so that timeout is this test's length: 6 s still leaves the
        # main's torchrun ample time to bind the port (ready: about 1.5 s here, ssh and
        # tmux included), and proves the same.
        smoke = hcfg.write(
            f"""
        job: dsmoke
        nodes: [hnode0, hnode1, hnode2]
        master_addr: 127.0.0.1
        master_port: {free_port()}
        env: {{OMP_NUM_THREADS: "1"}}
        command: sleep 1
        overrides:
          hnode2: {{setup: "export MASTER_PORT={free_port()}"}}
        """,
            name="smoke.yaml",
        )
        res = hcfg.mntui(smoke, "doctor", "--allreduce", "--json", "--timeout", "6", timeout=180)
        rs = rows(res)
        assert res.returncode == 2
        assert status(rs, "hnode2", "allreduce") == ["FAIL"]
        cut = next(r for r in rs if r["node"] == "hnode2" and r["check"] == "allreduce")
        assert "gave no result within 6s" in cut["detail"], cut  # started, then cut off
        from mntui.sessions.doctor.smoke import smoke_job

        assert tagged_anywhere("dsmoke-smoke") == []
        assert tagged_anywhere(smoke_job("dsmoke")) == []
        assert not [s for n in hf.nodes for s in n.sessions()]
        hf.stop_jobs()


def test_ifname_value_reaches_no_shell(fake: FakeCluster, cfg: Cfg, tmp_path: Path) -> None:
    """A config value is data: the probe never runs what NCCL_SOCKET_IFNAME contains, and
    the ifname row names the value literally."""
    pwned = tmp_path / "pwned"
    ifname = f"ib0$(touch {pwned})"
    path = cfg.write(f"""
    job: dinject
    nodes: [node0, node1]
    master_port: {free_port()}
    env: {{NCCL_SOCKET_IFNAME: {json.dumps(ifname)}}}
    command: sleep 1
    """)
    rs = rows(cfg.mntui(path, "doctor", "--json", timeout=120))
    assert not pwned.exists(), "the probe ran a command substitution from the config"
    ifn = [r for r in rs if r["check"] == "ifname"]
    assert [r["node"] for r in ifn] == ["node0", "node1"]
    assert all(
        r["status"] == "FAIL" and f"no interface matches {ifname!r}" in r["detail"] for r in ifn
    ), ifn


def test_setup_noise_looking_like_probe_lines_is_ignored(fake: FakeCluster, cfg: Cfg) -> None:
    """`setup` prints whatever it likes before the probe's own lines: lines shaped like the
    probe's (or like a leftover process or a port holder) neither crash nor steer it."""
    port = free_port()
    noise = [
        "@DISK n/a",
        "@GIT x",
        "@PY {",
        "@TMUX missing",
        "@SESSION",
        "@RESOLVE 10.9.9.9",
        "PROC 1 S /sbin/init",
        f"LISTEN {port} 1 root /sbin/init",
    ]
    setup = "; ".join(f"echo {shlex.quote(x)}" for x in noise)
    path = cfg.write(f"""
    job: dnoise
    nodes: [node0, node1]
    master_port: {port}
    setup: {json.dumps(setup)}
    command: sleep 1
    """)
    res = cfg.mntui(path, "doctor", "--json", timeout=120)
    rs = rows(res)
    assert res.returncode in (0, 1), [r for r in rs if r["status"] == "FAIL"]
    for node in ("node0", "node1"):
        assert status(rs, node, "tmux") == ["PASS"]
        assert status(rs, node, "torch") == ["PASS"]
        assert status(rs, node, "leftovers") == ["PASS"]
        assert status(rs, node, "master_addr") == ["PASS"]
        assert status(rs, node, "git") == []
        workdir = next(r for r in rs if r["node"] == node and r["check"] == "workdir")
        assert workdir["status"] in ("PASS", "WARN") and "GiB free" in workdir["detail"]
    assert status(rs, "node0", "ports") == ["PASS"]


def venv_in(work: Path) -> Path:
    """A real venv in `work/.venv` (no pip), whose python finds this torch through a .pth
    file, with py-spy on its PATH: a job's environment as a user makes one."""
    venv = work / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = next(p for p in sys.path if p.endswith("site-packages"))
    (venv / "lib" / py / "site-packages" / "host.pth").write_text(site + "\n")
    (venv / "bin" / "py-spy").symlink_to(Path(sys.executable).parent / "py-spy")
    return venv


def test_setup_runs_in_the_workdir_and_doctor_shows_what_it_said(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path
) -> None:
    """`setup: [source .venv/bin/activate]` is relative to the workdir (docs/config.md: cd,
    then setup): node0's venv is found and is the job's environment. node1's workdir has
    none, and the doctor shows what `source` said, not only what python says after it."""
    work, bare = tmp_path / "proj", tmp_path / "bare"
    work.mkdir()
    bare.mkdir()
    venv = venv_in(work)
    path = cfg.write(f"""
    job: dvenv
    nodes: [node0, node1]
    master_port: {free_port()}
    setup: [source .venv/bin/activate]
    command: sleep 1
    overrides:
      node0: {{workdir: {json.dumps(str(work))}}}
      node1: {{workdir: {json.dumps(str(bare))}}}
    """)
    rs = rows(cfg.mntui(path, "doctor", "--json", timeout=120))
    row = {(r["node"], r["check"]): r for r in rs}
    assert row["node0", "setup"]["status"] == "PASS", row["node0", "setup"]
    assert row["node0", "setup"]["detail"] == "ran, nothing on stderr"
    assert row["node0", "stacks"]["detail"] == f"py-spy at {venv}/bin/py-spy"
    assert row["node0", "torch"]["status"] == "PASS"
    assert row["node0", "workdir"]["detail"].startswith(f"{work}, ")
    failed = row["node1", "setup"]
    assert failed["status"] == "FAIL" and failed["detail"].startswith("exited with 1: "), failed
    assert ".venv/bin/activate: No such file or directory" in failed["detail"]
    assert "workdir" in failed["fix"] and not failed["node_fault"]
    assert all(c.isprintable() for r in rs for c in r["detail"])


def test_config_mistakes_never_count_against_a_node(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path
) -> None:
    """A mistyped node (g376), a `setup` that fails and a busy port are the config's
    mistakes: the doctor fails them, the node history does not hold them against a node.
    A node that refuses connections is the node's own failure, and counts."""
    port = free_port()
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import socket, time; s = socket.socket(); "
         f"s.bind(('0.0.0.0', {port})); s.listen(); time.sleep(120)"]
    )  # fmt: skip
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(
        f"Host gone\n    HostName 127.0.0.1\n    Port {free_port()}\n"  # nothing listens there
        f"Host *\n    Include {fake.ssh_config}\n"
    )
    try:
        path = cfg.write(
            f"""
        job: dmistakes
        nodes: [node0, node1, g376, gone]
        master_port: {port}
        command: sleep 1
        overrides:
          node1: {{setup: "source {tmp_path}/no-such-venv/bin/activate"}}
        """,
            ssh=f"ssh: {{config: {ssh_config}, connect_timeout: 5}}",
        )
        rs = rows(cfg.mntui(path, "doctor", "--json", timeout=120))
    finally:
        holder.kill()
        holder.wait()
    failed = {(r["node"], r["check"]): r for r in rs if r["status"] == "FAIL"}
    assert {("node0", "ports"), ("node1", "setup"), ("g376", "ssh"), ("gone", "ssh")} <= set(
        failed
    ), rs
    assert [k for k, r in failed.items() if r["node_fault"]] == [("gone", "ssh")], failed
    res = cfg.mntui(path, "nodes", "--history", "--json")
    assert res.returncode == 0, res.stderr
    doctor = {h["node"]: [d["check"] for d in h["doctor"]] for h in json.loads(res.stdout)["nodes"]}
    assert doctor == {"gone": ["ssh"]}, doctor
