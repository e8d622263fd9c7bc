"""Issue 28 as a new user meets it, on real sshd nodes: a rank prints escape sequences
(OSC 52 that would set the clipboard, a screen clear, an 8-bit CSI, a bell, Textual
markup) and fails; after the coordinator's teardown, every verb a user reaches for next
(`status`, `status --json`, `report`, `logs`, `history`) and the saved report write no
control byte to the terminal but newline and tab."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fakecluster import FakeCluster, tagged, wait_for
from helpers import Cfg, on_cluster
from test_reports import saved_report

from mntui.sessions.runs import latest

# Every C0 control but tab and newline, DEL, and every C1 control: what a terminal obeys.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

# Rank 1's last words: OSC 52 (clipboard := "rm -rf ~"), CSI 2J + H, an 8-bit CSI as
# UTF-8 (decodes to U+009B, a C1 control) and as a raw byte, a lone BEL, markup.
HOSTILE = (
    "sys.stdout.buffer.write("
    "b'boom \\x1b]52;c;cm0gLXJmIH4=\\x07 \\x1b[2J\\x1b[H wiped \\xc2\\x9b2J \\x9b2J "
    "bell\\x07 [/] [red]fake[/red] Traceback: exit 3\\n'); sys.stdout.flush(); os._exit(3)"
)


def hostile_job(job: str, work: Path) -> str:
    (work / "hostile.py").write_text(
        "import os, sys, time\n"
        "print('node up', flush=True)\n"
        "if os.environ['NODE_RANK'] == '1':\n"
        f"    time.sleep(1); {HOSTILE}\n"
        "time.sleep(300)\n"
    )
    return f"""
    job: {job}
    nodes: [node0, node1]
    workdir: {work}
    command: exec python3 hostile.py
    launch: {{ready: log, ready_pattern: "node up", ready_timeout: 20}}
    kill: {{grace: 2}}
    {on_cluster()}
    """


def bad(text: str) -> list[str]:
    return sorted({repr(c) for c in CONTROL.findall(text)})


def test_a_rank_that_prints_escapes_and_fails_leaves_every_verb_clean(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "hescape"
    work = cfg.tmp / "work"
    work.mkdir()
    path = cfg.write(hostile_job(job, work))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    raw = wait_for(lambda: "wiped" in fake.node("node1").log(job) and fake.node("node1").log(job),
                   20, what="node1's escapes in its log")  # fmt: skip
    assert isinstance(raw, str) and "\x1b]52;c;" in raw and "\x9b2J" in raw, repr(raw)
    report = saved_report(fake, cfg, path, job, 40)  # the first `report` after the end
    wait_for(lambda: not tagged(job), 30, what="the job torn down")
    assert report["cause_node"] == "node1", report["headline"]

    rec = latest(job)
    assert rec is not None and rec.status == "torn-down", rec
    assert any(h["what"] == "watchdog-teardown" for h in rec.history), rec.history
    saved = {
        "report.txt": (rec.dir / "report.txt").read_text(errors="replace"),
        "run.json cause": json.loads((rec.dir / "run.json").read_text())["cause"] or "",
    }
    for what, text in saved.items():
        assert not bad(text), f"{what}: {bad(text)}\n{text!r}"

    shown: dict[str, str] = {}
    for verb in (["status"], ["status", "--json"], ["report"], ["logs", "-n", "50"], ["history"]):
        res = cfg.mntui(path, *verb)
        shown[" ".join(verb)] = res.stdout + res.stderr
        assert "Traceback (most recent call last)" not in res.stderr, res.stderr
    for what, text in shown.items():
        assert not bad(text), f"mntui {what}: {bad(text)}\n{text!r}"
    # The rank's words still reach the user, without their teeth.
    assert "wiped" in shown["logs -n 50"] and "[red]fake[/red]" in shown["logs -n 50"]
    assert "wiped" in saved["report.txt"], saved["report.txt"]
    json.loads(shown["status --json"])
    print(f"\nREPORT (escapes):\n{saved['report.txt']}")
