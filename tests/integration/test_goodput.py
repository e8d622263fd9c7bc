"""The goodput of an ordinary run on real sshd nodes with a real torchrun job: no
checkpoint_pattern, the default `step N` progress, no GPU (the fake nodes have no
nvidia-smi). While it steps `mntui status` counts its training, and once a user killed
it `mntui history` still does; neither prices the CPU job in GPUs."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from fakecluster import FakeCluster, tagged, wait_for
from helpers import REPO, Cfg, free_port, step_count, torch_job

from mntui.sessions.runs import latest

STEP_EVERY = 0.3  # torch_job's --interval
TRAINING = re.compile(r"training ([0-9.]+)s \(([0-9]+)% goodput\)")


def training_in(text: str) -> float | None:
    m = TRAINING.search(text)
    return float(m.group(1)) if m else None


def test_a_killed_cpu_run_counts_its_training_live_and_after_with_no_gpus(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "goodcpu"
    path = cfg.write(torch_job(job, cfg.workdir_with_train(), free_port(), extra=(
        "watch: {interval: 0.5}")))  # fmt: skip
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: step_count(fake.node("node0").log(job)) >= 5, 60, interval=0.3,
             what="the job steps")  # fmt: skip

    live: list[str] = []

    def counted() -> bool:
        live[:] = [cfg.mntui(path, "status").stdout]
        seconds = training_in(live[0])
        return seconds is not None and seconds >= 4.0

    try:
        wait_for(counted, 25, interval=0.5, what="the live status counts training")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; the last status said:\n{live[0]}") from None
    assert "GPU" not in live[0].split(f"{job} chain", 1)[1], live[0]

    assert cfg.mntui(path, "kill").returncode == 0
    wait_for(lambda: not tagged(job), 30, what="nothing left running")
    rec = latest(job)
    assert rec is not None and rec.status.value == "killed"
    wait_for(lambda: any(h["what"] == "steps" and h.get("last_step", 0) >= 10
                         for h in (latest(job) or rec).history), 10,
             what="the last steps note")  # fmt: skip
    res = cfg.mntui(path, "history", "--job", job, "--json")
    assert res.returncode == 0, res.stderr
    (ledger,) = json.loads(res.stdout)["chains"]
    note = next(h for h in reversed(latest(job).history) if h["what"] == "steps")  # type: ignore[union-attr]
    stepped = (note["last_step"] - note["first_step"]) * STEP_EVERY
    assert ledger["training"] >= stepped - 2.0, (ledger, note)
    assert ledger["training"] <= ledger["wall"]
    assert ledger["gpus"] == 0
    text = cfg.mntui(path, "history", "--job", job).stdout
    assert (training_in(text) or 0.0) > 0 and "CPU" in text and "GPUs" not in text, text
    print(f"\nPASTE mntui status (live):\n{live[0]}\nPASTE mntui history:\n{text}")


def test_gpus_are_counted_from_nvidia_smi_on_each_node(
    tmp_path_factory: pytest.TempPathFactory, cfg: Cfg
) -> None:
    """Nodes whose nvidia-smi replays real recordings: 4 processes on an 8x H100 node hold
    4 GPUs; on a node that lists 1 GPU (and one off the bus) they hold 1."""
    data = REPO / "tests" / "data"
    path = os.pathsep.join([str(data / "fakebin"), str(Path(sys.executable).parent), "/usr/bin",
                            "/bin", "/usr/sbin"])  # fmt: skip
    smi = data / "nvidia-smi"
    env = {
        "gpnode0": {"PATH": path, "FAKE_NVIDIA_SMI_GPU": str(smi / "h100x8.gpu.csv")},
        "gpnode1": {"PATH": path, "FAKE_NVIDIA_SMI_GPU": str(smi / "small6g.gpu.csv"),
                    "FAKE_NVIDIA_SMI_ERR": str(smi / "fell-off-bus.txt")},
    }  # fmt: skip
    job, port = "goodgpu", free_port()
    with FakeCluster(tmp_path_factory.mktemp("gpgood"), 2, prefix="gpnode", node_env=env) as g:
        gcfg = Cfg(g, cfg.tmp)
        yaml = gcfg.write(f"""
        job: {job}
        nodes: [gpnode0, gpnode1]
        nproc_per_node: 4
        master_port: {port}
        command: >-
          exec python3 -c "import socket, sys, time; s = socket.socket();
          s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);
          sys.argv[1] == '0' and (s.bind(('127.0.0.1', {port})), s.listen());
          [(print('step', i, 'loss 0.5', flush=True), time.sleep(0.2)) for i in range(900)]"
          {{node_rank}}
        launch: {{ready_timeout: 20}}
        watch: {{interval: 0.5}}
        kill: {{grace: 2}}
        """)
        try:
            assert gcfg.mntui(yaml, "launch", "--no-ui", watch=True).returncode == 0
            wait_for(lambda: " on 5 GPUs; " in gcfg.mntui(yaml, "status").stdout, 30,
                     interval=0.5, what="the live status names the GPUs")  # fmt: skip
            assert gcfg.mntui(yaml, "kill").returncode == 0
            res = gcfg.mntui(yaml, "history", "--job", job, "--json")
            (ledger,) = json.loads(res.stdout)["chains"]
            assert ledger["gpus"] == 5 and ledger["gpus_from"] == "nvidia-smi", ledger
        finally:
            gcfg.mntui(yaml, "kill")
            g.stop_jobs()
