"""The node wing's bounded reads and its daemons' end (node/proc/proctree.py read_bounded,
node/proc/daemon.py leave): what a kill's scan of every environment on the host and a
sentinel's exit after a kill cost, without changing what they read or finish."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mntui.sessions.node.proc.proctree import READ_CHUNK, read_bounded


def test_a_bounded_read_is_the_file_up_to_its_limit(tmp_path: Path) -> None:
    f = tmp_path / "f"
    data = os.urandom(3 * READ_CHUNK + 17)  # several reads
    f.write_bytes(data)
    assert read_bounded(str(f), len(data) + 1) == data
    assert read_bounded(str(f), READ_CHUNK + 5) == data[: READ_CHUNK + 5]
    assert read_bounded(str(f), 0) == b""
    assert read_bounded(str(tmp_path / "gone"), 10) is None
    assert read_bounded(str(tmp_path), 10) is None  # a directory: unreadable, no error


def test_a_proc_file_reads_whole_as_before() -> None:
    """/proc files come a page a read: the whole environment, as a buffered read gave."""
    with open("/proc/self/environ", "rb") as fh:
        whole = fh.read()
    assert read_bounded("/proc/self/environ", 1 << 20) == whole
    assert read_bounded(f"/proc/{os.getpid()}/stat", 4096).startswith(f"{os.getpid()} (".encode())


LEAVER = """
import sys, threading, time
from mntui.sessions.node.proc import daemon
out = sys.argv[1]
def late():
    time.sleep(0.3)
    open(out, "w").write("finished")
threading.Thread(target=late).start()  # a kill under way: no daemon thread
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # never waited for
print("said before leaving", end="")
daemon.leave(3)
"""


def test_a_daemon_leaves_after_its_work_and_says_what_it_said(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-c", LEAVER, str(out)], capture_output=True, text=True, timeout=30
    )
    assert res.returncode == 3
    assert res.stdout == "said before leaving"  # flushed, though it ended without a newline
    assert out.read_text() == "finished"  # the thread that is no daemon ended first
