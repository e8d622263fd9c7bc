"""The paramiko transport reads and writes known_hosts, and ssh_config tokens, as OpenSSH
does: each edge case from issue 14 against a real sshd."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import pytest
from fakecluster import FakeCluster

from mntui.sessions.config import NodeSpec, SshPolicy
from mntui.sessions.ssh import Cluster


def connect(conf: Path, node: str = "node0", command: str = ":") -> tuple[str | None, str]:
    """(error, stdout of `command`) over the default (paramiko) transport."""
    policy = SshPolicy(config=str(conf), connect_timeout=5)
    with Cluster([NodeSpec(node, node, 0, "true", {}, (), None)], policy) as cluster:
        res = cluster.run({node: command})[node]
    return res.error, res.value.stdout if res.value is not None else ""


def host_key(fake: FakeCluster, node: str = "node0") -> str:
    return " ".join((fake.node(node).dir / "ssh_host_ed25519_key.pub").read_text().split()[:2])


def other_key(tmp_path: Path) -> str:
    path = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def ssh_config(tmp_path: Path, fake: FakeCluster, body: str) -> Path:
    conf = tmp_path / "ssh_config"
    conf.write_text(f"Host *\n{body}\nInclude {fake.ssh_config}\n")
    return conf


def test_markers_and_unparseable_lines_do_not_break_the_others(
    fake: FakeCluster, tmp_path: Path
) -> None:
    ca, sk_blob = other_key(tmp_path), b"\0\0\0\x1ask-ssh-ed25519@openssh.com" + b"\0" * 40
    known = tmp_path / "known_hosts"
    known.write_text(
        f"@cert-authority *.example {ca}\n"
        f"@revoked old.example {ca}\n"
        "this line is not a host key\n"
        f"fido.example sk-ssh-ed25519@openssh.com {base64.b64encode(sk_blob).decode()}\n"
        f"[127.0.0.1]:{fake.node('node0').port} {host_key(fake)}\n"
    )
    conf = ssh_config(tmp_path, fake, f"    UserKnownHostsFile {known}")
    assert connect(conf) == (None, "")


def test_known_hosts_none_with_no_checking_writes_no_file(
    fake: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    conf = ssh_config(tmp_path, fake, "    UserKnownHostsFile none\n    StrictHostKeyChecking no")
    assert connect(conf) == (None, "")
    assert not (tmp_path / "none").exists()


def test_host_key_alias_is_the_name_keys_are_filed_under(fake: FakeCluster, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    conf = ssh_config(tmp_path, fake, f"    HostKeyAlias myalias\n    UserKnownHostsFile {known}")
    known.write_text(f"myalias {host_key(fake)}\n")
    assert connect(conf) == (None, "")
    known.write_text(f"myalias {other_key(tmp_path)}\n")
    error, _ = connect(conf)
    assert error is not None and "HOST KEY CHANGED" in error
    known.write_text("")
    accept = ssh_config(
        tmp_path,
        fake,
        "    HostKeyAlias newalias\n    StrictHostKeyChecking accept-new\n"
        f"    UserKnownHostsFile {known}",
    )
    assert connect(accept) == (None, "")
    assert known.read_text() == f"newalias {host_key(fake)}\n"


def test_new_keys_are_hashed_when_ssh_config_says_so(fake: FakeCluster, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    body = f"    HashKnownHosts yes\n    UserKnownHostsFile {known}\n"
    accept = ssh_config(tmp_path, fake, body + "    StrictHostKeyChecking accept-new")
    assert connect(accept) == (None, "")
    (line,) = known.read_text().splitlines()
    assert line.startswith("|1|") and line.endswith(host_key(fake)) and "127.0.0.1" not in line
    strict = ssh_config(tmp_path, fake, body + "    StrictHostKeyChecking yes")
    assert connect(strict) == (None, "")  # pinned, as mntui reads it...
    res = subprocess.run(
        ["ssh", "-F", str(strict), "node0", "true"], capture_output=True, stdin=subprocess.DEVNULL
    )
    assert res.returncode == 0, res.stderr  # ...and as ssh reads it


def test_append_after_a_last_line_without_newline(fake: FakeCluster, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    other = f"g369 {other_key(tmp_path)}"
    known.write_text(other)  # no trailing newline, as an editor may leave it
    body = f"    UserKnownHostsFile {known}\n"
    accept = ssh_config(tmp_path, fake, body + "    StrictHostKeyChecking accept-new")
    assert connect(accept) == (None, "")
    assert known.read_text().splitlines() == [
        other,
        f"[127.0.0.1]:{fake.node('node0').port} {host_key(fake)}",
    ]
    strict = ssh_config(tmp_path, fake, body + "    StrictHostKeyChecking yes")
    assert connect(strict) == (None, "")  # pinned on the next run, not "new" forever


def test_tokens_in_identity_file_and_known_hosts_file(fake: FakeCluster, tmp_path: Path) -> None:
    """A config of its own: the fake cluster's IdentityFile must not stand in."""
    node = fake.node("node0")
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    key = keys / f"id_{fake.user}@127.0.0.1-{node.port}_node0%"
    shutil.copy(fake.key, key)
    key.chmod(0o600)
    shutil.copy(fake.known_hosts, tmp_path / "kh_node0")
    conf = tmp_path / "ssh_config"
    conf.write_text(
        f"Host node0\n    HostName 127.0.0.1\n    Port {node.port}\n    User {fake.user}\n"
        f"    IdentityFile {keys}/id_%r@%h-%p_%n%%\n    IdentitiesOnly yes\n"
        f"    UserKnownHostsFile {tmp_path}/kh_%n\n    StrictHostKeyChecking yes\n"
        "    BatchMode yes\n"
    )
    assert connect(conf, command="echo $MNTUI_FAKE_NODE") == (None, f"{node.tag}\n")


def test_proxy_command_runs_in_the_users_shell_with_all_tokens(
    fake: FakeCluster, tmp_path: Path
) -> None:
    """A pipeline needs a shell; `%%h` is a literal `%h`; %n and %r are expanded."""
    conf = tmp_path / "ssh_config"
    conf.write_text(
        f"Host behind\n    HostName 127.0.0.1\n    Port {fake.node('node1').port}\n"
        f"    ProxyCommand ssh -F {fake.ssh_config} -W %h:%p node0 | tee {tmp_path}/seen-%n-%r-%%h\n"
        f"\nHost *\nInclude {fake.ssh_config}\n"
    )
    error, out = connect(conf, "behind", "echo $MNTUI_FAKE_NODE")
    assert error is None and out == f"{fake.node('node1').tag}\n", error
    assert (tmp_path / f"seen-behind-{fake.user}-%h").exists()
