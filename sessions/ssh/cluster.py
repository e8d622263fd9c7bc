"""The job's nodes, each behind its own persistent connection, and the fan-out over them.

Cluster-wide calls return a per-node Outcome, so one dead node never aborts the rest,
and each node's result is seen as soon as it is done. A node is local (sessions/
nodeshell.py), or reached over `ssh.transport`: paramiko (sessions/ssh/paramikonode.py,
the default) or the system's OpenSSH (sessions/ssh/openssh.py); hosts resolve as the user's
`ssh` resolves them (sessions/ssh/sshresolve.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Protocol, TypeVar

from mntui.sessions.config import NodeSpec, SshPolicy, SshTransport
from mntui.sessions.results import GroupResult, NodeError, Outcome

from .nodeshell import LocalNode, Result
from .paramikonode import RemoteNode

__all__ = ["Cluster", "GroupResult", "Node", "NodeError", "Outcome"]

T = TypeVar("T")


class Node(Protocol):
    name: str
    host: str
    is_local: bool

    def run(self, script: str, timeout: float | None = None) -> Result: ...

    def close(self) -> None: ...


class Cluster:
    """The job's nodes, each behind its own persistent connection."""

    def __init__(
        self,
        specs: Iterable[NodeSpec],
        policy: SshPolicy,
        *,
        prompt: Callable[[str], str] | None = None,
    ) -> None:
        """`prompt` asks for `ssh.password: prompt` (default: getpass on the terminal)."""
        from .openssh import OpenSshNode

        self.policy = policy
        self.nodes: dict[str, Node] = {}
        for spec in specs:
            if spec.is_local:
                self.nodes[spec.name] = LocalNode(spec.name, spec.host, policy.command_timeout)
            elif policy.transport is SshTransport.OPENSSH:
                self.nodes[spec.name] = OpenSshNode(spec.name, spec.host, policy)
            else:
                self.nodes[spec.name] = RemoteNode(spec.name, spec.host, policy, prompt)
        # Two cluster-wide calls at once (a teardown's kill and its report's reads) must
        # not queue behind each other: room for two per node (threads start as needed).
        self._pool = ThreadPoolExecutor(
            max_workers=max(4, min(256, 2 * len(self.nodes))), thread_name_prefix="mntui-node"
        )

    def connect(self, names: Iterable[str] | None = None) -> GroupResult[None]:
        def op(node: Node) -> None:
            # A first command also starts the node's shell, so its login-shell start-up
            # (and any error it prints) happens here, in parallel, not mid-launch.
            res = node.run(":", timeout=self.policy.connect_timeout + 30)
            if not res.ok:
                raise NodeError(node.name, f"the node's shell failed: {res.stderr.strip()[-300:]}")

        return self.map(op, names)

    def map(
        self,
        fn: Callable[[Node], T],
        names: Iterable[str] | None = None,
        on_result: Callable[[Outcome[T]], object] | None = None,
    ) -> GroupResult[T]:
        """Run `fn` on every node at once; `on_result` sees each node as soon as it is done,
        so a slow node never holds back the others' results."""
        selected = list(names) if names is not None else list(self.nodes)
        futures = {self._pool.submit(fn, self.nodes[n]): n for n in selected}
        out: dict[str, Outcome[T]] = {}
        for fut in as_completed(futures):
            name = futures[fut]
            try:
                result: Outcome[T] = Outcome(name, value=fut.result())
            except Exception as exc:  # a bug on one node must not hide the others' results
                result = Outcome.failure(name, exc)
            out[name] = result
            if on_result is not None:
                on_result(result)
        return GroupResult((n, out[n]) for n in selected)

    def run(self, scripts: Mapping[str, str], timeout: float | None = None) -> GroupResult[Result]:
        return self.map(lambda node: node.run(scripts[node.name], timeout), scripts)

    def close(self) -> None:
        """All nodes at once: an openssh node's close is an `ssh -O exit` round trip."""

        def close(node: Node) -> None:
            try:
                node.close()
            except Exception:
                pass

        # Nothing queued starts on a node being closed (it would reopen the connection).
        # The commands running end at the close (their channel closes): the pool's threads
        # are joined at interpreter exit, so one left waiting holds a Ctrl+C'd CLI open.
        self._pool.shutdown(wait=False, cancel_futures=True)
        # Threads of their own: the pool's may all be stuck on the commands this unblocks.
        threads = [threading.Thread(target=close, args=(n,)) for n in self.nodes.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
