"""The node package as one file on each node: built here, checked and shipped over SSH;
and the interpreter that runs it there.

A sentinel runs on the node's own `python3 -I -S` (or, where that one is missing or
older than 3.9, the interpreter the job's `setup` provides: `sentinel_python`), where
nothing of ours is installed, so
`sessions/node/*.py` travels as a zipapp named by its hash (`~/.mntui/sentinel/<sha>.pyz`):
a node that has this version already is not sent it again, and two versions never
overwrite each other under a running sentinel.

The archive is a pure function of the sources (sorted names, fixed times and modes), so
its name only changes when the code does. The modules sit under `mntui/sessions/node/`
beside empty `mntui/__init__.py` and `mntui/sessions/__init__.py`: the node code has the
same module names on both sides (tracebacks, tests and `python -m` agree), and the real
`mntui.sessions` package, free to import anything of the manager's, never runs on a node.
The bytes depend on this machine's zlib (deflate output is not standardised): the node
checks them against the digest computed here, so only the name, never the check, relies
on two managers agreeing.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import re
import secrets
import shlex
import zipfile
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from mntui.sessions import node as node_package
from mntui.sessions.termsafe import one_line

MIN_PYTHON = (3, 9)
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can hold
# Before anything of the package is read: an older python3 (3.6, 2.7: it cannot even
# parse the package) says so in one line and exit code 3, which a kill tries the next
# interpreter on (launch/kill.py).
_ROOT_MAIN = b"""import sys

if sys.version_info < (3, 9):
    sys.stdout.write("NODE_PYTHON %d.%d: 3.9 or later needed\\n" % sys.version_info[:2])
    sys.exit(3)

from mntui.sessions.node.__main__ import main

sys.exit(main(sys.argv[1:]))
"""
_STUBS = ("mntui/__init__.py", "mntui/sessions/__init__.py")
_INNER = "mntui/sessions/node/"


@dataclass(frozen=True)
class Bundle:
    data: bytes
    sha: str  # sha256 of data, first 16 hex digits: the file's name on nodes

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def _entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.create_system = 3  # unix, so that the mode below is read as one
    info.external_attr = 0o100644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def build(source: Path) -> Bundle:
    """The zipapp of `source/**/*.py`, byte for byte the same for the same sources."""
    files = {  # the package and its sub-packages (node/'s roles), never a cache
        _INNER + p.relative_to(source).as_posix(): p.read_bytes()
        for p in source.rglob("*.py")
        if "__pycache__" not in p.parts
    }
    files |= dict.fromkeys(_STUBS, b"") | {"__main__.py": _ROOT_MAIN}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name in sorted(files):
            z.writestr(_entry(name), files[name], compresslevel=9)
    data = out.getvalue()
    return Bundle(data, hashlib.sha256(data).hexdigest()[:16])


@functools.cache
def bundle() -> Bundle:
    return build(Path(node_package.__file__ or "").parent)


def remote_path(sha: str) -> str:
    """Relative to the node user's home."""
    return f".mntui/sentinel/{sha}.pyz"


# The digest: coreutils' sha256sum where the node has it, else the interpreter that will
# run the bundle (`py`, the script's word for it; a kill may run it on another one:
# launch/kill.py).
def _sum(py: str) -> str:
    return f"""mntui_sum() {{
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum <"$1" 2>/dev/null | cut -d' ' -f1
  else
    {py} -I -S -c 'import hashlib, sys
print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$1" 2>/dev/null
  fi
}}"""


def _head(b: Bundle, py: str) -> str:
    return f"""umask 077
sha={b.sha}
f="$HOME/{remote_path(b.sha)}"
{_sum(py)}"""


def presence_script(b: Bundle, py: str = "python3") -> str:
    """`SENTINEL_BUNDLE <sha> present|absent`: a file that is there but not these bytes
    is absent (a half-written or edited one is shipped again, never run). `py`: the
    shell word of the interpreter that will run it."""
    return f"""(
{_head(b, py)}
if [ -f "$f" ] && [ "$(mntui_sum "$f")" = {b.digest} ]; then
  echo "SENTINEL_BUNDLE $sha present"
else
  echo "SENTINEL_BUNDLE $sha absent"
fi
)"""


def ship_script(b: Bundle, py: str = "python3") -> str:
    """Writes the bundle unless it is there: the bytes travel in a heredoc (never argv:
    no `ps` shows them, no ARG_MAX applies) to a private temp file in the 0700 directory,
    are checked and only then renamed into place, so a reader never sees half a file.
    `py`: the shell word of the interpreter that will run it (and takes the digest)."""
    end = f"MNTUI_PYZ_{secrets.token_hex(8)}"  # `_` is outside base64's alphabet too
    text = base64.encodebytes(b.data).decode()
    return f"""(
{_head(b, py)}
sdir="${{f%/*}}"
t="$sdir/.$sha.pyz.$$"
if [ -f "$f" ] && [ "$(mntui_sum "$f")" = {b.digest} ]; then
  echo "SENTINEL_BUNDLE $sha present"
elif ! command -v {py} >/dev/null 2>&1 && ! command -v sha256sum >/dev/null 2>&1; then
  echo "SENTINEL_BUNDLE $sha failed no python3 nor sha256sum"
elif ! mkdir -p "$sdir" || ! chmod 700 "$sdir"; then
  echo "SENTINEL_BUNDLE $sha failed cannot make ~/.mntui/sentinel"
elif ! base64 -d >"$t" <<'{end}'
{text}{end}
then
  rm -f "$t"
  echo "SENTINEL_BUNDLE $sha failed base64 -d"
elif [ "$(mntui_sum "$t")" != {b.digest} ]; then
  rm -f "$t"
  echo "SENTINEL_BUNDLE $sha failed checksum mismatch"
elif ! mv -f "$t" "$f"; then
  rm -f "$t"
  echo "SENTINEL_BUNDLE $sha failed cannot move into place"
else
  echo "SENTINEL_BUNDLE $sha shipped"
fi
)"""


class ShipState(StrEnum):
    PRESENT = "present"
    ABSENT = "absent"
    SHIPPED = "shipped"
    FAILED = "failed"


@dataclass(frozen=True)
class ShipAnswer:
    state: ShipState
    why: str | None  # FAILED only: the node's reason, or what was wrong with its answer


SHIP_LINE = re.compile(r"SENTINEL_BUNDLE ([0-9a-f]{16}) (present|absent|shipped|failed)(?: (.+))?")


def parse_ship(text: str, sha: str) -> ShipAnswer:
    """The one `SENTINEL_BUNDLE` line of a presence or ship script. Anything else (no
    line, two lines, another bundle's, a reason where none belongs) is a failure whose
    why says so: a node's answer never makes a bundle count as there."""
    lines = [line for line in text.splitlines() if line.startswith("SENTINEL_BUNDLE")]
    if len(lines) != 1:
        return ShipAnswer(ShipState.FAILED, f"{len(lines)} SENTINEL_BUNDLE lines in the answer")
    m = SHIP_LINE.fullmatch(lines[0])
    has_why = m is not None and m[3] is not None
    if m is None or m[1] != sha or has_why != (m[2] == "failed"):
        return ShipAnswer(ShipState.FAILED, f"unexpected answer: {one_line(lines[0], 120)}")
    state = ShipState(m[2])
    return ShipAnswer(state, one_line(m[3], 200) if state is ShipState.FAILED else None)


# The bare `python3` a sentinel would run on, its major.minor or nothing: the one probe,
# asked in a launch's preflight (python_check_script) and in the doctor's (its SENTPY).
PY_VERSION = """python3 -I -S -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null"""


def python_check_script() -> str:
    """`PY <major>.<minor>` of the node's `python3`, or `PY none`."""
    return f"""v=$({PY_VERSION})
case $v in
  [0-9]*.[0-9]*) echo "PY $v" ;;
  *) echo "PY none" ;;
esac"""


_PY_LINE = re.compile(r"PY (?:(\d{1,3})\.(\d{1,3})|none)")


def parse_python(text: str) -> tuple[int, int] | None:
    """The node's python3 version; None when it has none or its answer does not parse."""
    lines = [line for line in text.splitlines() if line.startswith("PY ")]
    m = _PY_LINE.fullmatch(lines[0]) if len(lines) == 1 else None
    if m is None or m[1] is None:
        return None
    return int(m[1]), int(m[2])


def sentinel_usable(version: tuple[int, int] | None) -> bool:
    return version is not None and version >= MIN_PYTHON


def sentinel_python(enter: str) -> str:
    """Shell defining `mntui_py`, which prints the shell word of the interpreter a
    sentinel runs on here, or nothing: the node's bare `python3` when it is 3.9 or
    later, else the first of `python3`, `python` that the job's environment (`enter`:
    nodeplan.job_environment, the workdir and `setup`, under bash as launch.sh enters
    it, its output dropped) finds, by its absolute path, that runs 3.9 or later outside
    it, as the bare one runs (a respawn starts it again the same way: sys.executable).
    The one rule: the launch's preflight asks it, every watch block asks it again
    before it starts anything, and the doctor's probe asks it too."""
    check = f"import sys; sys.exit(sys.version_info < {MIN_PYTHON})"
    found = f"{{\n{enter}\n}} >/dev/null 2>&1 </dev/null\ncommand -v python3\ncommand -v python\n"
    return f"""mntui_pyok() {{
  "$1" -I -S -c {shlex.quote(check)} </dev/null >/dev/null 2>&1
}}
mntui_py() {{
  if mntui_pyok python3; then echo python3; return 0; fi
  bash -c {shlex.quote(found)} 2>/dev/null </dev/null | while IFS= read -r p; do
    case $p in /*) if mntui_pyok "$p"; then printf '%s\\n' "$p"; break; fi ;; esac
  done
}}"""


def sentinel_python_check(enter: str) -> str:
    """`SENTPY <word>`: the interpreter a sentinel would run on (`python3`, a setup's
    absolute path), or `SENTPY` alone: none."""
    return f"{sentinel_python(enter)}\nprintf 'SENTPY %s\\n' \"$(mntui_py)\"\n"


_PATH = re.compile(r"/[^\x00-\x1f\x7f]{0,4095}")


def sentinel_word(word: str) -> str | None:
    """`mntui_py`'s answer as this machine takes it: `python3`, an absolute path (node
    text: printable, bounded), or None (none, or an answer that is neither)."""
    word = word.strip()
    return word if word == "python3" or _PATH.fullmatch(word) else None


def parse_sentinel_python(text: str) -> str | None:
    """The interpreter the one `SENTPY` line names (sentinel_word), or None."""
    lines = [line for line in text.splitlines() if line.startswith("SENTPY")]
    return sentinel_word(lines[0].removeprefix("SENTPY")) if len(lines) == 1 else None
