"""Where `sync: {delete: true}` must never write: rsync --delete removes everything in
the workdir that the source lacks, so a workdir of `~` once emptied a node's home
(`.ssh`, dotfiles, other checkouts, mntui's own runs) and the launch said `synced`.

The refusal is decided three times, each where the facts are known:
- on the config text (jobchecks.workdir), for every place a workdir is written: `/`,
  the home (`~`, `~/`, `.`, `~/x/..`, or this machine's home written out), an ancestor
  of it, or a directory at, in or above mntui's own (`~/.mntui` on the nodes; the run
  records here); and a workdir the node may read otherwise than
  the checks do (`$HOME`, a glob: literal_refusal), refused again just before rsync;
- on a local node, just before rsync, on the real paths (a symlink to the home);
- on a remote node, in the same connection, just before rsync (GUARD_SCRIPT): only the
  node knows its home, so `/home/me` written out is caught there.
What stays protected inside a proper workdir (excluded and ignored paths) is sync.py's.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Sequence
from enum import StrEnum

NODE_DIR = ".mntui"  # in the node user's home: procs.RUNS_DIR lives under it

FIX = (
    "sync.delete: true deletes everything there that the source lacks: set workdir to "
    "the project's own directory (like ~/code), or drop sync.delete"
)


def _under(path: str, top: str) -> bool:
    """`path` strictly inside `top` (both absolute and normalized)."""
    return path != top and path.startswith(top.rstrip("/") + "/")


def normal(path: str) -> str:
    """An absolute path without `.`, `..` or doubled slashes (POSIX keeps a leading `//`)."""
    out = posixpath.normpath(path)
    return "/" + out.lstrip("/") if out.startswith("//") else out


def target(workdir: str, home: str) -> str:
    """The workdir as an absolute path on a machine whose home is `home`: `~` forms and
    relative paths are the home's, as sshd and mntui's scripts start there."""
    if workdir == "~" or workdir.startswith("~/"):
        return normal(posixpath.join(home, workdir[1:].lstrip("/")))
    return normal(posixpath.join(home, workdir))  # an absolute workdir ignores `home`


def refusal(path: str, home: str, owned: Sequence[str] = ()) -> str | None:
    """Why rsync --delete into `path` would delete what mntui does not own; None: it
    would not. All paths absolute and normalized; `owned`: mntui's own directories."""
    if path == "/":
        return "is /"
    if path == home:
        return "is the home directory"
    if _under(home, path):
        return "holds the home directory"
    for own in owned:
        shown = "~/" + own[len(home) + 1 :] if _under(own, home) else own
        if path == own:
            return f"is mntui's own {shown}"
        if _under(own, path):
            return f"holds mntui's own {shown}"
        if _under(path, own):
            return f"is inside mntui's own {shown}"
    return None


def _owned_here(home: str) -> list[str]:
    from mntui.sessions.errors import state_dir

    return [posixpath.join(home, NODE_DIR), str(state_dir())]


# What the node may read otherwise than written, while the checks here and the node's
# own (GUARD_SCRIPT, quoted) read it as written: `$` and backquotes, which the node's
# shell expands where rsync hands it the path (before 3.2.4, or RSYNC_OLD_ARGS=1: there
# `$HOME` is the home; rsync.py passes --protect-args against that too), and the glob
# characters and their escape, which rsync expands there even so (`*` matched `.ssh`).
_NOT_LITERAL = re.compile(r"[$`*?\[\\]")


def literal_refusal(workdir: str) -> str | None:
    """Why the node might delete in another directory than the checks saw; None: it reads
    the workdir as written."""
    m = _NOT_LITERAL.search(workdir)
    if m is None:
        return None
    return (
        f"has '{m[0]}', which the node's shell or rsync may expand to another directory "
        "than the one checked (write the path out, with ~ for the home)"
    )


def config_refusal(workdir: str) -> str | None:
    """The rule on the text, against this machine's home (as written and resolved): a
    `~` form is the home on any node; a path written out is compared with ours."""
    if (why := literal_refusal(workdir)) is not None:
        return why
    here = os.path.expanduser("~")
    for home in dict.fromkeys([normal(here), os.path.realpath(here)]):
        owned = [normal(os.path.abspath(p)) for p in _owned_here(home)]
        why = refusal(target(workdir, home), home, owned)
        if why is not None:
            return why
    return None


def local_refusal(workdir: str) -> str | None:
    """A local node, just before rsync: the real paths, symlinks resolved (a workdir that
    is a link to the home), relative to where mntui runs, as its local rsync writes."""
    home = os.path.realpath(os.path.expanduser("~"))
    path = os.path.realpath(os.path.expanduser(workdir))
    return refusal(path, home, [os.path.realpath(p) for p in _owned_here(home)])


# ---- the node's own check, in the rsync connection ---------------------------------


class Refused(StrEnum):
    HOME = "HOME"  # the workdir is the node's home
    ABOVE = "ABOVE"  # it holds the home (`/`, `/home`)
    OWN = "OWN"  # it is, or is inside, ~/.mntui


# Run by sh (any login shell runs `sh -c`) from the node's home, after `mkdir -p`, with
# $1 the workdir as rsync receives it (relative to the home, or absolute) and $2 the
# marker of our line. Physical paths (pwd -P): a workdir that is a link to the home is
# the home. Exit 0: rsync may run.
GUARD_SCRIPT = f"""unset CDPATH
m=$2
say() {{ printf '%s REFUSED %s\\n' "$m" "$1" >&2; exit 3; }}
h=$(pwd -P) && w=$(cd -- "$1" && pwd -P) || exit 3
h=${{h%/}}
w=${{w%/}}
[ "$w" = "$h" ] && say {Refused.HOME}
case "$h/" in "$w/"*) say {Refused.ABOVE} ;; esac
case "$w/" in "$h/{NODE_DIR}/"*) say {Refused.OWN} ;; esac
exit 0
"""

_LINE = re.compile(r"(\S{1,64}) REFUSED ([A-Z]{1,8})")


def parse_refused(stderr: str, marker: str) -> Refused | None:
    """Our line among a node's stderr (a login shell's noise); strict, else None."""
    for line in stderr.splitlines():
        m = _LINE.fullmatch(line.strip())
        if m and m[1] == marker and m[2] in set(Refused):
            return Refused(m[2])
    return None


def node_refusal(refused: Refused, workdir: str) -> str:
    what = {
        Refused.HOME: "is this node's home directory",
        Refused.ABOVE: "holds this node's home directory",
        Refused.OWN: f"is or is inside mntui's own ~/{NODE_DIR}",
    }[refused]
    return f"refused before rsync: workdir {workdir} {what}; {FIX}"
