# shellcheck shell=sh
# mntui's shell library, inlined at the top of every script mntui runs on a node
# (sessions/procs.py loads it once). It runs under sh, dash on Debian: POSIX only.
#
# Builtins wherever a loop runs once per process (`read` of /proc files, not `cat`):
# on a 64-node kill every spawned process is paid 64 times.
#
# Node data is never protocol. What a process chose for itself (its command line, its
# name) or what a name service says (a user name) is printed base64-encoded, numbers
# are printed as they are, and only with printf '%s' (dash's echo expands backslashes,
# so `echo "$x"` would let a `\n` inside $x start a record of its own).
#
# Functions set only variables whose names start with `_`; a caller keeps its own
# names free of that prefix.

# mntui_stat PID -> _s holds the fields of /proc/PID/stat after "(comm) ", state first.
# comm (at most 15 bytes) may itself hold ") ": cut at the first ") ", then again while
# one is left, since no field after comm has a parenthesis. `${_s##*) }` would do it in
# one step, but dash's longest match is quadratic in the line: 1 ms a process. A comm
# with a newline leaves a line with no ") " at all: _s is then not a stat line, which
# callers treat as "alive, unreadable" (never as gone).
mntui_stat() {
  read -r _s 2>/dev/null <"/proc/$1/stat" || return 1  # 2> first: a gone PID says nothing
  while :; do
    case $_s in
      *") "*) _s=${_s#*) } ;;
      *) return 0 ;;
    esac
  done
}

# Our own PID and its ancestors: a scan must never find the script that runs it.
mntui_self=" "
_p=$$
while [ "${_p:-0}" -gt 1 ] 2>/dev/null; do
  mntui_self="$mntui_self$_p "
  mntui_stat "$_p" || break
  # shellcheck disable=SC2086 # split on purpose: the stat fields, ppid second
  set -- $_s
  _p=$2
done

# mntui_scan PATTERN -> one PID a line: the user's processes whose environment holds
# a NUL-separated entry matching PATTERN (grep -E, whole entry), never this script or
# its ancestors.
mntui_scan() {
  grep -lzxE -- "$1" /proc/[0-9]*/environ 2>/dev/null | while IFS= read -r _f; do
    _p=${_f#/proc/}
    _p=${_p%/environ}
    # shellcheck disable=SC3067 # dash's, bash's and busybox's test all have -O
    [ -O "/proc/$_p" ] || continue
    case "$mntui_self" in *" $_p "*) continue ;; esac
    echo "$_p"
  done
}

# mntui_alive PID... -> those that still exist and are not zombies, one a line.
mntui_alive() {
  for _p in "$@"; do
    mntui_stat "$_p" || continue
    case "$_s" in Z\ * | X\ *) continue ;; esac
    echo "$_p"
  done
}

# mntui_any_alive PID... -> true while one of them is alive.
mntui_any_alive() {
  [ -n "$(mntui_alive "$@")" ]
}

mntui_now_ms() { echo $(($(date +%s%N) / 1000000)); }

# mntui_wait_while MS COMMAND [ARG...] -> runs COMMAND every 50 ms while it succeeds,
# for at most MS milliseconds. COMMAND must not itself call mntui_wait_while.
mntui_wait_while() {
  _wend=$(($(mntui_now_ms) + $1))
  shift
  while "$@" && [ "$(mntui_now_ms)" -lt "$_wend" ]; do sleep 0.05; done
}

# mntui_stop GRACE_MS PID... -> SIGCONT (a stopped process cannot act on SIGTERM) and
# SIGTERM, up to GRACE_MS for them to exit, SIGKILL for the rest, which are printed as
# "SIGKILL PID...".
mntui_stop() {
  _grace=$1
  shift
  [ "$#" -gt 0 ] || return 0
  kill -CONT "$@" 2>/dev/null
  kill -TERM "$@" 2>/dev/null
  mntui_wait_while "$_grace" mntui_any_alive "$@"
  _left=$(mntui_alive "$@")
  [ -n "$_left" ] || return 0
  # shellcheck disable=SC2086 # PIDs, one a word
  kill -KILL $_left 2>/dev/null
  # shellcheck disable=SC2086 # PIDs, one a word
  echo SIGKILL $_left
}

# mntui_b64 FILE -> the first 300 bytes of FILE, base64 on one line (nothing if unreadable).
mntui_b64() {
  head -c 300 "$1" 2>/dev/null | base64 -w0
}

# mntui_procinfo PID... -> "PROC PID STATE CMDLINE64" for each that exists.
mntui_procinfo() {
  for _p in "$@"; do
    mntui_stat "$_p" || continue
    printf 'PROC %s %s %s\n' "$_p" "${_s%% *}" "$(mntui_b64 "/proc/$_p/cmdline")"
  done
}

# mntui_port_pids PORT... -> "PID UID" for each socket listening on one of the PORTs,
# per `ss -pe`: the PID of its (last) owner, or "-" when ss shows none (a process of
# another user, hidden from us), and the socket's owner uid, which the kernel gives even
# then ("-" on a line of no known shape). The line is read from its start, field by
# field: a process name (in users:((...)), cut by ss at its first ')') or a cgroup path
# (after sk:) can hold "pid=" or "uid:", but never where a field of ss's own stands.
mntui_port_pids() {
  for _port in "$@"; do
    ss -Hltnpe "sport = :$_port" 2>/dev/null | sed -n '
      s/^[^ ]*  *[0-9]*  *[0-9]*  *[^ ]*  *[^ ]*  *//
      t head
      s/.*/- -/p
      d
      :head
      s/^users:(\(([^)]*),\)*("[^)]*",pid=\([0-9][0-9]*\),fd=[0-9][0-9]*)) /\2 /
      t pid
      s/^/- /
      t pid
      :pid
      s/^\([0-9-][0-9]*\) uid:\([0-9][0-9]*\) ino:[0-9][0-9]* sk:.*/\1 \2/p
      t
      s/^\([0-9-][0-9]*\) ino:[0-9][0-9]* sk:.*/\1 0/p
      t
      s/.*/- -/p'
  done
}

# mntui_holds PORT PID -> true if PID is the user's and, per ss now, listens on PORT.
mntui_holds() {
  # shellcheck disable=SC3067 # dash's, bash's and busybox's test all have -O
  [ -O "/proc/$2" ] && mntui_port_pids "$1" | grep -q -- "^$2 "
}

# mntui_listeners PORT... -> "LISTEN PORT PID USER64 CMDLINE64" for each listener on
# those ports; "LISTEN PORT - UID USER64" for one whose process we cannot see (another
# user's), named as this node's name service names its uid ("LISTEN PORT - - -": no uid).
mntui_listeners() {
  for _lport in "$@"; do
    mntui_port_pids "$_lport" | while IFS=' ' read -r _pid _uid; do
      if [ "$_pid" != - ]; then
        printf 'LISTEN %s %s %s %s\n' "$_lport" "$_pid" \
          "$(stat -c %U "/proc/$_pid" 2>/dev/null | base64 -w0)" \
          "$(mntui_b64 "/proc/$_pid/cmdline")"
      elif [ "$_uid" != - ]; then
        printf 'LISTEN %s - %s %s\n' "$_lport" "$_uid" \
          "$(getent passwd "$_uid" 2>/dev/null | cut -d: -f1 | base64 -w0)"
      else
        echo "LISTEN $_lport - - -"
      fi
    done
  done
}

# mntui_listening -> "@L PORT PID" for every listening TCP socket whose owner ss shows.
mntui_listening() {
  ss -Hltnp 2>/dev/null |
    sed -n 's/^[^ ]*  *[0-9]*  *[0-9]*  *[^ ]*:\([0-9][0-9]*\) .*pid=\([0-9][0-9]*\),fd=[0-9][0-9]*).*/@L \1 \2/p'
}
