"""What a doctor run adds up to, and, for `doctor -v`, how each of its checks was made.

The table has a row per node and check, 30 and more on two nodes: the last line gives
the counts, so a WARN among them is not missed on a screen that scrolled. `-v` adds one
line per check shown, saying what ran on the node and what passes, so that a user can
repeat a failed check by hand. The CLI and the app's `d` screen both read this module.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from .checks import Check, Status

# check -> what ran for it, and what passes. A check added without a line here fails
# tests/unit/test_doctor_logic.py, naming it.
HOW: dict[str, str] = {
    "ssh": "connect over the config's transport (host key verified); `date +%s.%N` times "
    "the round trip",
    "tmux": "`tmux -V` on the node: FAIL when missing",
    "sentinel": "`python3 -I -S` on the login PATH, else the `python3` or `python` that "
    "`setup` provides, run by its path outside `setup` (the cluster's watch runs the "
    "sentinel on it; checked when the config would be watched by the cluster): FAIL when "
    "neither is 3.9 or later (the launch refuses)",
    "workdir": "`cd` to the workdir as the launch does, then `df -Pk .`: WARN at 5 GiB free "
    "or less",
    "setup": "the config's `setup` under bash in the workdir, as the launch runs it: FAIL on a "
    "non-zero exit, with what it printed on stderr",
    "python": "`python3` after `setup`: FAIL when it is missing or gives no readable report",
    "torch": "`python3 -c 'import torch'` after `setup`: versions, CUDA, NCCL; FAIL with fewer "
    "GPUs than nproc_per_node",
    "stacks": "`command -v py-spy` after `setup`, and kernel.yama.ptrace_scope: WARN when the "
    "failure report could not read hung stacks",
    "git": "`git rev-parse HEAD` and `git status --porcelain` in the workdir: WARN when dirty",
    "versions": "the nodes' torch versions side by side: FAIL when they differ",
    "code": "the nodes' git commits side by side: FAIL when they differ",
    "master_addr": "`getent ahostsv4 MASTER_ADDR` on every node, against the main's answer "
    "and the main's own addresses (`ip -o -4 addr`)",
    "ifname": "NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME against /sys/class/net/*/operstate: "
    "FAIL when no matching interface is up",
    "leftovers": "processes tagged with this job's MNTUI_RUN, and its tmux session: FAIL when "
    "any is left (`mntui kill`)",
    "clock": "the node's `date +%s.%N` against this machine's clock: WARN over 2 s of skew",
    "ports": "`ss -Hltnpe` on the main for the master port and `ports`: FAIL when held, the "
    "holder named",
    "tcp": "a listener on the main's master port, for this check only; every worker connects "
    "to MASTER_ADDR:port with python",
    "allreduce": "the bundled smoke job through the normal launch path: every rank "
    "all-reduces, checks the sum, times latency and bandwidth; then it is killed",
    "pairs": "the smoke job on pairs of nodes, in two rounds: the node (or link) slow with a "
    "fast partner FAILs",
}


def counts(rows: Sequence[Check]) -> dict[Status, int]:
    """Every status, zero included: a script greps `0 FAIL` as surely as `1 FAIL`."""
    seen = Counter(r.status for r in rows)
    return {s: seen[s] for s in Status}


def summary_line(rows: Sequence[Check], nodes: int) -> str:
    """`doctor: 2 nodes, 31 PASS, 2 WARN, 1 FAIL`."""
    told = ", ".join(f"{n} {s.value}" for s, n in counts(rows).items())
    return f"doctor: {nodes} node{'' if nodes == 1 else 's'}, {told}"


def how_lines(rows: Sequence[Check]) -> list[str]:
    """One line for each check the rows show, in the table's order."""
    shown = dict.fromkeys(r.check for r in rows)
    width = max((len(c) for c in shown), default=0)
    return ["how each check was made:"] + [
        f"  {c.ljust(width)}  {HOW.get(c, 'no description')}" for c in shown
    ]
