"""What a node name and a node set may be: the rules that the config's lists, hostfiles
and Slurm's node lists share, below all three.

A node name reaches SSH, tmux and shells (NODE_RE), and a node set can expand to
millions of names: nodeset_bound counts them on the text, before ClusterShell expands
anything, against MAX_NODES.
"""

from __future__ import annotations

import re

NODE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
MAX_NODES = 4096  # one SSH connection and one thread per node


def nodeset_bound(text: str) -> int:
    """At least as many nodes as `text` expands to: the sum over its comma-separated
    patterns of the product of their bracket sizes (ranges counted without steps)."""
    total, size, depth, group = 0, 1, 0, ""
    for c in text + ",":
        if depth:
            if c == "]":
                depth, size = 0, size * sum(_range_size(r) for r in group.split(","))
            else:
                group += c
        elif c == "[":
            depth, group = 1, ""
        elif c in ",!&^":
            total, size = total + size, 1
    return total


def _range_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d{1,9})\s*-\s*(\d{1,9})\s*(/\s*\d+\s*)?", text)
    if m:
        return max(0, int(m[2]) - int(m[1])) + 1
    return 10**9 if re.search(r"\d{10}", text) else 1
