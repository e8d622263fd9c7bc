"""Monitoring on real sshd nodes: status, logs, the cluster's watch tearing a job down
(and `status` saying so once it looks)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import time
from pathlib import Path

from fakecluster import FakeCluster, cmdline, port_listening, tagged, wait_for
from helpers import (
    Cfg,
    free_port,
    freeze_a_worker,
    listener_job,
    on_cluster,
    step_count,
    torch_job,
)

from mntui.sessions.config import load_config
from mntui.sessions.poll import Poller
from mntui.sessions.runs import latest
from mntui.sessions.ssh import Cluster


def record_of(job: str):  # type: ignore[no-untyped-def]
    rec = latest(job)
    assert rec is not None
    return rec


def torn_down(cfg: Cfg, path: Path, job: str) -> dict[str, object]:
    """The teardown's note, once `status` (a look: watch/mirror.py) has synced it."""

    def synced() -> bool:
        cfg.mntui(path, "status")
        return record_of(job).status == "torn-down"

    wait_for(synced, 30, interval=0.5, what="the coordinator's teardown, synced")
    return next(h for h in record_of(job).history if h["what"] == "watchdog-teardown")


def test_the_cluster_tears_down_a_frozen_job(fake: FakeCluster, cfg: Cfg) -> None:
    job, port = "wfrozen", free_port()
    extra = on_cluster("watch: {frozen_after: 1}")
    path = cfg.write(torch_job(job, cfg.workdir_with_train(), port, extra=extra))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0 and "watched by the cluster" in res.stdout, res.stdout + res.stderr
    freeze_a_worker(fake, job, "train.py")
    frozen_at = time.time()
    wait_for(
        lambda: not tagged(job, "node0") and not tagged(job, "node1"), 30, what="whole job down"
    )
    down = time.time() - frozen_at
    note = torn_down(cfg, path, job)
    assert note["node"] == "node1" and note["state"] == "frozen", note
    assert not port_listening(port)
    assert not [s for n in fake.nodes for s in n.sessions() if s.startswith(job)]
    print(f"\nMEASURED freeze -> whole job down {down:.2f}s (frozen_after 1s)")


def test_the_cluster_tears_down_when_a_launcher_crashes(fake: FakeCluster, cfg: Cfg) -> None:
    job, port = "wcrash", free_port()
    path = cfg.write(torch_job(job, cfg.workdir_with_train(), port, extra=on_cluster()))
    assert cfg.mntui(path, "launch", "--no-ui", watch=True).returncode == 0
    wait_for(lambda: step_count(fake.node("node1").log(job)) >= 1, 60, what="node1 training")
    launcher = next(p for p in tagged(job, "node1") if "torch.distributed.run" in cmdline(p))
    os.kill(launcher, signal.SIGKILL)
    crashed_at = time.time()
    wait_for(
        lambda: not tagged(job, "node0") and not tagged(job, "node1"), 30, what="whole job down"
    )
    down = time.time() - crashed_at
    note = torn_down(cfg, path, job)
    assert note["node"] == "node1" and note["state"] in ("orphaned", "failed"), note
    print(f"\nMEASURED launcher crash -> whole job down {down:.2f}s ({note['state']})")


def test_status_logs_and_fetch(fake: FakeCluster, cfg: Cfg) -> None:
    job, port = "wstatus", free_port()
    body = listener_job(job, port, extra="watch: {stall_after: 2}").replace(
        "print('serving', flush=True); time.sleep(600)",
        "[print(f'line {{i}} ' + 'x' * 50, flush=True) for i in range(3000)]; "
        "print('serving', flush=True); time.sleep(600)",
    )
    path = cfg.write(body)
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    wait_for(lambda: "serving" in fake.node("node1").log(job), 20, what="output")

    res = cfg.mntui(path, "status", "--json")
    data = json.loads(res.stdout)
    assert data["job"] == job and [n["node"] for n in data["nodes"]] == ["node0", "node1"]
    n0 = data["nodes"][0]
    assert n0["reachable"] is True and n0["gpu"] is None and port in n0["ports"]
    assert {p["pid"] for p in n0["procs"]} == set(tagged(job, "node0"))
    assert n0["state"] in ("running", "stalled") and n0["log_size"] > 150_000
    assert isinstance(n0["rtt"], float) and n0["mem_total_mib"] > 0

    res = cfg.mntui(path, "status")
    assert re.search(r"node0\s+0\s+(running|stalled)\s+no GPU", res.stdout), res.stdout

    # Stalled after stall_after with no output; exit code 1 says so.
    wait_for(lambda: cfg.mntui(path, "status").returncode == 1, 15, interval=0.5, what="stalled")
    assert "stalled" in cfg.mntui(path, "status").stdout

    res = cfg.mntui(path, "logs", "-n", "2")
    assert res.stdout.splitlines()[:2] == ["[node0:0] line 2999 " + "x" * 50, "[node0:0] serving"]
    res = cfg.mntui(path, "logs", "node1")
    lines = res.stdout.splitlines()
    assert lines[0] == "node node1 rank 1 up" and lines[-1] == "serving" and len(lines) == 3002

    res = cfg.mntui(path, "logs", "--fetch")
    assert res.returncode == 0, res.stderr
    rec = record_of(job)
    for node in ("node0", "node1"):
        fetched = (rec.dir / "logs" / f"{node}.log").read_bytes()
        original = (fake.node(node).run_dirs(job)[-1] / "output.log").read_bytes()
        assert fetched == original and len(original) > 150_000
    assert cfg.mntui(path, "kill").returncode == 0


def test_logs_follow_prints_new_lines(fake: FakeCluster, cfg: Cfg) -> None:
    path = cfg.write("""
    job: wfollow
    nodes: [node0, node1]
    command: 'for i in $(seq 1 1000); do echo "tick $i on {node}"; sleep 0.2; done'
    launch: {ready: log, ready_pattern: tick}
    """)
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    import subprocess
    import sys

    wait_for(lambda: "tick 12 on node1" in fake.node("node1").log("wfollow"), 20, what="12 ticks")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "logs", "-f"],
        stdout=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    reader = threading.Thread(
        target=lambda: seen.extend(iter(proc.stdout.readline, "")), daemon=True
    )  # type: ignore[union-attr]
    reader.start()
    try:
        wait_for(
            lambda: any(re.match(r"\[node1:1\] tick (1[0-9]) on node1", ln) for ln in seen),
            20,
            what="followed output from node1",
        )
        assert any(ln.startswith("[node0:0] tick ") for ln in seen)
        # as `tail -f`: from the last lines, not the log's start (issue 38)
        assert not [ln for ln in seen if re.match(r"\[node\d:\d\] tick 1 ", ln)], seen[:5]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
    assert cfg.mntui(path, "kill").returncode == 0


def test_unreachable_node_does_not_delay_the_others(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path
) -> None:
    port = free_port()
    path = cfg.write(listener_job("wunreach", port))
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    # node1 now answers TCP but never speaks SSH: the worst case, a hung sshd.
    black = socket.socket()
    black.bind(("127.0.0.1", 0))
    black.listen(8)
    broken = tmp_path / "broken"
    broken.write_text(
        f"Host node1\n    Port {black.getsockname()[1]}\n\nHost *\nInclude {fake.ssh_config}\n"
    )
    from dataclasses import replace

    config = load_config(path)
    config = replace(config, ssh=replace(config.ssh, config=str(broken), connect_timeout=2))
    arrived: dict[str, float] = {}
    try:
        with Cluster(config.nodes, config.ssh) as cluster:
            poller = Poller(record_of("wunreach"), cluster)
            t0 = time.monotonic()
            snaps = poller.poll(on_node=lambda s: arrived.setdefault(s.node, time.monotonic() - t0))
        assert snaps["node0"].reachable and not snaps["node1"].reachable
        assert "timed out" in (snaps["node1"].error or "") or "cannot connect" in (
            snaps["node1"].error or ""
        )
        assert arrived["node0"] < 1.5 <= arrived["node1"], arrived
    finally:
        black.close()
    assert cfg.mntui(path, "kill").returncode == 0


def test_gpu_view_from_recorded_nvidia_smi(tmp_path_factory, cfg: Cfg) -> None:  # type: ignore[no-untyped-def]
    """Nodes whose nvidia-smi replays real recordings: 8x H100, and a GPU off the bus."""
    data = Path(__file__).resolve().parents[1] / "data"
    smi = data / "nvidia-smi"
    fakebin = str(data / "fakebin")
    import sys

    path = os.pathsep.join(
        [fakebin, str(Path(sys.executable).parent), "/usr/bin", "/bin", "/usr/sbin"]
    )
    gpu_env = {
        "gnode0": {"PATH": path, "FAKE_NVIDIA_SMI_GPU": str(smi / "h100x8.gpu.csv")},
        "gnode1": {
            "PATH": path,
            "FAKE_NVIDIA_SMI_GPU": str(smi / "small6g.gpu.csv"),
            "FAKE_NVIDIA_SMI_APPS": str(smi / "small6g.apps.csv"),
            "FAKE_NVIDIA_SMI_ERR": str(smi / "fell-off-bus.txt"),
        },
    }
    with FakeCluster(
        tmp_path_factory.mktemp("gpufake"), 2, prefix="gnode", node_env=gpu_env
    ) as gfake:
        gcfg = Cfg(gfake, cfg.tmp)
        path_ = gcfg.write(listener_job("wgpu", free_port(), nodes="[gnode0, gnode1]"))
        try:
            assert gcfg.mntui(path_, "launch", "--no-ui").returncode == 0
            data_ = json.loads(gcfg.mntui(path_, "status", "--json").stdout)
            g0, g1 = data_["nodes"][0]["gpu"], data_["nodes"][1]["gpu"]
            assert [g["index"] for g in g0["gpus"]] == list(range(8))
            assert g0["gpus"][4]["mem_used"] == 21340 and g0["gpus"][1]["util"] == 98
            assert g0["gpus"][0]["temperature"] is None and g0["errors"] == []
            assert g1["errors"] == [
                "Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error"
            ]
            assert [a["pid"] for a in g1["apps"]] == [1580, 1597] and not any(
                a["own"] for a in g1["apps"]
            )
            table = gcfg.mntui(path_, "status").stdout
            assert re.search(r"gnode0 .* 8x 99% 387/637G", table), table
            assert re.search(r"gnode1 .* 1x 95% 1/6G \+ERR 2 foreign", table), table
        finally:
            gcfg.mntui(path_, "kill")
            gfake.stop_jobs()
