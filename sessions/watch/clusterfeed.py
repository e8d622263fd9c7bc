"""The live stream of a run the cluster watches, from here: one `ssh` to the main node
running the bundle's `feed` verb (node/coord/follower.py), its lines read by the caller.

Why one ssh and no connection of the Cluster's: the app follows the run for as long as
it is open, and a stream is one long command, which a persistent node connection runs
only one at a time (its polls would queue behind it). The ssh is the one a cold status
uses (openssh.oneshot_argv: BatchMode, never asking anyone), so a node that needs a
person has no stream (`argv` None), and the app says so. The script goes on stdin, which
stays open: when this side goes away the follower's stdout breaks, and it ends. A main
without the bundle of this version gets it shipped (sentinelship.py) and the stream is
started again.
"""

from __future__ import annotations

import shlex
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from mntui.sessions.launch.board import board_dir
from mntui.sessions.node.wire import feedwire
from mntui.sessions.procs import run_dir_word
from mntui.sessions.ssh.nodeshell import untagged_env

if TYPE_CHECKING:
    from mntui.sessions.config import JobConfig
    from mntui.sessions.runs import RunRecord

ABSENT = b"MNTUIFEED-ABSENT\n"  # the main lacks this bundle: ship it, then again
SHIP_TIMEOUT = 60.0
SILENCE = 10.0  # seconds: the follower writes a board every second


def argv(cfg: JobConfig, host: str) -> list[str] | None:
    """`ssh` up to the host, or None when reaching the main needs a password; [] for a
    main on this machine (`host: localhost`, the demo's): its follower runs here, as the
    launch ran it, and no sshd is needed."""
    from mntui.sessions.config.settings import LOCAL_HOSTS

    if host in LOCAL_HOSTS:
        return []
    if cfg.ssh.password is not None:
        return None
    from mntui.sessions.ssh.openssh import oneshot_argv

    return oneshot_argv(cfg.ssh)


def _interpreter(record: RunRecord) -> str:
    """Shell setting `$d` (the coordinator's run dir) and `$py`, the interpreter the
    main's watchers run on: the one the launch found there (clusterwatch.watch_block
    wrote it in `$d/python`: the bare python3, or the one `setup` provides)."""
    return (
        f"d={run_dir_word(board_dir(record))}\n"
        'py=python3; if [ -s "$d/python" ]; then IFS= read -r py <"$d/python" || py=python3; fi\n'
    )


def script(record: RunRecord, sha: str) -> str:
    """The follower on the coordinator's run dir, from the bundle `sha`, or ABSENT."""
    from mntui.sessions.launch.sentinelship import remote_path

    pyz = f'"$HOME"/{shlex.quote(remote_path(sha))}'
    return (
        _interpreter(record)
        + f'if [ -f {pyz} ]; then exec "$py" -I -S {pyz} feed "$d" 2>&1; fi\n'
        + f"echo {ABSENT.decode().strip()}\nexit 3\n"
    )


class FeedStream:
    """One follower over one ssh; `lines` from the thread that reads it, `close` from any."""

    def __init__(self, ssh: list[str], host: str, text: str, silence: float = SILENCE) -> None:
        """OSError when there is no `ssh` to start. A stream that says nothing for
        `silence` seconds (the main stopped, its network gone) is ended here."""
        self.heard = time.monotonic()
        self.silent: str | None = None  # why this side ended it
        self.proc: subprocess.Popen[bytes] = subprocess.Popen(
            [*ssh, "--", host, "sh -s"] if ssh else ["sh", "-s"],  # argv: [] is this machine
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=None if ssh else untagged_env(),  # a local node's, as LocalNode runs it
            start_new_session=not ssh,
        )
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(text.encode())
            self.proc.stdin.flush()
        except OSError:
            pass  # ssh is gone already: `lines` ends at once and says so
        threading.Thread(target=self._guard, args=(silence,), daemon=True).start()

    def _guard(self, silence: float) -> None:
        while self.proc.poll() is None:
            time.sleep(min(1.0, silence / 4))
            quiet = time.monotonic() - self.heard
            if quiet > silence and self.proc.poll() is None:
                self.silent = f"no word from the main for {quiet:.0f} s"
                self.proc.kill()

    def lines(self) -> Iterator[bytes]:
        """Each line, bounded (a longer one comes cut and is malformed), until the end."""
        out = self.proc.stdout
        assert out is not None
        with out:  # closed by its reader, never under it
            while True:
                raw = out.readline(feedwire.LINE_MAX + 1)
                if not raw:
                    return
                self.heard = time.monotonic()
                yield raw

    def close(self) -> int | None:
        """Our own ssh, by its Popen (never by name), reaped; its exit code. From any
        thread: a reader waiting in `lines` sees the end."""
        proc = self.proc
        if proc.poll() is None:
            proc.kill()
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        return proc.wait()


def ship(cfg: JobConfig, ssh: list[str], host: str, record: RunRecord) -> str | None:
    """The bundle shipped to the main (for its watchers' interpreter); None, or why not."""
    from mntui.sessions.launch.sentinelship import ShipState, bundle, parse_ship, ship_script
    from mntui.sessions.ssh.nodeshell import LocalNode
    from mntui.sessions.ssh.oneshot import OneShotNode

    b = bundle()
    try:
        node = OneShotNode("main", host, ssh) if ssh else LocalNode("main", host, SHIP_TIMEOUT)
    except OSError as exc:
        return f"ssh: {exc}"
    try:
        text = _interpreter(record) + ship_script(b, '"$py"')
        res = node.run(text, timeout=SHIP_TIMEOUT + cfg.ssh.connect_timeout)
    except Exception as exc:  # NodeError: no answer in time
        return str(exc)
    finally:
        node.close()
    answer = parse_ship(res.stdout, b.sha)
    if answer.state in (ShipState.PRESENT, ShipState.SHIPPED):
        return None
    return f"the bundle could not be shipped: {answer.state} {answer.why or ''}".strip()


def newer_attempt(record: RunRecord) -> RunRecord | None:
    """The chain's attempt after `record`, when this machine recorded one (a look synced
    the coordinator's next attempt: watch/mirror.py); else None.
    Cheap enough to ask every few seconds: one small file read here while the latest run
    is `record`, no ssh."""
    from mntui.sessions.runs import RUN_ID_RE, load_run, state_dir

    try:
        run_id = (state_dir() / record.job / "latest").read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if run_id == record.run_id or not RUN_ID_RE.match(run_id):
        return None
    newest = load_run(record.job, run_id)
    chain = record.chain or record.run_id
    if newest is None or newest.chain != chain or newest.attempt <= record.attempt:
        return None
    return newest


def bundle_sha() -> str:
    from mntui.sessions.launch.sentinelship import bundle

    return bundle().sha
