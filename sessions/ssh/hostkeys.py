"""known_hosts read and written the way OpenSSH does, for the paramiko transport.

paramiko's own loader raises on the first line it cannot parse (an `@cert-authority`
or `@revoked` marker, an `sk-` key), which made every node fail; it also knows no
markers, no `HostKeyAlias`, and appends without looking at the file's last byte. Here
each line is parsed on its own (a bad one is skipped and counted, never fatal), keys are
compared as raw blobs (so a key type paramiko cannot load still counts), and the
decision follows OpenSSH's order: revoked, known, changed, vouched for by a CA, new.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import secrets
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mntui.sessions.config import HostKeyPolicy, SshPolicy

if TYPE_CHECKING:
    from .sshresolve import SshSettings


class Marker(StrEnum):
    PLAIN = ""
    CERT_AUTHORITY = "@cert-authority"
    REVOKED = "@revoked"


class Verdict(StrEnum):
    KNOWN = "known"
    CHANGED = "changed"  # another key of the same type is known for the host
    REVOKED = "revoked"
    CA_ONLY = "ca-only"  # the host is known only through @cert-authority lines
    NEW = "new"


@dataclass(frozen=True)
class Entry:
    marker: Marker
    hosts: str  # the host field as written: patterns, or one hashed name
    keytype: str
    blob: bytes
    where: str  # file:line, for messages


@dataclass(frozen=True)
class KnownHosts:
    entries: tuple[Entry, ...]
    skipped: int  # lines that are neither blank, a comment nor a usable entry


class HostKeyRefused(Exception):
    """Raised from inside paramiko's connect; the message is meant for a person."""


def _blob_type(blob: bytes) -> str | None:
    if len(blob) < 4:
        return None
    (size,) = struct.unpack(">I", blob[:4])
    return blob[4 : 4 + size].decode("ascii", errors="replace") if 4 + size <= len(blob) else None


def parse_line(line: str, where: str) -> Entry | None:
    """One known_hosts line, or None when it is not a usable entry."""
    fields = line.split()
    marker = Marker.PLAIN
    if fields and fields[0].startswith("@"):
        if fields[0] not in (Marker.CERT_AUTHORITY, Marker.REVOKED):
            return None
        marker, fields = Marker(fields[0]), fields[1:]
    if len(fields) < 3:
        return None
    try:
        blob = base64.b64decode(fields[2], validate=True)
    except (binascii.Error, ValueError):
        return None
    if _blob_type(blob) != fields[1]:
        return None
    return Entry(marker, fields[0], fields[1], blob, where)


def parse(text: str, source: str) -> KnownHosts:
    entries, skipped = [], 0
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        entry = parse_line(line, f"{source}:{i}")
        if entry is None:
            skipped += 1
        else:
            entries.append(entry)
    return KnownHosts(tuple(entries), skipped)


def load(paths: Iterable[str]) -> KnownHosts:
    entries: list[Entry] = []
    skipped = 0
    for path in paths:
        try:
            text = Path(path).read_text(errors="replace")
        except OSError:
            continue  # a missing file is an empty one, as for ssh
        known = parse(text, path)
        entries += known.entries
        skipped += known.skipped
    return KnownHosts(tuple(entries), skipped)


def _glob(pattern: str, name: str) -> bool:
    """OpenSSH's match_pattern: `*` and `?` only; `[` is literal, as in `[host]:port`."""
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, name, re.DOTALL) is not None


def host_matches(hosts: str, name: str) -> bool:
    name = name.lower()
    if hosts.startswith("|1|"):
        parts = hosts.split("|")
        try:
            salt, digest = base64.b64decode(parts[2]), base64.b64decode(parts[3])
        except (binascii.Error, IndexError, ValueError):
            return False
        mac = hmac.new(salt, name.encode(), hashlib.sha1).digest()
        return hmac.compare_digest(mac, digest)
    matched = False
    for pattern in hosts.lower().split(","):
        negated = pattern.startswith("!")
        if _glob(pattern[1:] if negated else pattern, name):
            if negated:
                return False  # a negated match rules the whole line out
            matched = True
    return matched


def lookup_name(hostname: str, port: int, alias: str | None) -> str:
    """The name a host's keys are filed under: HostKeyAlias as is, else `[host]:port`."""
    if alias:
        return alias
    return hostname if port == 22 else f"[{hostname}]:{port}"


def judge(known: KnownHosts, name: str, keytype: str, blob: bytes) -> tuple[Verdict, Entry | None]:
    lines = [e for e in known.entries if host_matches(e.hosts, name)]
    for e in lines:
        if e.marker is Marker.REVOKED and e.blob == blob:
            return Verdict.REVOKED, e
    plain = [e for e in lines if e.marker is Marker.PLAIN and e.keytype == keytype]
    for e in plain:
        if e.blob == blob:
            return Verdict.KNOWN, e
    if plain:
        return Verdict.CHANGED, plain[0]
    ca = next((e for e in lines if e.marker is Marker.CERT_AUTHORITY), None)
    if ca is not None and not any(e.marker is Marker.PLAIN for e in lines):
        return Verdict.CA_ONLY, ca
    return Verdict.NEW, None


def hashed(name: str) -> str:
    salt = secrets.token_bytes(20)
    mac = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(mac).decode()}"


_APPEND_LOCK = threading.Lock()  # 64 nodes accepted at once append to one file


def append(path: str, name: str, keytype: str, blob: bytes, *, hash_name: bool) -> None:
    """Add a line without merging it into a last line that lacks its newline."""
    line = f"{hashed(name) if hash_name else name} {keytype} {base64.b64encode(blob).decode()}\n"
    with _APPEND_LOCK:
        Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = "\n" + line
            os.write(fd, line.encode())
        finally:
            os.close(fd)


@dataclass(frozen=True)
class Check:
    """How one connection checks host keys: what to read, what to file new keys as."""

    name: str  # lookup_name(...)
    where: str  # user@host:port, for messages
    files: tuple[str, ...]  # user files first, then global ones
    write_to: str | None  # first user file; None: `UserKnownHostsFile none`
    accept_new: bool
    hash_new: bool
    alias: str  # the node's ssh alias, for the hint


def check_for(s: SshSettings, policy: SshPolicy, where: str) -> Check:
    """mntui's `host_key` wins; else ssh_config's StrictHostKeyChecking (`no` is treated
    as accept-new: a changed key is still refused)."""
    accept = policy.host_key is HostKeyPolicy.ACCEPT_NEW or (
        policy.host_key is None
        and s.strict_host_key_checking in ("accept-new", "no", "off", "false")
    )
    return Check(
        name=lookup_name(s.hostname, s.port, s.host_key_alias),
        where=where,
        files=s.known_hosts + s.global_known_hosts,
        write_to=s.known_hosts[0] if s.known_hosts else None,
        accept_new=accept,
        hash_new=s.hash_known_hosts,
        alias=s.alias,
    )


class Policy:
    """paramiko's MissingHostKeyPolicy (duck-typed, so paramiko loads lazily)."""

    def __init__(self, check: Check, known: KnownHosts) -> None:
        self.check, self.known = check, known

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        c = self.check
        keytype, blob = key.get_name(), key.asbytes()
        verdict, entry = judge(self.known, c.name, keytype, blob)
        at = f" ({entry.where})" if entry is not None else ""
        if verdict is Verdict.REVOKED:
            raise HostKeyRefused(
                f"host key of {c.where} is marked @revoked{at}; refusing to connect"
            )
        if verdict is Verdict.CHANGED:
            raise HostKeyRefused(
                f"HOST KEY CHANGED for {c.where} (got {keytype}, known{at}); refusing to connect. "
                f"If the node was reinstalled, remove the old key with `ssh-keygen -R`"
            )
        if verdict is Verdict.CA_ONLY:
            raise HostKeyRefused(
                f"host key of {c.where} is vouched for only by an @cert-authority line{at}, "
                f"and the paramiko transport cannot check host certificates: "
                f"set `ssh: {{transport: openssh}}`"
            )
        if verdict is Verdict.NEW and not c.accept_new:
            raise HostKeyRefused(
                f"host key of {c.where} is not in known_hosts ({', '.join(c.files) or 'none'}); "
                f"connect once with `ssh {c.alias}` or set `ssh: {{host_key: accept-new}}`"
            )
        if verdict is Verdict.NEW and c.write_to is not None:
            append(c.write_to, c.name, keytype, blob, hash_name=c.hash_new)
        client.get_host_keys().add(hostname, keytype, key)


def install(client: Any, check: Check, paramiko_name: str) -> KnownHosts:
    """Give paramiko the host's plain, unrevoked keys (so it offers their types first and
    compares them itself) and our policy for everything else."""
    import paramiko

    known = load(check.files)
    mine = [e for e in known.entries if host_matches(e.hosts, check.name)]
    revoked = {e.blob for e in mine if e.marker is Marker.REVOKED}
    by_type: dict[str, set[bytes]] = {}
    for e in mine:
        if e.marker is Marker.PLAIN and e.blob not in revoked:
            by_type.setdefault(e.keytype, set()).add(e.blob)
    for keytype, blobs in by_type.items():
        if len(blobs) != 1:
            continue  # paramiko keeps one key a type: let the policy compare them all
        try:
            key = paramiko.PKey.from_type_string(keytype, next(iter(blobs)))
        except Exception:  # a type paramiko cannot load: the policy still compares blobs
            continue
        client.get_host_keys().add(paramiko_name, keytype, key)
    client.set_missing_host_key_policy(Policy(check, known))
    return known
