"""Fake nodes for tests and benchmarks: real sshd processes on 127.0.0.1.

Each node has its own sshd (own port, own host key) and, through sshd's `SetEnv
TMUX_TMPDIR`, its own tmux server, so N nodes on one machine behave like N hosts to
mntui. Every process started on a node carries `MNTUI_FAKE_NODE=<cluster>/<node>`
in its environment, which is how teardown finds them: by tag, never by name. With
`netns`, each node is a host of its own on the network too (tests/netns.py): its own
address and ports, and a link to another node that can be cut alone.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netns import Netns

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def wait_for(
    cond: Callable[[], object], timeout: float, interval: float = 0.05, what: str = "condition"
) -> object:
    """Poll `cond` until it returns something truthy; fail loudly at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range: a port the kernel hands out
    (bind to 0) is one every outgoing connection may take as its own local port, and
    the suite makes thousands (ssh to the fake nodes, sentinels to coordinators): a
    job binding it seconds later found it taken (a test's rank 0 failed to listen)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        port = random.randrange(max(1024, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # none free below the range: the kernel's choice
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


KILL_ROUNDS = 3  # sweeps after a kill for a child forked while its parent stopped
KILL_TIMEOUT = 10.0  # seconds a kill_as_host may keep finding new processes


def environ_of(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def pids_with_env(pattern: str) -> list[int]:
    """PIDs whose environment has an entry fully matching `pattern` (a regex)."""
    rx = re.compile(pattern.encode())
    out = []
    for entry in os.listdir("/proc"):
        if (
            entry.isdigit()
            and int(entry) != os.getpid()
            and any(rx.fullmatch(e) for e in environ_of(int(entry)))
        ):
            out.append(int(entry))
    return out


def proc_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def alive(pids: Iterable[int]) -> list[int]:
    return [p for p in pids if proc_state(p) not in (None, "Z", "X")]


def tagged(job: str, node: str | None = None) -> list[int]:
    """Live processes of any run of `job` on `node` (default: any node), found by the
    tag mntui puts in their environment, never by name."""
    return alive(
        pids_with_env(f"MNTUI_RUN={re.escape(job)}/[^/]+/{re.escape(node) if node else '[^/]+'}")
    )


def cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def process_tree(pid: int) -> list[int]:
    """`pid` and everything under it (an sshd: its connections' sshd and their shells), to
    stop a node whole. A process that exits meanwhile is skipped."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for f in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in f.read_text().split()]
            except OSError:
                continue
    return out


def kill_as_host(find: Callable[[], list[int]], keep: Collection[int] = ()) -> None:
    """What `find` lists (but `keep`) killed as with its host: all stopped first, swept
    again until a sweep finds none new, then SIGKILLed. Killed one by one, the watchers
    acted between two kills: the main's sentinel and coordinator start each other again
    (respawn.py) and the coordinator restarts a job whose rank died, so a "dead" main
    ran a new attempt (CI's failure of test_cluster_mainswap_review.py). A stopped
    process forks nothing and is not dead to its partner; a fork already under way at
    its stop may show its child only after the sweep, so the check after the kill
    goes round again. Whatever was stopped is killed, whatever happens."""
    deadline = time.monotonic() + KILL_TIMEOUT
    frozen: set[int] = set()

    def found() -> list[int]:
        return [p for p in alive(find()) if p not in frozen and p not in keep]

    try:
        for _ in range(KILL_ROUNDS):
            while new := found():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"processes kept appearing: {new[:10]}")
                for pid in new:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGSTOP)
                    frozen.add(pid)
            _kill_each(frozen)
            if not found():
                return
    finally:
        _kill_each(frozen)


def run_cgroups(home: Path) -> list[Path]:
    """The cgroups a node's runs made: each named in its run dir's `cgroup` file, a
    directory of launch.sh's own name (mntui-...), nothing else."""
    out = []
    for named in home.glob(".mntui/runs/*/*/*/cgroup"):
        with contextlib.suppress(OSError):
            path = Path(named.read_text().strip())
            if path.name.startswith("mntui-") and (path / "cgroup.procs").is_file():
                out.append(path)
    return out


def cgroup_pids(groups: Iterable[Path]) -> list[int]:
    out = []
    for group in groups:
        with contextlib.suppress(OSError):
            out += [int(w) for w in (group / "cgroup.procs").read_text().split()]
    return out


def remove_cgroups(groups: Iterable[Path]) -> None:
    """Those the runs of a node that was just swept made, once empty (a cgroup with a
    process in it cannot go)."""
    for group in groups:
        with contextlib.suppress(OSError):
            group.rmdir()


def _kill_each(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def stop_process(proc: subprocess.Popen[Any] | None, grace: float) -> None:
    """A daemon the tests started (sshd, a KDC, slurmctld): TERM, then KILL after `grace`
    seconds, and reaped either way."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def port_listening(port: int) -> bool:
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout
    return bool(out.strip())


@dataclass
class FakeNode:
    name: str
    port: int
    dir: Path
    tag: str
    proc: subprocess.Popen[bytes] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    addr: str = "127.0.0.1"  # where its sshd listens (its namespace's address: netns.py)

    @property
    def home(self) -> Path:
        return self.dir / "home"

    def run_dirs(self, job: str) -> list[Path]:
        """Oldest first. Run ids order by the second only (`20261122-105313-8e89`): two
        launches in one second are ordered by when their directory was made."""
        dirs = (self.home / ".mntui" / "runs" / job).glob(f"*/{self.name}")
        return sorted(dirs, key=lambda d: (d.parent.name[:15], d.parent.stat().st_ctime_ns))

    def log(self, job: str) -> str:
        dirs = self.run_dirs(job)
        try:
            return (dirs[-1] / "output.log").read_text(errors="replace") if dirs else ""
        except OSError:
            return ""

    @property
    def tmux_socket(self) -> Path:
        return self.dir / "tmux" / f"tmux-{os.getuid()}" / "default"

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-S", str(self.tmux_socket), *args], capture_output=True, text=True
        )

    def sessions(self) -> list[str]:
        res = self.tmux("list-sessions", "-F", "#{session_name}")
        return res.stdout.split() if res.returncode == 0 else []

    def pids(self) -> list[int]:
        """By the node's tag, and in its runs' cgroups: a job's process that wrote its
        title over its environment (setproctitle) carries no tag at all."""
        return sorted({*pids_with_env(f"MNTUI_FAKE_NODE={re.escape(self.tag)}"),
                       *cgroup_pids(self.run_cgroups())})  # fmt: skip

    def run_cgroups(self) -> list[Path]:
        """The cgroups this node's runs made (launch.sh names each in its run dir)."""
        return run_cgroups(self.home)

    def kill_all(self, keep: Collection[int] = ()) -> None:
        """Every process of the node but `keep` killed as with its host (kill_as_host)."""
        kill_as_host(self.pids, keep)
        remove_cgroups(self.run_cgroups())


class FakeCluster:
    """N sshd nodes named `prefix0..N-1`, and an ssh_config that reaches them."""

    def __init__(
        self,
        root: Path,
        n: int,
        prefix: str = "node",
        node_env: dict[str, dict[str, str]] | None = None,
        node_hosts: dict[str, str] | None = None,
        *,
        host_ca: bool = False,
        password_users: dict[str, str] | None = None,
        gssapi: dict[str, dict[str, str]] | None = None,
        netns: bool = False,
    ) -> None:
        """`node_hosts`: extra /etc/hosts lines for a node, seen by it alone (its sshd runs in
        a mount namespace of its own): a node whose resolver disagrees with the others.
        `host_ca`: every node also presents a host certificate signed by `root/host_ca`;
        `known_hosts_ca` trusts that CA alone (an `@cert-authority` line).
        `password_users`: node name -> local user (see `add_login_user`) that node accepts,
        by password or keyboard-interactive only.
        `gssapi`: node name -> its sshd's Kerberos environment (KRB5_CONFIG, KRB5_KTNAME:
        see tests/kdc.py); that node accepts gssapi-with-mic only, and its host block asks
        for it. `netns`: each node in a network namespace of its own (root only:
        netns.available())."""
        self.root = root
        self.gssapi = gssapi or {}
        self.node_hosts = node_hosts or {}
        self.password_users = password_users or {}
        self.host_ca = root / "host_ca" if host_ca else None
        self.known_hosts_ca = root / "known_hosts_ca"
        self.nodes: list[FakeNode] = []
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        self.key = root / "client_key"
        if not self.key.exists():
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)], check=True
            )
        (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
        self.known_hosts = root / "known_hosts"
        self.ssh_config = root / "ssh_config"
        self.user = (
            os.environ.get("USER")
            or subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
        )
        uid_tag = f"{root.name}-{os.getpid()}"
        self.net = Netns([f"{prefix}{i}" for i in range(n)]).up() if netns else None
        for i in range(n):
            name = f"{prefix}{i}"
            d = root / "nodes" / name
            (d / "tmux").mkdir(parents=True, exist_ok=True)
            os.chmod(d / "tmux", 0o700)
            home = d / "home"
            home.mkdir(exist_ok=True)
            # Like a node with conda/pyenv init: the login shell prints before our output.
            (home / ".bashrc").write_text(
                'echo "Welcome to $MNTUI_FAKE_NODE (noise from .bashrc)"\n'
                'echo "conda: base environment activated" >&2\n'
            )
            self.nodes.append(
                FakeNode(
                    name,
                    free_port(),
                    d,
                    f"{uid_tag}/{name}",
                    extra_env=(node_env or {}).get(name, {}),
                    addr=self.net.addrs[name] if self.net is not None else "127.0.0.1",
                )
            )
        self._write_configs()

    # -- configs --------------------------------------------------------------------
    def _write_configs(self) -> None:
        path = os.pathsep.join(
            [
                str(Path(sys.executable).parent),
                "/usr/local/sbin",
                "/usr/local/bin",
                "/usr/sbin",
                "/usr/bin",
                "/sbin",
                "/bin",
            ]
        )
        known = []
        for node in self.nodes:
            hostkey = node.dir / "ssh_host_ed25519_key"
            if not hostkey.exists():
                subprocess.run(
                    ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey)], check=True
                )
            cert = self._certify(node, hostkey)
            env = {
                "TMUX_TMPDIR": str(node.dir / "tmux"),
                "PATH": path,
                "HOME": str(node.home),
                "MNTUI_FAKE_NODE": node.tag,
                **node.extra_env,
            }
            setenv = " ".join(f'"{k}={v}"' for k, v in env.items())
            (node.dir / "sshd_config").write_text(f"""\
Port {node.port}
ListenAddress {node.addr}
HostKey {hostkey}
{cert}PidFile none
UsePAM no
PermitRootLogin prohibit-password
{self._auth_lines(node)}AuthorizedKeysFile {self.root / "authorized_keys"}
StrictModes no
X11Forwarding no
PrintMotd no
PrintLastLog no
LogLevel ERROR
MaxSessions 64
MaxStartups 100:30:200
Subsystem sftp internal-sftp
SetEnv {setenv}
""")
            pub = (node.dir / "ssh_host_ed25519_key.pub").read_text().split()
            known.append(f"[{node.addr}]:{node.port} {pub[0]} {pub[1]}")
        self.known_hosts.write_text("\n".join(known) + "\n")
        if self.host_ca is not None:
            ca = (self.root / "host_ca.pub").read_text().split()
            self.known_hosts_ca.write_text(f"@cert-authority [127.0.0.1]:* {ca[0]} {ca[1]}\n")
        # The per-host blocks sit in an Included file: fabric alone would not see them.
        inc = self.root / "ssh_config.d"
        inc.mkdir(exist_ok=True)
        blocks = [
            f"""Host {n.name}
    HostName {n.addr}
    Port {n.port}
"""
            + (
                f"    User {self.password_users[n.name]}\n    BatchMode no\n"
                if n.name in self.password_users
                else ""
            )
            + (
                "    GSSAPIAuthentication yes\n    GSSAPIDelegateCredentials no\n"
                if n.name in self.gssapi
                else ""
            )
            for n in self.nodes
        ]
        (inc / "nodes.conf").write_text("\n".join(blocks))
        self.ssh_config.write_text(f"""Include {inc}/*.conf

Host *
    User {self.user}
    IdentityFile {self.key}
    IdentitiesOnly yes
    UserKnownHostsFile {self.known_hosts}
    StrictHostKeyChecking yes
    BatchMode yes
    LogLevel ERROR
""")

    def _certify(self, node: FakeNode, hostkey: Path) -> str:
        """Sign the node's host key with the cluster's host CA; the sshd_config line for it."""
        if self.host_ca is None:
            return ""
        if not self.host_ca.exists():
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.host_ca)],
                check=True,
            )
        cert = hostkey.parent / f"{hostkey.name}-cert.pub"
        if not cert.exists():
            subprocess.run(
                [
                    *("ssh-keygen", "-q", "-s", str(self.host_ca), "-h", "-I", node.name),
                    *("-n", f"127.0.0.1,{node.name}", f"{hostkey}.pub"),
                ],
                check=True,
                capture_output=True,
            )
        return f"HostCertificate {cert}\n"

    def _auth_lines(self, node: FakeNode) -> str:
        if node.name in self.gssapi:  # ssh asks for host/127.0.0.1, not host/$(hostname)
            return (
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                "PubkeyAuthentication no\nGSSAPIAuthentication yes\n"
                "GSSAPIStrictAcceptorCheck no\nAuthenticationMethods gssapi-with-mic\n"
            )
        if node.name in self.password_users:
            return (
                "PasswordAuthentication yes\nKbdInteractiveAuthentication yes\n"
                "PubkeyAuthentication no\n"
            )
        return (
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        )

    # -- lifecycle ------------------------------------------------------------------
    def start(self, timeout: float = 20) -> FakeCluster:
        Path("/run/sshd").mkdir(exist_ok=True) if os.geteuid() == 0 else None
        for node in self.nodes:
            if node.proc is None or node.proc.poll() is not None:
                log = open(node.dir / "sshd.log", "ab")  # noqa: SIM115 - sshd's, for its life
                argv = [SSHD, "-D", "-e", "-f", str(node.dir / "sshd_config")]
                if node.name in self.node_hosts:
                    hosts = node.dir / "hosts"
                    hosts.write_text(
                        Path("/etc/hosts").read_text() + self.node_hosts[node.name] + "\n"
                    )
                    argv = [
                        "unshare",
                        "-m",
                        "sh",
                        "-c",
                        'mount --bind "$0" /etc/hosts && exec "$@"',
                        str(hosts),
                        *argv,
                    ]
                env = {**os.environ, **self.gssapi[node.name]} if node.name in self.gssapi else None
                if self.net is not None:
                    argv = [*self.net.argv(node.name), *argv]
                node.proc = subprocess.Popen(
                    argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env
                )
        for node in self.nodes:
            port, addr = node.port, node.addr
            wait_for(
                lambda port=port, addr=addr: self._banner(addr, port),
                timeout,
                what=f"sshd of {node.name}",
            )
        return self

    @staticmethod
    def _banner(addr: str, port: int) -> bool:
        try:
            with socket.create_connection((addr, port), timeout=1) as s:
                return s.recv(4).startswith(b"SSH-")
        except OSError:
            return False

    def node(self, name: str) -> FakeNode:
        return next(n for n in self.nodes if n.name == name)

    def ssh(self, node: str, command: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ssh", "-F", str(self.ssh_config), node, command],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def pids(self) -> list[int]:
        """What any node of this cluster runs (its sshd's sessions' shells and below)."""
        tagged = pids_with_env(
            f"MNTUI_FAKE_NODE={re.escape(self.nodes[0].tag.rsplit('/', 1)[0])}/.*"
        )
        return sorted({*tagged, *cgroup_pids(g for n in self.nodes for g in n.run_cgroups())})

    def stop_jobs(self) -> None:
        """Kill what tests started on the nodes, their tmux servers included, all nodes
        at once: a watcher left on one node (a coordinator after a main swap) cannot
        relaunch onto a node already swept. The killed servers' sockets are the nodes'
        own files (TMUX_TMPDIR here, made by this class), removed so the next tmux starts
        clean."""
        kill_as_host(self.pids)
        for node in self.nodes:
            remove_cgroups(node.run_cgroups())
            node.tmux("kill-server")  # one a test started from here carries no node's tag
            node.tmux_socket.unlink(missing_ok=True)

    def stop(self) -> None:
        self.stop_jobs()
        for node in self.nodes:
            stop_process(node.proc, 5)
        # sshd children of a killed sshd serve open connections until they close
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.net is not None:
            self.net.down()

    def __enter__(self) -> FakeCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def add_login_user(password: str) -> str:
    """A throwaway local user that logs in with `password` (root only); remove it with
    `remove_login_user`. With `UsePAM no` sshd checks the shadow hash itself."""
    name = f"mntuipw{os.getpid() % 100000}"
    subprocess.run(["useradd", "-M", "-d", "/nonexistent", "-s", "/bin/sh", name], check=True)
    digest = subprocess.run(
        ["openssl", "passwd", "-6", "-stdin"],
        input=password,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    subprocess.run(["usermod", "-p", digest, name], check=True)
    return name


def remove_login_user(name: str) -> None:
    subprocess.run(["userdel", name], capture_output=True)
