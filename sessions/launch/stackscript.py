"""The shell that takes a hung job's Python stacks on a node: one script for the
manager's teardown, its `mntui report` and its sampler (report/stacks.py runs it over
SSH and parses it) and for the cluster's sentinels, which run the copy the launch
rendered into the node's run dir (plan.py: the manager may be away by then), with the
attempt's tag pattern and run dir as its arguments.

Why it lives in the launch wing: the launch renders it, and the launch cannot import
the report wing; the report imports it from here. One script, one parser
(report/stacks.py: parse_capture), wherever it runs.

The ranks are the tagged processes with a `RANK` in their environment (torchrun sets
it for its workers, never for itself). A stopped rank (state T) is read with
`--nonblocking`, which needs no ptrace stop. Every line it prints carries the nonce;
py-spy's output travels base64-encoded. With a run dir, the ranks' Flight Recorder
dumps are asked for first, while py-spy runs: NCCL dumps when a line is written to its
debug-info pipe (TORCH_NCCL_DEBUG_INFO_PIPE_FILE followed by the rank and `.pipe`;
launch.sh points it into the run dir and says where in `fr/where`). A stopped rank is
not asked (it cannot dump); a dead one's pipe has no reader, so each write is bounded
by a 1-second timeout, all pipes at once, and the dumps are waited for within
WAIT_TENTHS at the end.
"""

from __future__ import annotations

import secrets
import shlex

from mntui.sessions.node.sentinel.stackcap import SCRIPT
from mntui.sessions.procs import SHELL_LIB, run_dir_word

WAIT_TENTHS = 15  # a NCCL monitor thread reads its pipe about once a second


def capture_script(
    pattern: str,
    budget: float,
    nonce: str,
    run_dir: str | None = None,
    nonblocking: bool = False,
) -> str:
    """py-spy is looked up on the node's PATH and on the PATH the ranks themselves run
    with (the job's environment after `setup`: a venv activated there). With `run_dir`,
    the ranks' Flight Recorder dumps are asked for first, while py-spy runs.
    `nonblocking`: every rank is read without stopping it (a sampler's choice: a torn
    read is a failed dump); otherwise only a stopped one, and a running rank's stack is
    read whole."""
    dir_word = run_dir_word(run_dir) if run_dir else None
    return _script(shlex.quote(pattern), budget, nonce, dir_word, nonblocking)


def node_capture_script(budget: float, nonce: str) -> str:
    """The same script for a cluster's sentinel, which runs it as `sh stacks.sh PATTERN
    RUN_DIR`: the attempt's tag pattern and its run dir (absolute) are its arguments,
    so one script serves every attempt of the chain, each with its own tag."""
    return "cap_pattern=$1 cap_dir=$2\n" + _script(
        '"$cap_pattern"', budget, nonce, '"$cap_dir"', nonblocking=False
    )


def _script(
    pattern_word: str, budget: float, nonce: str, dir_word: str | None, nonblocking: bool
) -> str:
    m = f"@{nonce}"
    running = "--nonblocking" if nonblocking else ""
    limit = max(1, int(budget))
    ask = ask_snippet(dir_word) if dir_word else ""
    wait = wait_snippet(m) if dir_word else ""
    return f"""{SHELL_LIB}
pids=$(mntui_scan {pattern_word} | tr '\\n' ' ')
{ask}spy=$(command -v py-spy 2>/dev/null)
for p in $pids; do
  [ -n "$spy" ] && break
  jobpath=$(tr '\\0' '\\n' 2>/dev/null <"/proc/$p/environ" | sed -n 's/^PATH=//p')
  spy=$(PATH="$jobpath" command -v py-spy 2>/dev/null)
done
if [ -z "$spy" ]; then echo "{m}NOSPY"; pids=; fi
tmp=$(mktemp -d) || exit 1
for p in $pids; do
  rank=$(tr '\\0' '\\n' 2>/dev/null <"/proc/$p/environ" | sed -n 's/^RANK=\\([0-9]*\\)$/\\1/p')
  [ -n "$rank" ] || continue
  read -r s 2>/dev/null <"/proc/$p/stat" || continue
  s=${{s#*) }}; st=${{s%% *}}
  case $st in T|t) nb=--nonblocking ;; *) nb={running} ;; esac
  echo "{m}RANK $p $rank $st"
  ( timeout {limit} "$spy" dump --json $nb --pid "$p" >"$tmp/$p.out" 2>"$tmp/$p.err"
    echo $? >"$tmp/$p.rc" ) &
done
wait
for f in "$tmp"/*.rc; do
  [ -f "$f" ] || continue
  p=${{f##*/}}; p=${{p%.rc}}
  out=$(base64 -w0 <"$tmp/$p.out"); err=$(head -c 600 "$tmp/$p.err" | base64 -w0)
  echo "{m}STACK $p $(cat "$f") $out $err"
done
rm -rf "$tmp"
{wait}"""


def stack_files(budget: float, nonce: str) -> str:
    """Shell, in a node's start script (`$d` its run dir): the sentinel's capture script,
    written where it looks for it (node/sentinel/stackcap.py: SCRIPT)."""
    eof = "__MNTUI_STACKS_" + secrets.token_hex(8) + "__"
    script = node_capture_script(budget, nonce).rstrip("\n")
    return f"umask 077\ncat >\"$d/{SCRIPT}\" <<'{eof}'\n{script}\n{eof}\n"


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
