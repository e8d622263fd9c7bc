"""Resolving a host the way the user's `ssh` does: OpenSSH's own `ssh -G`, for both transports.

Fabric's parser ignores `Include`, `Match` and more, and a tool that reaches another host
than the user's `ssh` is worse than none. `ssh -G` expands UserKnownHostsFile and
ControlPath but leaves IdentityFile and ProxyCommand to connect time, so those are
expanded here, one pass over ssh_config(5)'s tokens; the tokens only ssh can know (%C
hashes the local host name, and newer versions hash more) come from a ControlPath of ours
that it expands.
"""

from __future__ import annotations

import os
import pwd
import shlex
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from mntui.sessions.results import NodeError


def ssh_base_argv(ssh_config: str | None) -> list[str]:
    argv = ["ssh"]
    if ssh_config:
        argv += ["-F", os.path.expanduser(ssh_config)]
    return argv


@dataclass(frozen=True)
class SshSettings:
    alias: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]  # tokens expanded
    identities_only: bool
    proxy_jump: str | None
    proxy_command: str | None  # tokens expanded, for `$SHELL -c "exec ..."`
    strict_host_key_checking: str
    known_hosts: tuple[str, ...]  # `none` dropped: ssh reads and writes no file then
    global_known_hosts: tuple[str, ...]
    host_key_alias: str | None = None
    hash_known_hosts: bool = False


# `ssh -G` expands UserKnownHostsFile and ControlPath but not IdentityFile or
# ProxyCommand; the tokens only ssh can know (%C hashes the local host name, and
# newer versions hash more) come from expanding a ControlPath of our own.
_PROBE = "/%C/%l/%L/%i/%u"
IDENTITY_TOKENS = "%CdhikLlnpru"
PROXY_TOKENS = "%hnpr"


def expand(text: str, tokens: Mapping[str, str], allowed: str, what: str, env: bool = True) -> str:
    """ssh_config(5) TOKENS (and ${ENV} where `env`) in one pass, so `%%h` stays `%h`."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "%" and i + 1 < len(text) and text[i + 1] in allowed:
            out.append("%" if text[i + 1] == "%" else tokens[text[i + 1]])
            i += 2
        elif c == "%":
            raise ValueError(f"{what}: unknown token %{text[i + 1 : i + 2]} in {text!r}")
        elif env and text.startswith("${", i) and "}" in text[i:]:
            name = text[i + 2 : text.index("}", i)]
            if name not in os.environ:
                raise ValueError(f"{what}: environment variable ${{{name}}} is not set")
            out.append(os.environ[name])
            i += len(name) + 3
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _tilde(path: str) -> str:
    """ssh's tilde_expand_filename: the password database's home, not $HOME."""
    if not path.startswith("~"):
        return path
    user, _, rest = path[1:].partition("/")
    try:
        home = (pwd.getpwnam(user) if user else pwd.getpwuid(os.getuid())).pw_dir
    except KeyError:
        return path
    return f"{home}/{rest}" if rest else home


def resolve(alias: str, ssh_config: str | None, *, port: int | None = None) -> SshSettings:
    argv = ssh_base_argv(ssh_config) + (["-p", str(port)] if port else [])
    argv += ["-o", f"ControlPath={_PROBE}", "-G", "--", alias]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NodeError(alias, f"cannot run `ssh -G`: {exc}") from None
    if proc.returncode != 0:
        raise NodeError(alias, f"`ssh -G` failed: {proc.stderr.strip() or proc.returncode}")
    opts: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition(" ")
        opts.setdefault(key.lower(), []).append(value)
    try:
        return _settings(alias, opts)
    except ValueError as exc:
        raise NodeError(alias, str(exc)) from None


def _settings(alias: str, opts: Mapping[str, list[str]]) -> SshSettings:
    def one(key: str, default: str = "") -> str:
        return opts.get(key, [default])[0]

    def files(key: str) -> tuple[str, ...]:
        paths = (p for v in opts.get(key, []) for p in v.split())
        return tuple(p for p in paths if p != "none")

    hostname, port, user = one("hostname", alias), one("port", "22"), one("user")
    probed = one("controlpath").split("/")
    key_alias = one("hostkeyalias", "none")
    tokens = {
        "C": probed[1] if len(probed) == 6 else "",
        "l": probed[2] if len(probed) == 6 else socket.gethostname(),
        "L": probed[3] if len(probed) == 6 else socket.gethostname().split(".")[0],
        "i": str(os.getuid()),
        "u": probed[5] if len(probed) == 6 else pwd.getpwuid(os.getuid()).pw_name,
        "d": pwd.getpwuid(os.getuid()).pw_dir,
        "h": hostname,
        "p": port,
        "r": user,
        "n": alias,
        "k": alias if key_alias == "none" else key_alias,
    }
    ids = tuple(  # one a line, so a path may hold spaces
        expand(_tilde(f), tokens, IDENTITY_TOKENS, "IdentityFile")
        for f in opts.get("identityfile", [])
    )
    pcmd = one("proxycommand", "none")
    quoted = {k: shlex.quote(v) for k, v in tokens.items()}  # a config value reaches a shell quoted
    jump = one("proxyjump", "none")
    return SshSettings(
        alias=alias,
        hostname=hostname,
        port=int(port),
        user=user or os.environ.get("USER", "root"),
        identity_files=ids,
        identities_only=one("identitiesonly", "no") == "yes",
        proxy_jump=None if jump == "none" else jump,
        proxy_command=None
        if pcmd == "none"
        else expand(pcmd, quoted, PROXY_TOKENS, "ProxyCommand", env=False),
        strict_host_key_checking=one("stricthostkeychecking", "ask"),
        known_hosts=tuple(_tilde(f) for f in files("userknownhostsfile")),
        global_known_hosts=files("globalknownhostsfile"),
        host_key_alias=None if key_alias == "none" else key_alias,
        hash_known_hosts=one("hashknownhosts", "no") == "yes",
    )
