"""A run the cluster watches shows each node's GPUs as its sentinel read them (issue 30:
the manager no longer polls N nodes).

Real parts: sshd fake nodes whose PATH holds an nvidia-smi replaying real recordings
(tests/data/nvidia-smi) behind a wrapper that notes who ran it, tmux, the sentinels and
the coordinator shipped and run on the nodes' bare `python3`, a light 2-node job.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from clusterwatch import a_rank, launched, nothing_left, run_dir, watchers
from fakecluster import FakeCluster, free_port, wait_for
from helpers import Cfg, steps_job

from mntui.sessions.errors import state_dir
from mntui.tui.cli.quickstatus import MEMO

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data"
SMI = DATA / "nvidia-smi"
APPS_HEADER = "pid, gpu_uuid, used_gpu_memory [MiB], process_name\n"


def wrapper(tmp: Path) -> Path:
    """An nvidia-smi that notes its parent's PID, then replays (tests/data/fakebin)."""
    bin_dir = tmp / "smibin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\necho "$PPID" >>"$FAKE_SMI_CALLERS"\n'
        f'exec {DATA / "fakebin" / "nvidia-smi"} "$@"\n'
    )
    smi.chmod(0o755)
    return bin_dir


def callers(tmp: Path, node: str) -> set[int]:
    path = tmp / f"callers-{node}"
    return {int(x) for x in path.read_text().split()} if path.exists() else set()


def test_status_shows_each_nodes_gpus_read_by_its_sentinel_not_by_a_poll(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    bin_dir = wrapper(tmp_path)
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    apps0 = tmp_path / "apps0.csv"
    apps0.write_text(APPS_HEADER)  # the job's rank is written in once it runs
    env = {
        "node0": {
            "PATH": path,
            "FAKE_SMI_CALLERS": str(tmp_path / "callers-node0"),
            "FAKE_NVIDIA_SMI_GPU": str(SMI / "h100x8.gpu.csv"),
            "FAKE_NVIDIA_SMI_APPS": str(apps0),
        },
        "node1": {
            "PATH": path,
            "FAKE_SMI_CALLERS": str(tmp_path / "callers-node1"),
            "FAKE_NVIDIA_SMI_GPU": str(SMI / "small6g.gpu.csv"),
            "FAKE_NVIDIA_SMI_APPS": str(SMI / "small6g.apps.csv"),
            "FAKE_NVIDIA_SMI_ERR": str(SMI / "fell-off-bus.txt"),
        },
    }
    job = "cw-gpus"
    with FakeCluster(tmp_path_factory.mktemp("gpucw"), 2, node_env=env) as fake:
        cfg = Cfg(fake, tmp_path)
        port, wport = free_port(), free_port()
        watch = f"watch: {{where: cluster, port: {wport}}}"
        conf = cfg.write(steps_job(job, port, extra=watch))
        try:
            launched(cfg, conf, job, fake)
            rank = a_rank(job, "node0")
            apps = f"{rank}, GPU-0, 1200 MiB, python3\n4000000, GPU-0, 10 MiB, /opt/other/app\n"
            apps0.write_text(APPS_HEADER + apps)
            board = run_dir(fake, job, "node0") / "coord" / "gpus.json"
            wait_for(
                lambda: board.exists() and f"{rank}, GPU-0" in board.read_text(),
                20,
                what="node0's sentinel sending its new reading to the coordinator",
            )
            quick = json.loads(cfg.mntui(conf, "status", "--json").stdout)
            table = cfg.mntui(conf, "status").stdout
            (state_dir() / MEMO).unlink()  # the ordinary path: the config, one connection
            ordinary = json.loads(cfg.mntui(conf, "status", "--json").stdout)
            sentinels = {n: set(watchers(job, "sentinel", n)) for n in ("node0", "node1")}
        finally:
            cfg.mntui(conf, "kill")
        nothing_left(fake, job, (port, wport))

    assert quick["via"] == ordinary["via"] == "coordinator"
    assert [n["gpu"] for n in quick["nodes"]] == [n["gpu"] for n in ordinary["nodes"]]
    g0, g1 = quick["nodes"][0]["gpu"], quick["nodes"][1]["gpu"]
    assert [g["index"] for g in g0["gpus"]] == list(range(8)) and g0["errors"] == []
    assert g0["gpus"][4]["mem_used"] == 21340 and g0["gpus"][1]["util"] == 98
    assert [(a["pid"], a["own"]) for a in g0["apps"]] == [(rank, True), (4000000, False)]
    assert g1["errors"] == [
        "Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error"
    ]
    assert [(a["pid"], a["own"]) for a in g1["apps"]] == [(1580, False), (1597, False)]
    assert re.search(r"node0 .* 8x 99% 387/637G 1 foreign", table), table
    assert re.search(r"node1 .* 1x 95% 1/6G \+ERR 2 foreign", table), table
    # every nvidia-smi on a node was its sentinel's: no poll from this machine ran one
    for node in ("node0", "node1"):
        assert callers(tmp_path, node) and callers(tmp_path, node) <= sentinels[node], node
