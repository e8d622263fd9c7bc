"""What the node's kill reports of a process: what it was when first found. The kill's
sweeps find a process again while its SIGKILL lands (its command line then reads empty);
CI once reported a stubborn rank with no command line that way."""

from __future__ import annotations

from pathlib import Path

from mntui.sessions.node.proc.killer import _Killer, _Proc


def _proc(root: Path, pid: int, state: str, cmdline: bytes) -> None:
    d = root / str(pid)
    d.mkdir(exist_ok=True)
    fields = [state, 1, *[0] * 19, 1000, 0, 3]  # state, ppid, .., starttime, vsize, rss
    (d / "stat").write_text(f"{pid} (python3) {' '.join(map(str, fields))}\n")
    (d / "cmdline").write_bytes(cmdline)


def test_a_process_found_again_as_it_dies_keeps_its_first_reading(tmp_path: Path) -> None:
    _proc(tmp_path, 11, "S", b"python3\0train.py\0--stubborn\0")
    k = _Killer(str(tmp_path))
    k.note([_Proc(11, 1000, None)])
    _proc(tmp_path, 11, "R", b"")  # its SIGKILL landing: memory gone, not a zombie yet
    k.note([_Proc(11, 1000, None)])
    assert list(k.found.values()) == [(11, "S", "python3 train.py --stubborn")]
