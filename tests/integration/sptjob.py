"""A light rank (as tests/helpers.py steps_job) that hides from a watch by its tag, as
real jobs do: `setproctitle` (many training stacks) writes the title over the
argv+environ area, so /proc/PID/environ no longer holds MNTUI_RUN.
  sptjob.py RANK PORT self PIDDIR    the rank names itself at start
  sptjob.py RANK PORT helper PIDDIR  the rank starts a helper in a session of its own (a
                                     data or metrics server) that names itself; the rank
                                     does not
  sptjob.py RANK PORT orphan PIDDIR  the same helper, double-forked with a clean
                                     environment (`env -i`): no tag, no parent of the job
Each helper writes its pid to PIDDIR/helper-RANK.pid; the rank writes rank-RANK.pid."""

import itertools
import os
import socket
import subprocess
import sys
import time

if sys.argv[1] == "helper-proc":
    import setproctitle

    setproctitle.setproctitle("data-server")
    with open(sys.argv[2] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    time.sleep(600)
    sys.exit(0)

r, port, mode, piddir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
with open(f"{piddir}/rank-{r}.pid", "w") as f:
    f.write(str(os.getpid()))
helper = [sys.executable, __file__, "helper-proc", f"{piddir}/helper-{r}.pid"]
quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
if mode == "self":
    import setproctitle

    setproctitle.setproctitle(f"trainer rank {r}")
if mode == "helper":
    subprocess.Popen(helper, start_new_session=True, **quiet)
if mode == "orphan":
    middle = os.fork()
    if middle == 0:
        os.setsid()
        subprocess.Popen(["env", "-i", *helper], **quiet)
        os._exit(0)
    os.waitpid(middle, 0)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if r == 0:
    s.bind(("127.0.0.1", port))
    s.listen()
for i in itertools.count(1):
    print("step", i, flush=True)
    time.sleep(0.1)
