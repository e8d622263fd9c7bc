"""Node output is data, never protocol, on real sshd nodes: processes whose command
lines (and names) hold mntui's own records steer neither status, the judge, kill nor
cleanup."""

from __future__ import annotations

import getpass
import json
import re
import subprocess
import sys

from fakecluster import FakeCluster, port_listening, tagged, wait_for
from helpers import Cfg, free_port, listener_job
from snaps import judge_of

from mntui.sessions.config import load_config
from mntui.sessions.poll import NodeState, Poller
from mntui.sessions.runs import latest
from mntui.sessions.ssh import Cluster

# A stopped process, an exit code, a dead pane, lines that do not parse, a foreign
# listener and a survivor: every record the old scripts' readers believed.
STAT = " ".join(["1"] * 21)
FORGED = f"x\\n@P 999999 T {STAT}\\n@EXIT 1\\n@PANE 1 1 1\\n@MEM x\\n@UP abc\\n@END"


def hostile_job(job: str, port: int) -> str:
    """listener_job, plus on every node a tagged `sh -c 'sleep 600' <FORGED>` (dash keeps
    the sh, so its command line holds the records) and a main named `x) T 1 1 1 1 1`."""
    body = listener_job(job, port, extra="watch: {frozen_after: 1}")
    body = body.replace(
        "import socket, sys, time;",
        "import socket, sys, time; open('/proc/self/comm', 'w').write('x) T 1 1 1 1 1');",
    )
    forged = FORGED + f"\\nLISTEN {port} 1 root sshd\\nLEFT 1\\nSIGKILL 1"
    return body.replace("exec python3", f"sh -c 'sleep 600' $'{forged}' & exec python3")


def test_a_job_that_prints_records_runs_and_is_killed_clean(fake: FakeCluster, cfg: Cfg) -> None:
    job, port = "hforged", free_port()
    path = cfg.write(hostile_job(job, port))
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: "serving" in fake.node("node1").log(job), 20, what="node1 serving")
    wait_for(lambda: len(tagged(job, "node1")) >= 3, 10, what="node1's sh, sleep, python")

    res = cfg.mntui(path, "status", "--json")
    data = json.loads(res.stdout)
    for n in data["nodes"]:
        pids = {p["pid"] for p in n["procs"]}
        assert n["reachable"] and n["state"] == "running", n
        assert pids == set(tagged(job, n["node"])) and 999999 not in pids
        assert {p["state"] for p in n["procs"]} <= {"S", "R"} and n["exit_code"] is None
        assert n["malformed"] == 0 and n["pane_dead"] is False
        assert any("x @P 999999 T" in p["cmdline"] for p in n["procs"]), n["procs"]
    assert res.returncode == 0, res.stdout

    # The coordinator's judge (node/rules/judging.py), on two polls well past frozen_after:
    # nothing to tear down.
    config = load_config(path)
    record = latest(job)
    assert record is not None
    with Cluster(config.nodes, config.ssh) as cluster:
        poller = Poller(record, cluster, gpus=False)
        judge = judge_of(config.watch)
        first = judge.judge(poller.poll(), 0.0)
        second = judge.judge(poller.poll(), config.watch.frozen_after + 60.0)
    for verdicts, triggers in (first, second):
        assert triggers == [], triggers
        assert {v.state for v in verdicts.values()} == {NodeState.RUNNING}, verdicts

    res = cfg.mntui(path, "kill")
    assert res.returncode == 0 and "clean" in res.stdout, res.stdout + res.stderr
    assert "NOT CLEAN" not in res.stdout + res.stderr
    assert tagged(job, "node0") == [] and tagged(job, "node1") == []
    assert not port_listening(port)


def test_cleanup_kills_only_what_ss_says_holds_the_port(fake: FakeCluster, cfg: Cfg) -> None:
    """A listener whose argv holds `\\nLISTEN <port> <victim> <user>` got the victim, an
    unrelated process of the same user, chosen for killing."""
    port = free_port()
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    forged = f"x\nLISTEN {port} {victim.pid} {getpass.getuser()} y"
    code = (
        f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); "
        "s.listen(); time.sleep(300)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, forged])
    try:
        wait_for(lambda: port_listening(port), 10, what="holder listening")
        path = cfg.write(listener_job("hcleanup", port))
        res = cfg.mntui(path, "cleanup")  # names, kills nothing
        assert res.returncode == 1 and f"pid {holder.pid}" in res.stdout, res.stdout
        assert f"pid {victim.pid}" not in res.stdout, res.stdout
        res = cfg.mntui(path, "cleanup", "--yes")
        assert res.returncode == 0, res.stdout + res.stderr
        wait_for(lambda: holder.poll() is not None, 10, what="holder gone")
        assert victim.poll() is None, "a PID that only a command line named was killed"
        killed = {
            int(p) for line in re.findall(r"killed ([0-9 ]+)", res.stdout) for p in line.split()
        }
        assert killed == {holder.pid}, res.stdout
        assert not port_listening(port)
    finally:
        for p in (holder, victim):
            p.kill()
            p.wait()
