"""Recovery rules that need no node: `reset_after` counts steps, not output (finding 5),
as the coordinator's chain measures it, and a tmux start that meets the server on its
way out is tried again (finding 10)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from mntui.sessions.config import RestartPolicy, compile_pattern
from mntui.sessions.launch.nodeplan import start_script
from mntui.sessions.node.rules import steps
from mntui.sessions.node.rules.restarts import AttemptEnd, decide
from mntui.sessions.poll import NodeState

TRACEBACK = (
    b"step 0 loss 1.0\n"
    b"RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out "
    b"waiting 1800000ms for recv operation to complete\n"
)


def test_a_job_that_always_hangs_then_times_out_gives_up() -> None:
    """Each attempt prints step 0, hangs 30 min silently, then its collective timeout's
    traceback: output, not progress, so the failures count and the chain gives up. The
    attempt's progress is measured as the coordinator measures it (coordstate.py's
    progressed_since): from its start to when a node's step last advanced, as the
    node's tracker says (node/rules/steps.py, fed by its sentinel's log tail)."""
    policy = RestartPolicy(max=3, reset_after=1800)
    history: list[AttemptEnd] = []
    clock = 1_000_000.0
    for attempt in range(20):
        t0 = clock
        tracker = steps.ProgressTracker(compile_pattern(steps.DEFAULT_PATTERN))
        last_step_at = t0
        for at, text in ((t0, TRACEBACK[:16]), (t0 + 1801, TRACEBACK[16:])):
            if tracker.feed("n0", text.decode().splitlines(), at):
                last_step_at = at
        clock = t0 + 1801
        run = f"20260101-000000-{attempt:04x}"
        end = AttemptEnd(attempt, run, NodeState.FAILED, "n0", (1,), last_step_at - t0, "timeout")
        history.append(end)
        d = decide(policy, history)
        if not d.restart:
            break
        clock += d.delay
    assert not d.restart and d.gave_up, f"still restarting after {len(history)} identical failures"
    assert len(history) == policy.max + 1


FLAKY_TMUX = """#!/bin/sh
# The first new-session fails as tmux does when it meets a server on its way out.
case "$1" in
  new-session)
    if [ ! -e "$FLAKY_MARK" ]; then
      : >"$FLAKY_MARK"
      echo "server exited unexpectedly" >&2
      exit 1
    fi ;;
esac
exec "$REAL_TMUX" "$@"
"""


def test_a_start_that_meets_the_tmux_server_exiting_is_tried_again(tmp_path: Path) -> None:
    real = shutil.which("tmux")
    assert real is not None
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    (fakebin / "tmux").write_text(FLAKY_TMUX)
    (fakebin / "tmux").chmod(0o755)
    sock = tmp_path / "tmux"
    sock.mkdir(mode=0o700)
    env = {**os.environ, "PATH": f"{fakebin}:{os.environ['PATH']}", "REAL_TMUX": real,
           "FLAKY_MARK": str(tmp_path / "failed-once"), "TMUX_TMPDIR": str(sock),
           "HOME": str(tmp_path)}  # fmt: skip
    env.pop("TMUX", None)
    script = start_script("mntui+retry-n0", "retry/1/n0", "run", "sleep 30\n")
    try:
        res = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                             timeout=30, cwd=tmp_path)  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith("STARTED ") and (tmp_path / "failed-once").exists()
        listed = subprocess.run([real, "list-sessions", "-F", "#S"], env=env,
                                capture_output=True, text=True, timeout=10)  # fmt: skip
        assert listed.stdout.split() == ["mntui+retry-n0"]
    finally:
        subprocess.run([real, "kill-server"], env=env, capture_output=True, timeout=10)


def test_any_other_tmux_error_fails_at_once(tmp_path: Path) -> None:
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    (fakebin / "tmux").write_text("#!/bin/sh\necho 'no server running on /x' >&2\nexit 1\n")
    (fakebin / "tmux").chmod(0o755)
    env = {**os.environ, "PATH": f"{fakebin}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    script = start_script("s", "t/1/n", "run", "true\n")
    res = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                         timeout=30, cwd=tmp_path)  # fmt: skip
    assert res.returncode == 1 and res.stderr.count("no server running") == 1
