"""The coordinator's count of refused connections, for `status` and the journal.

Why a counter and not a log: a port scanner or a misconfigured sentinel can knock many
times a second; `status` needs one line ("3 connections refused (bad-mac 3, last from
10.0.0.9)") and the journal one line per (reason, peer) per minute, not one per knock.
"""

from __future__ import annotations

import threading
import time

_KEEP_PEERS = 1024  # remembered (reason, peer) pairs before old ones are forgotten


class RefusalCounter:
    """Thread-safe: the coordinator's accept threads all note into one."""

    def __init__(self, journal_every: float = 60.0) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._last_peer: str | None = None
        self._journal_every = journal_every
        self._said: dict[tuple[str, str | None], float] = {}

    def note(self, reason: str, peer: str | None = None, now: float | None = None) -> bool:
        """Count one refusal from `peer` (an address, or None when unknown). True when
        this (reason, peer) was not reported in the last `journal_every` seconds: the
        caller journals it then, and only then."""
        at = time.monotonic() if now is None else now
        with self._lock:
            self._counts[reason] = self._counts.get(reason, 0) + 1
            if peer is not None:
                self._last_peer = peer
            said = self._said.get((reason, peer))
            if said is not None and at - said < self._journal_every:
                return False
            if len(self._said) >= _KEEP_PEERS:
                self._said = {k: t for k, t in self._said.items() if at - t < self._journal_every}
                if len(self._said) >= _KEEP_PEERS:
                    return False  # a flood from many addresses: counted, not journaled each
            self._said[(reason, peer)] = at
            return True

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    @property
    def last_peer(self) -> str | None:
        with self._lock:
            return self._last_peer

    def summary(self) -> str:
        """'3 connections refused (bad-mac 3, last from 10.0.0.9)', most frequent first;
        'no connections refused' when none were."""
        with self._lock:
            counts, last = dict(self._counts), self._last_peer
        total = sum(counts.values())
        if not total:
            return "no connections refused"
        parts = [f"{r} {n}" for r, n in sorted(counts.items(), key=lambda rn: (-rn[1], rn[0]))]
        if last is not None:
            parts.append(f"last from {last}")
        noun = "connection" if total == 1 else "connections"
        return f"{total} {noun} refused ({', '.join(parts)})"
