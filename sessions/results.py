"""Typed results of cluster-wide calls, in the spirit of fabric's GroupResult.

A call on 64 nodes has 64 answers and some of them are failures: one dead node must
never abort the rest, and a caller must never have to tell "failed" from "returned
None" by hand. Every node's Outcome keeps the exception itself, not only its text,
and an unexpected one (a bug) has its traceback written to the local error log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

from .errors import MntuiError, log_exception

T = TypeVar("T")
U = TypeVar("U")


class NodeError(MntuiError):
    """A node could not be reached or did not answer; the message names the node."""

    def __init__(self, node: str, message: str) -> None:
        self.node, self.message = node, message
        super().__init__(f"{node}: {message}")


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """One node's share of a cluster-wide call: a value or an error, never both."""

    node: str
    value: T | None = None
    error: str | None = None
    exception: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def failure(cls, node: str, exc: BaseException) -> Outcome[T]:
        """A NodeError is expected and speaks for itself; anything else is a bug, whose
        traceback goes to the error log so a one-line message does not swallow it."""
        if isinstance(exc, NodeError):
            return cls(node, error=exc.message, exception=exc)
        log = log_exception(f"node {node}", exc)
        where = f" (traceback in {log})" if log is not None else ""
        return cls(node, error=f"{type(exc).__name__}: {exc}{where}", exception=exc)


class GroupResult(dict[str, Outcome[T]]):
    """Every node's Outcome, by node name, in the order the nodes were asked."""

    @property
    def succeeded(self) -> dict[str, T]:
        return {n: cast(T, o.value) for n, o in self.items() if o.ok}

    @property
    def failed(self) -> dict[str, Outcome[T]]:
        return {n: o for n, o in self.items() if not o.ok}

    @property
    def errors(self) -> dict[str, str]:
        return {n: o.error or "" for n, o in self.items() if not o.ok}

    @property
    def all_ok(self) -> bool:
        return all(o.ok for o in self.values())

    def where(self, test: Callable[[T], bool]) -> list[str]:
        """Nodes that succeeded with a value passing `test` (e.g. "not clean")."""
        return [n for n, v in self.succeeded.items() if test(v)]

    def map_values(self, fn: Callable[[T], U]) -> GroupResult[U]:
        out: GroupResult[U] = GroupResult()
        for n, o in self.items():
            out[n] = (
                Outcome(n, value=fn(cast(T, o.value)))
                if o.ok
                else Outcome(n, error=o.error, exception=o.exception)
            )
        return out
