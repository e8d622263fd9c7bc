"""A real MIT Kerberos realm for tests: krb5kdc with its own database, stash, configs,
port and log in a temp dir, and ticket caches of its own.

Needs Debian's krb5-kdc, krb5-admin-server (kadmin.local) and krb5-user (kinit, klist,
kdestroy), which `.ci/setup --tests` installs: the fixture installs nothing and needs no root. The
system's /etc/krb5.conf is never read: every client, sshd and tool reaches this realm
through KRB5_CONFIG (`env`). The KDC is stopped by its PID, never by name.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakecluster import free_port, stop_process, wait_for

REALM = "MNTUI.TEST"
TOOLS = ("krb5kdc", "kdb5_util", "kadmin.local", "kinit", "klist", "kdestroy")
PACKAGES = "krb5-kdc krb5-admin-server krb5-user"


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]


def _tool(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_port_tcp_and_udp() -> int:
    """krb5kdc listens on both (an empty kdc_listen is a syntax error): a port free in both."""
    while True:
        port = free_port()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


class Kdc:
    def __init__(self, root: Path) -> None:
        self.dir = root
        self.port = _free_port_tcp_and_udp()
        self.conf = root / "krb5.conf"
        self.kdc_conf = root / "kdc.conf"
        self.ccache = root / "ccache"  # the default ticket cache of `env`
        self.proc: subprocess.Popen[bytes] | None = None

    def env(self, ccache: Path | None = None) -> dict[str, str]:
        """The environment now (a test's own state dir included), pointed at this realm
        and at `ccache` (default: the realm's own)."""
        return {
            **os.environ,
            "KRB5_CONFIG": str(self.conf),
            "KRB5_KDC_PROFILE": str(self.kdc_conf),
            "KRB5CCNAME": f"FILE:{ccache or self.ccache}",
        }

    def acceptor_env(self, keytab: Path) -> dict[str, str]:
        """What an sshd needs to accept this realm's tickets with `keytab`'s keys."""
        return {"KRB5_CONFIG": str(self.conf), "KRB5_KTNAME": f"FILE:{keytab}"}

    # -- configuration -----------------------------------------------------------------
    def _write_conf(self) -> None:
        """No DNS, no reverse lookups: ssh asks for host/127.0.0.1 as given. A private
        k5login directory keeps a real ~/.k5login out of sshd's principal-to-user check."""
        d, port = self.dir, self.port
        (d / "k5login").mkdir(mode=0o755)
        self.conf.write_text(f"""\
[libdefaults]
    default_realm = {REALM}
    dns_lookup_kdc = false
    dns_lookup_realm = false
    dns_canonicalize_hostname = false
    rdns = false
    udp_preference_limit = 1
    k5login_directory = {d}/k5login
[realms]
    {REALM} = {{
        kdc = 127.0.0.1:{port}
    }}
""")
        self.kdc_conf.write_text(f"""\
[kdcdefaults]
    kdc_listen = 127.0.0.1:{port}
    kdc_tcp_listen = 127.0.0.1:{port}
[realms]
    {REALM} = {{
        database_name = {d}/principal
        key_stash_file = {d}/stash
        acl_file = {d}/kadm5.acl
    }}
[logging]
    kdc = FILE:{d}/kdc.log
    default = FILE:{d}/krb5.log
""")

    # -- lifecycle ---------------------------------------------------------------------
    def start(self, timeout: float = 20) -> Kdc:
        self._write_conf()
        master = os.urandom(16).hex()  # the database's own key, needed by nothing else
        self._run("kdb5_util", "create", "-s", "-r", REALM, "-P", master)
        log = open(self.dir / "krb5kdc.out", "ab")  # noqa: SIM115 - the daemon's, for its life
        self.proc = subprocess.Popen(
            [_tool("krb5kdc"), "-n", "-r", REALM],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            env=self.env(),
        )
        wait_for(self._listening, timeout, what="krb5kdc")
        return self

    def _listening(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"krb5kdc exited: {(self.dir / 'krb5kdc.out').read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        stop_process(self.proc, 10)

    # -- principals and tickets --------------------------------------------------------
    def _run(
        self, tool: str, *args: str, stdin: str | None = None, ccache: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            [_tool(tool), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env(ccache),
            timeout=30,
        )
        if res.returncode != 0:
            raise RuntimeError(f"{tool} {args[:3]} failed ({res.returncode}): {res.stderr.strip()}")
        return res

    def kadmin(self, query: str) -> None:
        self._run("kadmin.local", "-r", REALM, "-q", query)

    def add_user(self, name: str, password: str) -> None:
        """`password` without spaces: kadmin splits its query on them."""
        self.kadmin(f"addprinc -pw {password} {name}")

    def add_host(self, host: str, keytab: Path) -> None:
        """host/<host> with a random key, exported into `keytab` (exporting again would
        change the key: one keytab a principal)."""
        self.kadmin(f"addprinc -randkey host/{host}")
        self.kadmin(f"ktadd -k {keytab} host/{host}")

    def kinit(self, name: str, password: str, ccache: Path | None = None) -> None:
        """A ticket for `name` in `ccache`, the password on stdin as a person would type it."""
        self._run("kinit", name, stdin=password + "\n", ccache=ccache)

    def has_ticket(self, ccache: Path | None = None) -> bool:
        return subprocess.run([_tool("klist"), "-s"], env=self.env(ccache)).returncode == 0

    def kdestroy(self, ccache: Path | None = None) -> None:
        self._run("kdestroy", ccache=ccache)


@pytest.fixture(scope="session", name="kdc")
def kdc_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kdc]:
    """The private realm; skipped (failed under CI) where its packages are missing.
    Import it as `kdc_fixture`; tests ask for `kdc`."""
    missing = missing_tools()
    if missing:
        why = f"private KDC: needs {', '.join(missing)} (apt-get install {PACKAGES}; .ci/setup --tests does)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    kdc = Kdc(tmp_path_factory.mktemp("kdc"))
    try:
        yield kdc.start()
    finally:
        kdc.stop()
