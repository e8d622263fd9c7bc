"""Kerberos logins, for real: a private MIT KDC (tests/kdc.py) and fake nodes whose sshd
accepts gssapi-with-mic only (no keys, no passwords). The openssh transport gets in
with the user's ticket and runs a job; without a ticket it fails at once, and so does
paramiko, which has no Kerberos."""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakecluster import FakeCluster, tagged
from helpers import Cfg, free_port, listener_job
from kdc import REALM, Kdc, kdc_fixture  # noqa: F401  (the `kdc` fixture)

NODES = "[knode0, knode1]"
OPENSSH = "transport: openssh, "
PASSWORD = secrets.token_urlsafe(12)  # the user's Kerberos password, this run only
# A login that should fail but got in would otherwise wait out the default ready_timeout.
SLEEPER = "job: {}\nnodes: {}\ncommand: sleep 300\nlaunch: {{ready_timeout: 5}}\n"


@pytest.fixture(scope="module")
def knodes(kdc: Kdc, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeCluster]:
    """Two nodes that take Kerberos only, and a ticket for the user they log in as: the
    one running the tests, as on the other fake nodes (a user of its own could not write
    a node's home below pytest's 0700 tmp). Both nodes are 127.0.0.1, the name ssh asks a
    ticket for (GSSAPITrustDNS is off): one host principal, one keytab."""
    root = tmp_path_factory.mktemp("kerberos")
    keytab = root / "nodes.keytab"
    kdc.add_host("127.0.0.1", keytab)
    env = kdc.acceptor_env(keytab)
    cluster = FakeCluster(root, 2, prefix="knode", gssapi={"knode0": env, "knode1": env})
    kdc.add_user(cluster.user, PASSWORD)
    kdc.kinit(cluster.user, PASSWORD)
    assert kdc.has_ticket()
    with cluster:
        yield cluster


def lines_of(stderr: str, node: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip().startswith(f"{node}:")]


def config(knodes: FakeCluster, tmp_path: Path, body: str, transport: str = OPENSSH) -> Path:
    ssh = f"ssh: {{{transport}config: {knodes.ssh_config}, connect_timeout: 5}}"
    return Cfg(knodes, tmp_path).write(body, ssh=ssh)


def test_openssh_with_a_ticket_runs_doctor_and_a_job(
    kdc: Kdc, knodes: FakeCluster, tmp_path: Path
) -> None:
    cfg = Cfg(knodes, tmp_path)
    port = free_port()
    path = config(knodes, tmp_path, listener_job("tkrb", port, nodes=NODES))
    try:
        res = cfg.mntui(path, "doctor", "--json", env=kdc.env())
        ssh = {r["node"]: r for r in json.loads(res.stdout) if r["check"] == "ssh"}
        assert [ssh[n]["status"] for n in ("knode0", "knode1")] == ["PASS", "PASS"], res.stdout
        assert "connected over openssh" in ssh["knode0"]["detail"], ssh
        res = cfg.mntui(path, "launch", "--no-ui", env=kdc.env())
        assert res.returncode == 0, res.stdout + res.stderr
        assert tagged("tkrb", "knode0") and tagged("tkrb", "knode1")
        assert knodes.node("knode1").run_dirs("tkrb"), "the run is not in the node's home"
        res = cfg.mntui(path, "status", env=kdc.env())
        assert re.search(r"knode1\s+1\s+running", res.stdout), res.stdout + res.stderr
        assert cfg.mntui(path, "kill", env=kdc.env()).returncode == 0
        assert tagged("tkrb") == [] and not [s for n in knodes.nodes for s in n.sessions()]
    finally:
        knodes.stop_jobs()
    log = (kdc.dir / "kdc.log").read_text()
    assert f"{knodes.user}@{REALM} for host/127.0.0.1@{REALM}" in log, "no service ticket asked"


def test_openssh_without_a_ticket_fails_at_once(
    kdc: Kdc, knodes: FakeCluster, tmp_path: Path
) -> None:
    """A ticket taken, then destroyed: BatchMode, so ssh says no at once, never asks;
    `launch` starts nothing and `doctor` fails the ssh check, one line a node."""
    ccache = tmp_path / "ccache"
    kdc.kinit(knodes.user, PASSWORD, ccache)
    assert kdc.has_ticket(ccache)
    kdc.kdestroy(ccache)
    assert not ccache.exists() and not kdc.has_ticket(ccache)
    path = config(knodes, tmp_path, SLEEPER.format("tnokrb", NODES))
    env = {**kdc.env(ccache), "SSH_ASKPASS": ""}
    t0 = time.monotonic()
    res = Cfg(knodes, tmp_path).mntui(path, "launch", "--no-ui", env=env, timeout=60)
    took = time.monotonic() - t0
    assert res.returncode == 1, res.stdout + res.stderr
    for node in ("knode0", "knode1"):
        lines = lines_of(res.stderr, node)
        assert len(lines) == 1, res.stderr
        assert "over openssh (server offers: gssapi-with-mic)" in lines[0], res.stderr
        assert "is your ticket valid? (`klist`; `kinit` renews it)" in lines[0], res.stderr
    assert "Traceback" not in res.stderr
    assert took < 20, f"no ticket took {took:.1f}s"
    assert not knodes.node("knode0").run_dirs("tnokrb") and tagged("tnokrb") == []
    res = Cfg(knodes, tmp_path).mntui(path, "doctor", env=env, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    for node in ("knode0", "knode1"):
        assert re.search(rf"(?m)^{node}\s+ssh\s+FAIL\s.*gssapi-with-mic", res.stdout), res.stdout


def test_paramiko_names_the_offered_method(kdc: Kdc, knodes: FakeCluster, tmp_path: Path) -> None:
    """paramiko has no Kerberos here: with a valid ticket it still cannot log in."""
    path = config(knodes, tmp_path, SLEEPER.format("tpkrb", "[knode0]"), transport="")
    assert kdc.has_ticket()
    res = Cfg(knodes, tmp_path).mntui(path, "launch", "--no-ui", env=kdc.env(), timeout=60)
    assert res.returncode == 1, res.stdout + res.stderr
    lines = lines_of(res.stderr, "knode0")
    assert len(lines) == 1, res.stderr
    assert "over paramiko (server offers: gssapi-with-mic)" in lines[0], res.stderr
    assert lines[0].endswith("a Kerberos login needs `ssh: {transport: openssh}`"), res.stderr
    assert "Traceback" not in res.stderr and not knodes.node("knode0").run_dirs("tpkrb")
