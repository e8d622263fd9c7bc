"""`mntui init` on the fake nodes: the file it writes launches a real 2-node torchrun job
as it stands, which `status` sees training and `kill` ends."""

from __future__ import annotations

import subprocess
import sys

from fakecluster import FakeCluster, free_port, tagged, wait_for
from helpers import Cfg, step_count


def test_init_writes_a_config_that_launches(fake: FakeCluster, cfg: Cfg) -> None:
    work = cfg.workdir_with_train()
    path = cfg.tmp / "mntui.yaml"
    res = subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", "init", "node0", "node1", "-c", str(path),
         "--job", "tinit", "--ssh-config", str(fake.ssh_config), "--workdir", str(work),
         "--port", str(free_port()), "--", "train.py", "--interval", "0.3", "--timeout", "600"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("reachable: SSH-2.0-") == 2 and "warning" not in res.stdout
    launched = cfg.mntui(path, "launch", "--no-ui")
    assert launched.returncode == 0, launched.stdout + launched.stderr
    wait_for(
        lambda: all(step_count(fake.node(n).log("tinit")) >= 2 for n in ("node0", "node1")),
        90,
        what="both nodes training",
    )
    status = cfg.mntui(path, "status")
    assert status.returncode == 0 and "progress: " in status.stdout, status.stdout
    assert cfg.mntui(path, "kill").returncode == 0
    assert not tagged("tinit")
