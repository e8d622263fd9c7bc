"""The node's half of git-mode sync (sessions/sync/gitsync.py): the sh script that receives
the commit into the clone holding the workdir and checks it out, and the parsers of
what it and git say.

Our refusals come before the checkout, most before anything is received, so they leave
the work tree as it was: a dirty tree, a detached HEAD no ref keeps, and a repository
whose history the commit does not share (the workdir not yet cloned, inside a dotfiles
repository in $HOME: checking the project out there would delete the node's own files).
git's checkout, the last step, refuses on its own terms: an untracked or an ignored file
in the way (an ignored `.env` or checkpoint directory is the node's, not git's to
overwrite), and also leaves the work tree as it was. Each is said as one line of ours
(the run's marker, a word, at most two numbers or commit ids) on stderr; the rest of a
node's output (a login shell's noise, git's own lines) is data, read only for the line
that says why.
"""

from __future__ import annotations

import itertools
import re
import shlex
from enum import StrEnum

from mntui.sessions.termsafe import clean

SYNC_REF = "refs/mntui/sync"  # the last commit checked out: it keeps that HEAD from gc
# What a push delivers: SYNC_REF moves only once the checkout is done, so a refused
# checkout never makes the HEAD it left look like work no ref keeps.
INCOMING_REF = "refs/mntui/incoming"
_ARG = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}|[0-9]{1,9}|-")

# git push runs this, in the login shell, as its --receive-pack; under sh (dash), with
# $1 the workdir, $2 the marker of our lines, $3 what to print on stdout before git's
# protocol (the relay's marker; '' locally), $4 the commit, $5 the path git appends.
# All of it in the clone's top, holding its lock: nodes that share one clone (a shared
# home) take turns, so none sees another's checkout half done; a lost connection (HUP)
# unlocks. The checkout runs in the same connection, once receive-pack is done: git
# push waits for the remote command to end, so one ssh per node does it all.
SYNC_SCRIPT = f"""m=$2
say() {{ printf '%s %s\\n' "$m" "$*" >&2; exit 3; }}
cd || say NOWORKDIR
cd -- "$1" 2>/dev/null || say NOWORKDIR
top=$(git rev-parse --show-toplevel) || say NOREPO
cd -- "$top" || say NOREPO
lock=$(git rev-parse --git-path mntui-sync.lock) || say NOREPO
n=0
until mkdir "$lock" 2>/dev/null; do
  n=$((n + 1))
  [ "$n" -lt 600 ] || say BUSY
  sleep 0.2 2>/dev/null || sleep 1
done
trap 'rmdir "$lock"' EXIT
trap 'exit 3' HUP INT TERM
changes=$(git status --porcelain --untracked-files=no) || say NOREPO
if [ -n "$changes" ]; then
  n=$(printf '%s\\n' "$changes" | wc -l)
  say DIRTY $((n))
fi
was=$(git rev-parse -q --verify HEAD) || was=-
if [ "$was" != - ] && ! git symbolic-ref -q HEAD >/dev/null &&
  [ "$was" != "$(git rev-parse -q --verify {SYNC_REF})" ]; then
  kept=$(git for-each-ref --count=1 --contains "$was" --format=x) || say NOREPO
  [ -n "$kept" ] || say ORPHAN "$was"
fi
printf %s "$3"
git-receive-pack . || exit 3
[ "$(git rev-parse -q --verify {INCOMING_REF})" = "$4" ] || exit 3
if [ "$was" != - ] && ! git merge-base "$was" "$4" >/dev/null; then
  say UNRELATED "$was"
fi
git -c advice.detachedHead=false checkout -q --no-overwrite-ignore --detach "$4" >&2 ||
  say CHECKOUT
git update-ref {SYNC_REF} "$4" || say CHECKOUT
printf '%s AT %s %s\\n' "$m" "$(git rev-parse -q --verify HEAD)" "$was" >&2
"""


class Answer(StrEnum):
    NO_WORKDIR = "NOWORKDIR"
    NO_REPO = "NOREPO"
    DIRTY = "DIRTY"  # count of changed tracked files
    ORPHAN = "ORPHAN"  # the detached HEAD no ref keeps
    UNRELATED = "UNRELATED"  # HEAD shares no history with the commit: another repository
    BUSY = "BUSY"  # another sync holds the clone's lock
    CHECKOUT = "CHECKOUT"  # git's checkout refused: its own lines say why
    AT = "AT"  # done: the commit HEAD is at, and where it was ("-": nowhere)


def parse_answer(text: str, marker: str) -> tuple[Answer, tuple[str, ...]] | None:
    """The first well-formed line of ours; a node's other output (a login shell's noise,
    a line that only looks like ours) is skipped."""
    for line in text.splitlines():
        parts = line.rstrip("\r").split(" ")
        if len(parts) < 2 or parts[0] != marker or parts[1] not in set(Answer):
            continue
        args = tuple(parts[2:])
        if len(args) <= 2 and all(_ARG.fullmatch(a) for a in args):
            return Answer(parts[1]), args
    return None


def git_error(stderr: str, marker: str) -> str:
    """One line: git's or ssh's cause, not git's closing advice or a login shell's noise.
    It is shown: the node's bytes are made terminal-safe before a line is picked
    (termsafe.py), so a line of escape sequences only is no cause."""
    stderr = clean(stderr)
    generic = (
        "fatal: Could not read from remote repository",
        "Please make sure you have the correct access",
        "and the repository exists",
        "fatal: the remote end hung up unexpectedly",
        "error: failed to push some refs",
        "Please move or remove them",
        "Aborting",
        *([marker] if marker else []),
    )
    lines = [x for x in stderr.splitlines() if x.strip()]
    causes = [x.strip() for x in lines if not x.strip().startswith(generic)]
    said = [x for x in causes if x.startswith(("error:", "fatal:", "! [", "ssh:"))]
    pick = said[0] if said else causes[-1] if causes else "no message"
    if pick.endswith(":"):  # "...would be overwritten by checkout:" then the files, indented
        after = lines[[x.strip() for x in lines].index(pick) + 1 :]
        files = [x.strip() for x in itertools.takewhile(lambda x: x.startswith("\t"), after)]
        more = f" and {len(files) - 1} more" if len(files) > 1 else ""
        pick += f" {files[0]}{more}" if files else ""
    return pick[:300]


def refusal(answer: Answer, args: tuple[str, ...], workdir: str, said: str) -> str:
    """Why a node was refused, and the fix, in its own terms; `said`: git's line."""
    if answer is Answer.NO_WORKDIR:
        return f"workdir {workdir} does not exist: clone the repository there"
    if answer is Answer.NO_REPO:
        return f"{workdir} is not in a git clone ({said}): clone it there"
    if answer is Answer.DIRTY:
        n = args[0] if args else "?"
        return (
            f"{workdir} has {n} uncommitted change(s) to tracked files; left untouched: "
            f"commit, stash or discard them there (git -C {_shell_path(workdir)} status)"
        )
    if answer is Answer.ORPHAN:
        at = args[0][:12] if args else "HEAD"
        return (
            f"{workdir} is detached at {at}, a commit no branch or tag keeps; left untouched: "
            f"keep it with git -C {_shell_path(workdir)} branch <name>"
        )
    if answer is Answer.UNRELATED:
        at = args[0][:12] if args else "HEAD"
        return (
            f"{workdir} is inside a repository whose HEAD {at} shares no history with the "
            "commit (another project, or a dotfiles repository in $HOME?); left untouched: "
            f"clone the project into {workdir}"
        )
    if answer is Answer.BUSY:
        return f"{workdir}: another sync holds .git/mntui-sync.lock; remove it if none runs"
    return f"git checkout refused: {said}"


def _shell_path(workdir: str) -> str:
    """The workdir as a person pastes it into a node's shell: quoted, ~/ still expanded."""
    home, rest = ("~/", workdir[2:]) if workdir.startswith("~/") else ("", workdir)
    return home + shlex.quote(rest) if rest else "~"
