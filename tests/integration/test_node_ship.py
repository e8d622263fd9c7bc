"""The sentinel's bundle reaches real sshd nodes through the node shell every script
takes (stdin to `sh -s`, over both transports): shipped once, then present, private,
whole, and it runs there on the node's `python3 -I -S`."""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakecluster import FakeCluster

from mntui.sessions.config import NodeSpec, SshPolicy, SshTransport
from mntui.sessions.launch import sentinelship as ship
from mntui.sessions.launch.sentinelship import Bundle, ShipState
from mntui.sessions.ssh import Cluster

NODE_SRC = Path(__file__).resolve().parents[2] / "sessions" / "node"


@pytest.fixture
def bundle(tmp_path: Path, fake: FakeCluster) -> Iterator[Bundle]:
    """A bundle of its own (one module more), so that no other test has shipped it; its
    file goes from the nodes' homes afterwards."""
    src = tmp_path / "node"
    shutil.copytree(NODE_SRC, src, ignore=shutil.ignore_patterns("__pycache__"))
    (src / f"zz_{secrets.token_hex(4)}.py").write_text("from __future__ import annotations\n")
    b = ship.build(src)
    yield b
    for n in fake.nodes:
        (n.home / ship.remote_path(b.sha)).unlink(missing_ok=True)


def outputs(cluster: Cluster, names: list[str], script: str) -> dict[str, str]:
    res = cluster.run(dict.fromkeys(names, script), timeout=60)
    assert res.all_ok and all(r.ok for r in res.succeeded.values()), res
    return {n: r.stdout for n, r in res.succeeded.items()}


@pytest.mark.parametrize("transport", [SshTransport.PARAMIKO, SshTransport.OPENSSH])
def test_shipped_once_then_present_and_it_runs_there(
    fake: FakeCluster, bundle: Bundle, transport: SshTransport
) -> None:
    names = ["node0", "node1"]
    policy = SshPolicy(config=str(fake.ssh_config), connect_timeout=5, transport=transport)
    specs = [NodeSpec(n, n, i, "true", {}, (), None) for i, n in enumerate(names)]

    def states(script: str) -> dict[str, ShipState]:
        return {
            n: ship.parse_ship(out, bundle.sha).state
            for n, out in outputs(cluster, names, script).items()
        }

    with Cluster(specs, policy) as cluster:
        assert states(ship.presence_script(bundle)) == dict.fromkeys(names, ShipState.ABSENT)
        assert states(ship.ship_script(bundle)) == dict.fromkeys(names, ShipState.SHIPPED)
        assert states(ship.ship_script(bundle)) == dict.fromkeys(names, ShipState.PRESENT)
        assert states(ship.presence_script(bundle)) == dict.fromkeys(names, ShipState.PRESENT)
        for n in names:
            target = fake.node(n).home / ship.remote_path(bundle.sha)
            assert target.read_bytes() == bundle.data
            assert target.stat().st_mode & 0o777 == 0o600
            assert target.parent.stat().st_mode & 0o777 == 0o700
        run = f'python3 -I -S "$HOME/{ship.remote_path(bundle.sha)}"'
        for n, out in outputs(cluster, names, f"{run} selftest && {run} version").items():
            lines = out.splitlines()
            assert lines[0].startswith("SELFTEST ok 3."), (n, out)
            assert lines[1:] == [f"VERSION {bundle.sha}"], (n, out)
        versions = outputs(cluster, names, ship.python_check_script())
        assert all(ship.sentinel_usable(ship.parse_python(v)) for v in versions.values()), versions
