"""known_hosts parsing, matching and appending; ssh_config tokens, checked against the
system `ssh` itself (its `-G` expands ControlPath with the same tokens)."""

from __future__ import annotations

import base64
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from mntui.sessions.ssh import hostkeys
from mntui.sessions.ssh.hostkeys import Marker, Verdict
from mntui.sessions.ssh.openssh import control_dir
from mntui.sessions.ssh.sshresolve import expand, resolve


def blob(keytype: str, body: bytes) -> bytes:
    name = keytype.encode()
    return struct.pack(">I", len(name)) + name + struct.pack(">I", len(body)) + body


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


ED = blob("ssh-ed25519", b"A" * 32)
ED2 = blob("ssh-ed25519", b"B" * 32)
SK = blob("sk-ssh-ed25519@openssh.com", b"C" * 32)
CA = blob("ssh-ed25519", b"D" * 32)


def test_every_line_stands_alone() -> None:
    text = "\n".join(
        [
            "# comment",
            "",
            f"@cert-authority *.example ssh-ed25519 {b64(CA)}",
            f"@revoked * ssh-ed25519 {b64(ED2)}",
            f"@bogus host ssh-ed25519 {b64(ED)}",  # unknown marker
            "host ssh-ed25519 not!base64",
            f"host ssh-rsa {b64(ED)}",  # type disagrees with the key
            "host ssh-ed25519",
            f"sk.example sk-ssh-ed25519@openssh.com {b64(SK)} a FIDO host key",
            f"[10.0.0.1]:2222,alias ssh-ed25519 {b64(ED)}",
        ]
    )
    known = hostkeys.parse(text, "kh")
    assert known.skipped == 4
    assert [e.marker for e in known.entries] == [
        Marker.CERT_AUTHORITY,
        Marker.REVOKED,
        Marker.PLAIN,
        Marker.PLAIN,
    ]
    assert known.entries[-1].where == "kh:10"


@pytest.mark.parametrize(
    ("hosts", "name", "expected"),
    [
        ("[10.0.0.1]:2222", "[10.0.0.1]:2222", True),
        ("[10.0.0.1]:2222", "10.0.0.1", False),
        ("[10.0.0.1]:*", "[10.0.0.1]:2222", True),  # `[` is literal, `*` a wildcard
        ("*.example,!bad.example", "good.example", True),
        ("*.example,!bad.example", "bad.example", False),
        ("g36?", "G369", True),  # names match case-insensitively
        ("g36?", "g3690", False),
    ],
)
def test_host_patterns(hosts: str, name: str, expected: bool) -> None:
    assert hostkeys.host_matches(hosts, name) is expected


def test_hashed_names_match_and_others_do_not() -> None:
    line = hostkeys.hashed("[127.0.0.1]:2222")
    assert line.startswith("|1|")
    assert hostkeys.host_matches(line, "[127.0.0.1]:2222")
    assert not hostkeys.host_matches(line, "[127.0.0.1]:2223")


def test_lookup_name_follows_host_key_alias() -> None:
    assert hostkeys.lookup_name("h", 22, None) == "h"
    assert hostkeys.lookup_name("h", 2222, None) == "[h]:2222"
    assert hostkeys.lookup_name("h", 2222, "myalias") == "myalias"


def test_judge_in_openssh_order() -> None:
    known = hostkeys.parse(
        "\n".join(
            [
                f"a ssh-ed25519 {b64(ED)}",
                f"@revoked a ssh-ed25519 {b64(ED)}",
                f"b ssh-ed25519 {b64(ED)}",
                f"@cert-authority c,b ssh-ed25519 {b64(CA)}",
                f"d ssh-ed25519 {b64(ED)}",
                f"d ssh-ed25519 {b64(ED2)}",
            ]
        ),
        "kh",
    )
    assert hostkeys.judge(known, "a", "ssh-ed25519", ED)[0] is Verdict.REVOKED
    assert hostkeys.judge(known, "b", "ssh-ed25519", ED)[0] is Verdict.KNOWN
    assert hostkeys.judge(known, "b", "ssh-ed25519", ED2)[0] is Verdict.CHANGED
    assert hostkeys.judge(known, "b", "ecdsa-sha2-nistp256", ED)[0] is Verdict.NEW
    assert hostkeys.judge(known, "c", "ssh-ed25519", ED)[0] is Verdict.CA_ONLY
    assert hostkeys.judge(known, "e", "ssh-ed25519", ED)[0] is Verdict.NEW
    assert hostkeys.judge(known, "d", "ssh-ed25519", ED2)[0] is Verdict.KNOWN  # any of two


def test_append_never_merges_lines(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "known_hosts"
    hostkeys.append(str(path), "first", "ssh-ed25519", ED, hash_name=False)
    assert path.read_text() == f"first ssh-ed25519 {b64(ED)}\n"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    path.write_text(path.read_text().rstrip("\n"))  # a file edited by hand
    hostkeys.append(str(path), "[h]:2222", "ssh-ed25519", ED2, hash_name=True)
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and lines[1].startswith("|1|")
    known = hostkeys.load([str(path)])
    assert known.skipped == 0
    assert hostkeys.judge(known, "[h]:2222", "ssh-ed25519", ED2)[0] is Verdict.KNOWN


def test_expand_is_one_pass() -> None:
    tokens = {"h": "10.1.2.3", "p": "2222", "r": "bob", "n": "foo"}
    assert expand("nc %h %p %%h %r %n | tee x", tokens, "%hnpr", "ProxyCommand") == (
        "nc 10.1.2.3 2222 %h bob foo | tee x"
    )
    with pytest.raises(ValueError, match="unknown token %d"):
        expand("%d", tokens, "%hnpr", "ProxyCommand")
    with pytest.raises(ValueError, match="unknown token %"):
        expand("trailing %", tokens, "%hnpr", "ProxyCommand")
    os.environ["MNTUI_TEST_VAR"] = "v"
    try:
        assert expand("${MNTUI_TEST_VAR}/x", {}, "%", "IdentityFile") == "v/x"
        assert expand("${MNTUI_TEST_VAR}", {}, "%", "ProxyCommand", env=False) == (
            "${MNTUI_TEST_VAR}"
        )
    finally:
        del os.environ["MNTUI_TEST_VAR"]


def ssh_g(conf: Path, *opts: str) -> dict[str, str]:
    out = subprocess.run(
        ["ssh", "-F", str(conf), *opts, "-G", "foo"], capture_output=True, text=True, check=True
    ).stdout
    return {k: v for k, _, v in (ln.partition(" ") for ln in out.splitlines())}


def test_tokens_as_ssh_expands_them(tmp_path: Path) -> None:
    """IdentityFile gets the value the system ssh gives the same tokens (in ControlPath)."""
    conf = tmp_path / "ssh_config"
    pattern = "%d/id_%u_%r_%h_%p_%n_%C_%i_%l_%L_%k_%%"
    conf.write_text(
        "Host foo\n    HostName 10.1.2.3\n    Port 2222\n    User bob\n"
        f"    IdentityFile {pattern}\n    IdentityFile ~/plain\n"
        f'    IdentityFile "{tmp_path}/with space/%n"\n'
        "    ProxyCommand nc %h %p %%h %r %n | tee x\n"
        "    HostKeyAlias myalias\n    HashKnownHosts yes\n"
        f"    UserKnownHostsFile {tmp_path}/kh_%n\n"
        "Host bar\n    UserKnownHostsFile none\n"
    )
    s = resolve("foo", str(conf))
    by_ssh = ssh_g(conf, "-o", f"ControlPath={pattern}")["controlpath"]
    assert s.identity_files[0] == by_ssh and "%" not in by_ssh.replace("_%", "")
    assert s.identity_files[1].endswith("/plain") and not s.identity_files[1].startswith("~")
    assert s.identity_files[2] == f"{tmp_path}/with space/foo"
    assert s.proxy_command == "nc 10.1.2.3 2222 %h bob foo | tee x"
    assert s.known_hosts == (f"{tmp_path}/kh_foo",)
    assert resolve("bar", str(conf)).known_hosts == ()  # `none`: no file, not `./none`
    assert s.host_key_alias == "myalias" and s.hash_known_hosts


def test_proxy_command_quotes_what_reaches_the_shell(tmp_path: Path) -> None:
    """ssh itself would paste these raw into `$SHELL -c`; a value reaches a shell quoted."""
    conf = tmp_path / "ssh_config"
    conf.write_text(
        'Host foo\n    HostName "a;touch${IFS}x"\n    User "b$(x) y"\n'
        "    ProxyCommand nc %h %p %r\n"
    )
    s = resolve("foo", str(conf))
    assert s.proxy_command == "nc 'a;touch${ifs}x' 22 'b$(x) y'"


def test_control_sockets_live_in_a_short_private_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    short = Path(tempfile.mkdtemp(prefix="cm", dir="/tmp"))
    try:
        monkeypatch.setenv("XDG_STATE_HOME", str(short))
        d = control_dir()
        assert d == short / "mntui" / "cm" and oct(d.stat().st_mode & 0o777) == "0o700"
    finally:
        shutil.rmtree(short)
    deep = tmp_path / ("d" * 90)
    monkeypatch.setenv("XDG_STATE_HOME", str(deep))
    d = control_dir()  # a socket path there would pass the 104-byte limit
    assert not str(d).startswith(str(deep)) and len(str(d)) + 1 + 16 + 17 < 104
    assert d.stat().st_uid == os.getuid() and d.stat().st_mode & 0o077 == 0
