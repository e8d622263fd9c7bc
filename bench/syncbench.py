"""`sync:` by git against `sync:` by rsync, same repository, same 8 fake nodes, same run.

    .venv/bin/python bench/syncbench.py --nodes 8 --mb 50 --reps 3
    .venv/bin/python bench/syncbench.py --nodes 8 --repo . --reps 3

The source is a git repository of `mb` MB of random files (benchlib.py's make_tree), one
commit, all loose objects (git's worst case: every push searches deltas and compresses
them again; --packed runs `git gc` first); or, with --repo, a fresh clone of that
repository (packed, its history).
Each repetition, interleaved (rsync first on even ones, git first on odd ones):
a first sync into fresh workdirs (rsync: an empty directory; git: an empty `git init`),
then one file changed and committed, and both again. rsync mode copies the work tree
and `.git` (so doctor's commit check agrees); git mode pushes the commit and checks it
out. Prints a markdown table; medians and min-max.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from benchlib import make_tree  # noqa: E402
from fakecluster import FakeCluster  # noqa: E402

from mntui.sessions.config.jobconfig import parse_config  # noqa: E402
from mntui.sessions.sync import sync_nodes  # noqa: E402


def git(repo: Path, *args: str) -> str:
    base = ["git", "-C", str(repo), "-c", "user.email=b@b", "-c", "user.name=b"]
    return subprocess.run([*base, *args], capture_output=True, text=True, check=True).stdout


def source(src: Path, mb: int, repo: str | None, packed: bool) -> list[Path]:
    """The repository, and the files a one-file commit may change."""
    if repo is not None:
        subprocess.run(["git", "clone", "-q", "--no-local", repo, str(src)], check=True)
        return [src / p for p in git(src, "ls-files").splitlines() if p.endswith(".py")]
    files = make_tree(src, mb)
    git(src, "init", "-q")
    git(src, "add", ".")
    git(src, "commit", "-qm", "tree")
    if packed:
        git(src, "gc", "-q")
    return files


def run(
    root: Path, n: int, mb: int, reps: int, repo: str | None, packed: bool
) -> dict[str, list[float]]:
    fc = FakeCluster(root / "nodes", n).start()
    src = root / "src"
    files = source(src, mb, repo, packed)
    nodes = ", ".join(f"node{i}" for i in range(n))
    results: dict[str, list[float]] = {}

    def cfg(mode: str, rep: int) -> object:
        sync = "{source: src, gitignore: false}" if mode == "rsync" else "{source: src, git: {}}"
        return parse_config(
            f"job: bsync\nnodes: [{nodes}]\nworkdir: ~/{mode}-{rep}\ncommand: x\n"
            f"sync: {sync}\nssh: {{config: {fc.ssh_config}}}\n",
            str(root / "job.yaml"),
        )

    try:
        for rep in range(reps):
            for node in fc.nodes:
                git(node.home, "init", "-q", f"git-{rep}")
            modes = ("rsync", "git") if rep % 2 == 0 else ("git", "rsync")
            for phase in ("first sync", "one-file commit"):
                if phase != "first sync":
                    changed = files[rep % len(files)]
                    if repo is None:
                        changed.write_bytes(os.urandom(50_000))
                    else:
                        changed.write_text(changed.read_text() + f"# change {rep}\n")
                    git(src, "commit", "-qam", f"change {rep}")
                for mode in modes:
                    loaded = cfg(mode, rep)
                    t0 = time.perf_counter()
                    stats = sync_nodes(loaded)  # type: ignore[arg-type]
                    took = time.perf_counter() - t0
                    assert len(stats) == n
                    results.setdefault(f"{phase}: {mode} mode", []).append(took)
            sha = git(src, "rev-parse", "HEAD").strip()
            for node in fc.nodes:
                assert git(node.home / f"git-{rep}", "rev-parse", "HEAD").strip() == sha
                assert git(node.home / f"rsync-{rep}", "rev-parse", "HEAD").strip() == sha
    finally:
        fc.stop()
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--repo", default=None, help="clone this repository as the source")
    ap.add_argument("--packed", action="store_true", help="`git gc` the random tree first")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mntui-syncbench-", dir=os.path.expanduser("~")))
    os.environ.setdefault("XDG_STATE_HOME", str(root / "state"))
    try:
        results = run(root, args.nodes, args.mb, args.reps, args.repo, args.packed)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    what = f"a clone of {args.repo}" if args.repo else f"{args.mb} MB of random files"
    what += ", packed (git gc)" if args.packed and not args.repo else ""
    print(f"sync, {args.nodes} fake nodes, {what}, {args.reps} reps\n")
    print("| N | measurement | median ms | min-max ms | ratio |\n|---|---|---:|---:|---:|")
    for name, vals in results.items():
        base = statistics.median(results[name.split(":")[0] + ": rsync mode"])
        med = statistics.median(vals)
        print(
            f"| {args.nodes} | {name} | {med * 1000:.0f} | "
            f"{min(vals) * 1000:.0f}-{max(vals) * 1000:.0f} | {med / base:.2f}x of rsync |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
