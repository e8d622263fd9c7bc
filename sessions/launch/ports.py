"""Cleanup: free the job's ports, whoever of the user's processes holds them.

Apart from the kill because it answers another question with another rule. The kill
stops what carries the job's tag; a port can stay held by a process without it (a
stray of an earlier run, a debug server), which only the port knows. Freeing those is
a step the user confirms (`mntui cleanup`, the app's cleanup key), after a listing of
the holders, and it kills only a PID that ss on the node says holds the port at that
moment and that is the user's: what still holds a port is reported, never taken for
freed. kill.py re-exports these names for the callers that knew them there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from mntui.sessions.config import JobConfig
from mntui.sessions.procs import (
    INT,
    SHELL_LIB,
    PortHolder,
    ints,
    node_lines,
    parse_listeners,
)
from mntui.sessions.results import GroupResult
from mntui.sessions.ssh import Cluster

# The free script's own record; LISTEN records are procs.py's.
_FREEING = re.compile(f"FREEING((?: {INT})*)", re.ASCII)


def holders_script(ports: Iterable[int]) -> str:
    ports_s = " ".join(str(p) for p in ports)
    return f"{SHELL_LIB}\n{f'mntui_listeners {ports_s}' if ports_s else ''}\n"


def port_holders(cfg: JobConfig, cluster: Cluster) -> GroupResult[tuple[PortHolder, ...]]:
    script = holders_script(cfg.all_ports)
    return cluster.map(lambda node: parse_listeners(node_lines(node.run(script).stdout)))


def free_script(holders: Iterable[PortHolder], grace: float) -> str:
    """Kill the listed holders, but only those that are still ours and that ss, on the
    node, says hold that port now: between listing and confirming, a PID may have exited
    and been reused, and nothing printed earlier decides what is killed. Every listed
    port is looked at again afterwards, one held by a hidden process too: what still
    holds one is reported, never taken for freed."""
    grace_ms = int(grace * 1000)
    holders = tuple(holders)
    listed = sorted({(h.port, h.pid) for h in holders if h.pid is not None})
    ports = " ".join(str(p) for p in sorted({h.port for h in holders}))
    checks = "\n".join(f'mntui_holds {port} {pid} && pids="$pids {pid}"' for port, pid in listed)
    return f"""{SHELL_LIB}
pids=""
{checks}
echo "FREEING$pids"
# shellcheck disable=SC2086 # PIDs, one a word
mntui_stop {grace_ms} $pids
held() {{ [ -n "$(mntui_port_pids {ports})" ]; }}
[ -n "$pids" ] && mntui_wait_while 2000 held
{f"mntui_listeners {ports}" if ports else ""}
"""


def parse_free(stdout: str) -> tuple[tuple[int, ...], tuple[PortHolder, ...]]:
    """(PIDs the free script chose to kill, holders still there afterwards)."""
    lines = node_lines(stdout)
    freeing = next((m[1] for line in lines if (m := _FREEING.fullmatch(line))), "")
    return tuple(dict.fromkeys(ints(freeing))), parse_listeners(lines)


def free_ports(
    cluster: Cluster, holders: dict[str, tuple[PortHolder, ...]], grace: float
) -> GroupResult[tuple[tuple[int, ...], tuple[PortHolder, ...]]]:
    """Per node: (PIDs killed, holders still there). One round trip per node, every node
    with a holder: one held by nothing we may kill is answered too (killed nothing,
    still held), never left out as if it were free."""

    def one(node) -> tuple[tuple[int, ...], tuple[PortHolder, ...]]:  # type: ignore[no-untyped-def]
        return parse_free(
            node.run(free_script(holders[node.name], grace), timeout=grace + 30).stdout
        )

    return cluster.map(one, [n for n, h in holders.items() if h])


def still_held(holder: PortHolder, killed: tuple[int, ...]) -> str:
    """A holder still there after cleanup, in words: one we did not kill is not the
    user's (the node refused it: another user's, or hidden from us), one we killed
    outlived it."""
    if holder.pid is None or holder.pid not in killed:
        return f"not yours, left alone: {holder.describe()}"
    return f"still busy: {holder.describe()}"
