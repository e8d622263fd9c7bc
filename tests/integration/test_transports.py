"""`ssh.transport: openssh` beside paramiko, on real sshd nodes: host certificates,
@revoked keys, password-only nodes, and the lifecycle tests re-run over openssh."""

from __future__ import annotations

import inspect
import os
import re
import shlex
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import test_lifecycle as lifecycle
import test_monitoring as monitoring
from fakecluster import FakeCluster, add_login_user, remove_login_user, wait_for
from helpers import Cfg, free_port, step_count, terminal, torch_job

from mntui.sessions.config import NodeSpec, PasswordMode, SshPolicy, SshTransport
from mntui.sessions.errors import state_dir
from mntui.sessions.ssh import Cluster
from mntui.sessions.ssh.paramikonode import forget_password

TRANSPORTS = [SshTransport.PARAMIKO, SshTransport.OPENSSH]


class OpenSshCfg(Cfg):
    """Cfg whose job configs ask for the openssh transport."""

    def write(self, body: str, name: str = "job.yaml", ssh: str = "") -> Path:
        ssh = ssh or f"ssh: {{config: {self.fake.ssh_config}, connect_timeout: 5}}"
        return super().write(body, name, ssh.replace("ssh: {", "ssh: {transport: openssh, ", 1))


def sockets_left() -> list[Path]:
    cm = state_dir() / "cm"
    return [p for p in cm.iterdir() if stat.S_ISSOCK(p.lstat().st_mode)] if cm.is_dir() else []


# -- the existing lifecycle tests, over the openssh transport -------------------------

OVER_OPENSSH: list[Callable[..., None]] = [
    lifecycle.test_refuses_when_running_and_restart_replaces_the_run,
    lifecycle.test_host_keys_are_checked,
    lifecycle.test_unreachable_node_fails_fast_and_starts_nothing,
    lifecycle.test_kill_continues_past_a_dead_node,
    lifecycle.test_launch_survives_interrupt_without_leftovers,
    lifecycle.test_attach_argv_and_a_real_attach,
    lifecycle.test_proxyjump_reaches_a_node_through_another,
    monitoring.test_status_logs_and_fetch,
    monitoring.test_logs_follow_prints_new_lines,
    monitoring.test_unreachable_node_does_not_delay_the_others,
    monitoring.test_the_cluster_tears_down_a_frozen_job,
]


@pytest.fixture(scope="module")
def ofake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeCluster]:
    """Nodes of their own: the re-run tests reuse job names the `fake` nodes have seen."""
    with FakeCluster(tmp_path_factory.mktemp("ofake"), 3) as cluster:
        yield cluster


@pytest.mark.parametrize("test", OVER_OPENSSH, ids=lambda t: t.__name__.removeprefix("test_"))
def test_lifecycle_over_openssh(
    test: Callable[..., None], ofake: FakeCluster, tmp_path: Path
) -> None:
    given = {"fake": ofake, "cfg": OpenSshCfg(ofake, tmp_path), "tmp_path": tmp_path}
    try:
        test(**{name: given[name] for name in inspect.signature(test).parameters})
    finally:
        ofake.stop_jobs()
    assert (state_dir() / "cm").is_dir(), "the openssh transport was not used"
    wait_for(lambda: not sockets_left(), 20, what="every ControlMaster closed")


# -- host certificates ----------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeCluster]:
    cluster = FakeCluster(tmp_path_factory.mktemp("certs"), 2, prefix="cnode", host_ca=True)
    with cluster:
        yield cluster


@pytest.fixture
def ca_only(certs: FakeCluster, tmp_path: Path) -> Iterator[Path]:
    """An ssh_config whose known_hosts trusts the host CA and holds no host key."""
    conf = tmp_path / "ca_config"
    conf.write_text(
        f"Host *\n    UserKnownHostsFile {certs.known_hosts_ca}\nInclude {certs.ssh_config}\n"
    )
    yield conf
    certs.stop_jobs()


def test_host_certificates_openssh_runs_a_torch_job(
    certs: FakeCluster, ca_only: Path, tmp_path: Path
) -> None:
    job, port = "tcerts", free_port()
    ccfg = Cfg(certs, tmp_path)
    work = ccfg.workdir_with_train()
    ssh = f"ssh: {{config: {ca_only}, connect_timeout: 5, transport: openssh}}"
    path = ccfg.write(torch_job(job, work, port, nodes="[cnode0, cnode1]"), ssh=ssh)
    res = ccfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(
        lambda: all(step_count(certs.node(n).log(job)) >= 2 for n in ("cnode0", "cnode1")),
        90,
        what="both certificate nodes training",
    )
    status = ccfg.mntui(path, "status")
    assert re.search(r"cnode1\s+1\s+running", status.stdout), status.stdout
    assert ccfg.mntui(path, "kill").returncode == 0
    assert not [s for n in certs.nodes for s in n.sessions() if s.startswith(job)]


def test_host_certificates_paramiko_names_the_openssh_transport(
    certs: FakeCluster, ca_only: Path, tmp_path: Path
) -> None:
    ccfg = Cfg(certs, tmp_path)
    path = ccfg.write(
        "job: tcertp\nnodes: [cnode0, cnode1]\ncommand: sleep 300\n",
        ssh=f"ssh: {{config: {ca_only}, connect_timeout: 5}}",
    )
    res = ccfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 1
    for node in ("cnode0", "cnode1"):
        line = next(ln for ln in res.stderr.splitlines() if ln.strip().startswith(f"{node}:"))
        assert "@cert-authority" in line and "transport: openssh" in line, res.stderr
    assert not certs.node("cnode0").run_dirs("tcertp")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_revoked_host_key_is_refused(
    certs: FakeCluster, tmp_path: Path, transport: SshTransport
) -> None:
    """Pinned and revoked at once: revoked wins, with a certificate CA in the file too."""
    node = certs.node("cnode0")
    key = " ".join((node.dir / "ssh_host_ed25519_key.pub").read_text().split()[:2])
    known = tmp_path / "known_hosts"
    known.write_text(
        certs.known_hosts_ca.read_text() + f"[127.0.0.1]:{node.port} {key}\n@revoked * {key}\n"
    )
    conf = tmp_path / "ssh_config"
    conf.write_text(f"Host *\n    UserKnownHostsFile {known}\nInclude {certs.ssh_config}\n")
    policy = SshPolicy(config=str(conf), connect_timeout=5, transport=transport)
    with Cluster([spec("cnode0")], policy) as cluster:
        res = cluster.connect()
    assert "revoked" in (res["cnode0"].error or "").lower(), res


def spec(name: str) -> NodeSpec:
    return NodeSpec(name, name, 0, "true", {}, (), None)


# -- a node that takes passwords only -------------------------------------------------

PASSWORD = "correct horse ' battery $(x)"


@pytest.fixture(scope="module")
def pwnodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeCluster, str]]:
    if os.geteuid() != 0:
        pytest.skip("creating a login user needs root")
    user = add_login_user(PASSWORD)
    try:
        users = {"pnode0": user, "pnode1": user}
        with FakeCluster(
            tmp_path_factory.mktemp("pw"), 2, prefix="pnode", password_users=users
        ) as cluster:
            yield cluster, user
    finally:
        remove_login_user(user)


@pytest.fixture
def no_password() -> Iterator[None]:
    forget_password()
    yield
    forget_password()


def test_password_prompt_paramiko_asks_once_for_every_node(
    pwnodes: tuple[FakeCluster, str], no_password: None
) -> None:
    cluster_, user = pwnodes
    asked: list[str] = []

    def prompt(question: str) -> str:
        asked.append(question)
        return PASSWORD

    policy = SshPolicy(
        config=str(cluster_.ssh_config), connect_timeout=5, password=PasswordMode.PROMPT
    )
    with Cluster([spec("pnode0"), spec("pnode1")], policy, prompt=prompt) as cluster:
        assert cluster.connect().all_ok
        res = cluster.run({"pnode0": "id -un", "pnode1": "id -un"})
    assert [r.value.stdout.strip() for r in res.values() if r.value] == [user, user]
    assert len(asked) == 1 and PASSWORD not in asked[0]
    state = Path(os.environ["XDG_STATE_HOME"])
    for path in [*state.rglob("*"), *cluster_.root.rglob("*")]:
        if path.is_file() and not path.is_symlink():
            assert PASSWORD.encode() not in path.read_bytes(), f"the password is in {path}"


def test_password_node_without_a_password_fails_clearly_on_both(
    pwnodes: tuple[FakeCluster, str], no_password: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No terminal, no askpass: a clear error naming the methods offered, never a hang."""
    cluster_, _ = pwnodes
    monkeypatch.delenv("SSH_ASKPASS", raising=False)
    for transport in TRANSPORTS:
        policy = SshPolicy(config=str(cluster_.ssh_config), connect_timeout=5, transport=transport)
        with Cluster([spec("pnode0")], policy) as cluster:
            error = cluster.connect()["pnode0"].error or ""
        assert "server offers: password,keyboard-interactive" in error, (transport, error)
    policy = SshPolicy(
        config=str(cluster_.ssh_config), connect_timeout=5, password=PasswordMode.PROMPT
    )
    with Cluster([spec("pnode0")], policy) as cluster:  # `prompt` but nobody to ask
        assert "no terminal" in (cluster.connect()["pnode0"].error or "")


def test_password_node_openssh_through_askpass(
    pwnodes: tuple[FakeCluster, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster_, user = pwnodes
    askpass = tmp_path / "askpass"
    secret = tmp_path / "secret"
    secret.write_text(PASSWORD + "\n")
    askpass.write_text(f"#!/bin/sh\nexec cat {secret}\n")
    askpass.chmod(0o700)
    monkeypatch.setenv("SSH_ASKPASS", str(askpass))
    monkeypatch.setenv("SSH_ASKPASS_REQUIRE", "force")
    policy = SshPolicy(
        config=str(cluster_.ssh_config), connect_timeout=5, transport=SshTransport.OPENSSH
    )
    with Cluster([spec("pnode0"), spec("pnode1")], policy) as cluster:
        assert cluster.connect().all_ok
        res = cluster.run({"pnode0": "id -un", "pnode1": "id -un"})
        assert [r.value.stdout.strip() for r in res.values() if r.value] == [user, user]


def test_openssh_asks_a_person_in_a_terminal_one_node_at_a_time(
    pwnodes: tuple[FakeCluster, str], tmp_path: Path
) -> None:
    """A real terminal (a pane of a private tmux server): ssh's own password prompt, once
    per node and never two at once; the answer reaches ssh, not mntui."""
    cluster_, _ = pwnodes
    path = OpenSshCfg(cluster_, tmp_path).write("job: tterm\nnodes: [pnode0, pnode1]\ncommand: x\n")
    with terminal(tmp_path / "term.sock") as server:
        cmd = shlex.join([sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "doctor"])
        session = server.new_session(
            "term", window_command=f"env -u SSH_ASKPASS {cmd}; sleep 120", x=200, y=60
        )
        pane = session.active_pane
        assert pane is not None

        def screen() -> str:
            return "\n".join(pane.capture_pane())

        for n in (1, 2):
            wait_for(lambda n=n: screen().count("password:") >= n, 30, what=f"password prompt {n}")
            assert screen().count("password:") == n, "two prompts at once"
            pane.cmd("send-keys", "-l", PASSWORD)
            pane.cmd("send-keys", "Enter")
        wait_for(lambda: screen().count("connected over openssh") == 2, 90, what="doctor rows")


def test_doctor_names_the_transport_and_the_offered_methods(
    pwnodes: tuple[FakeCluster, str], fake: FakeCluster, tmp_path: Path
) -> None:
    both = tmp_path / "both_config"
    known = f"{pwnodes[0].known_hosts} {fake.known_hosts}"
    both.write_text(
        f"Host *\n    UserKnownHostsFile {known}\n"
        f"Include {pwnodes[0].ssh_config}\nInclude {fake.ssh_config}\n"
    )
    ocfg = OpenSshCfg(fake, tmp_path)
    path = ocfg.write(
        "job: tdoctor\nnodes: [node0, pnode0]\ncommand: sleep 1\n",
        ssh=f"ssh: {{config: {both}, connect_timeout: 5}}",
    )
    res = ocfg.mntui(path, "doctor", env={**os.environ, "SSH_ASKPASS": ""})
    out = res.stdout + res.stderr
    assert re.search(r"node0\s.*ssh\s.*connected over openssh", out), out
    assert re.search(r"pnode0\s.*over openssh: .*server offers: password", out), out
