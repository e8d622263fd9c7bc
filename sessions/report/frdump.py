"""Asking every rank for its Flight Recorder dump before a hang's teardown.

NCCL dumps when a line is written to its debug-info pipe (TORCH_NCCL_DEBUG_INFO_PIPE_FILE
followed by the rank and `.pipe`); launch.sh points that, and the dump files, into the
run's directory (`fr/where` says where, written by launch.sh with the values in force).
The ask rides in the stack capture's round trip (stacks.py): the pipes are written
first, py-spy runs meanwhile, and the dumps are waited for, within WAIT_TENTHS, at its
end. A stopped rank is not asked (it cannot dump); a dead one's pipe has no reader, so
each write is bounded by a 1-second timeout, all pipes at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WAIT_TENTHS = 15  # a NCCL monitor thread reads its pipe about once a second


@dataclass(frozen=True)
class Asked:
    pipes: int  # ranks asked (their pipe took the write)
    dumped: int  # dump files written since the ask, when the wait ended


def ask_snippet(run_dir: str) -> str:
    """Shell, after `pids` is set: write to the pipe of every rank that is not stopped
    (a stopped rank cannot dump: waiting for it would only delay the kill), each in the
    background with its own 1-second bound. The caller's `wait` waits for them too."""
    return f"""fr_dump=; fr_mark=; fr_n=0
fr_pipe=$(sed -n 2p {run_dir}/fr/where 2>/dev/null)
fr_dump=$(sed -n 1p {run_dir}/fr/where 2>/dev/null)
if [ -n "$fr_pipe" ] && [ -n "$fr_dump" ] && fr_mark=$(mktemp); then
  for p in $pids; do
    rank=$(tr '\\0' '\\n' 2>/dev/null <"/proc/$p/environ" | sed -n 's/^RANK=\\([0-9]*\\)$/\\1/p')
    read -r s 2>/dev/null <"/proc/$p/stat" || continue
    s=${{s#*) }}
    case ${{s%% *}} in T|t) continue ;; esac
    f="$fr_pipe$rank.pipe"
    [ -n "$rank" ] && [ -p "$f" ] || continue
    fr_n=$((fr_n + 1))
    # shellcheck disable=SC2016 # $1 is the inner sh's: the pipe's name, passed as data
    (timeout 1 sh -c 'printf 1 >"$1"' _ "$f" 2>/dev/null && : >"$fr_mark.ok.$fr_n") &
  done
fi
"""


def wait_snippet(m: str, tenths: int = WAIT_TENTHS) -> str:
    """Shell, after the caller's `wait`: count the pipes that took the write, wait until
    as many dumps were written since, or the time is up; print `ASKED n DUMPED k`."""
    return f"""if [ -n "$fr_mark" ]; then
  fr_asked=$(find "$fr_mark".ok.* 2>/dev/null | wc -l)
  rm -f "$fr_mark".ok.*
  fr_dir=$(dirname -- "$fr_dump"); fr_base=$(basename -- "$fr_dump")
  i=0
  while :; do
    got=$(find "$fr_dir" -maxdepth 1 -type f -name "$fr_base*" ! -name '*.tmp' \\
      -newer "$fr_mark" 2>/dev/null | wc -l)
    [ "$got" -ge "$fr_asked" ] || [ "$i" -ge {tenths} ] && break
    i=$((i + 1)); sleep 0.1
  done
  rm -f "$fr_mark"
  echo "{m}ASKED $fr_asked DUMPED $got"
fi
"""


_ASKED = re.compile(r"ASKED (\d{1,6}) DUMPED (\d{1,6})\Z")


def parse_asked(body: str) -> Asked | None:
    a = _ASKED.match(body)
    return Asked(int(a[1]), int(a[2])) if a else None
