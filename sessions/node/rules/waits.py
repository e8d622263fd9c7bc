"""Whether a Python stack waits in a collective: the one test, for the manager's report
and sampler and for the cluster's sentinels.

Why on the node: a sentinel samples its own ranks' stacks (spysample.py) and sends the
coordinator only "waiting or not" per rank; if it judged a stack by a rule of its own,
the cluster and the manager would name different stragglers from the same job. So the
test (`waits_in`), the frame it reads (`Frame`) and the parser of one py-spy dump
(`main_frames`, and `record_waits` for a py-spy record of many samples) live here,
stdlib only; report/consensus.py and report/stacks.py re-export them.

`waits_in`: the outermost torch.distributed entry point on the stack (`all_reduce`,
`barrier`, `wait_tensor`…), or, innermost, the autograd engine or DDP's buffer sync,
whose collectives run in C++ out of Python's sight. A function of that name in any
other file (the user's own `all_reduce`) is no wait.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .termsafe import one_line

# torch.distributed's blocking entry points, by the module that defines them: a frame of
# one of these functions in one of these files means the rank waits for its peers.
C10D = frozenset({
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor",
    "all_gather_object", "all_gather_coalesced", "_all_gather_base", "reduce",
    "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all",
    "all_to_all_single", "broadcast", "broadcast_object_list", "barrier",
    "monitored_barrier", "gather", "gather_object", "scatter", "scatter_object_list",
    "send", "recv", "isend", "irecv", "send_object_list", "recv_object_list",
    "batch_isend_irecv", "wait", "wait_tensor", "new_group", "init_process_group",
})  # fmt: skip
_TORCH_DIST = re.compile(r"(^|/)torch/distributed/.+\.py\Z")
# Where the collectives run out of Python's sight: DDP and FSDP all-reduce gradients
# inside the autograd engine, and DDP broadcasts buffers from C++; the innermost Python
# frame is then one of these. (file pattern, function) -> the name the report uses.
HIDDEN = (
    (re.compile(r"(^|/)torch/autograd/graph\.py\Z"), "_engine_run_backward", "backward"),
    (re.compile(r"(^|/)torch/nn/parallel/distributed\.py\Z"), "_sync_buffers", "DDP _sync_buffers"),
    (re.compile(r"(^|/)torch/nn/parallel/distributed\.py\Z"), "_sync_module_buffers",
     "DDP _sync_module_buffers"),
    (re.compile(r"(^|/)torch/nn/parallel/distributed\.py\Z"), "_default_broadcast_coalesced",
     "DDP _default_broadcast_coalesced"),
)  # fmt: skip
_TORCH = re.compile(r"(^|/)torch/")
LIBRARY = re.compile(r"(site-packages|dist-packages|/lib/python3\.\d+/|^<frozen )")
# Waits of a job still starting: the last rank to join waits least there, and that says
# nothing about its steps (a straggler's sample is no sample then).
STARTING = frozenset({"init_process_group", "new_group"})

MAX_SPY = 8 * 1024 * 1024  # one rank's py-spy JSON: every thread's stack
MAX_FRAMES = 512
MAX_SAMPLES = 4096  # samples of one rank in one py-spy record
MAX_NAME = 256  # a function's name
MAX_PATH = 4096  # a file's


@dataclass(frozen=True)
class Frame:
    name: str
    file: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}"


@dataclass(frozen=True)
class Wait:
    """A stack waiting in a collective: which one, and the user's line that called it."""

    collective: str
    call: Frame | None

    @property
    def site(self) -> str:
        return self.call.where if self.call is not None else "?"


def waits_in(frames: Sequence[Frame]) -> Wait | None:
    """The collective this stack (innermost frame first) waits in, or None: the
    outermost torch.distributed entry point, or, innermost, the autograd engine or DDP's
    buffer sync (HIDDEN), and the first frame outside torch and the libraries that
    called it."""
    hit, name = None, ""
    for i, f in enumerate(frames):
        if _bare(f.name) in C10D and _TORCH_DIST.search(f.file):
            hit, name = i, _bare(f.name)
    if hit is None and frames:
        inner = frames[0]
        found = (
            label for rx, fn, label in HIDDEN if _bare(inner.name) == fn and rx.search(inner.file)
        )
        name = next(found, "")
        hit = 0 if name else None
    if hit is None:
        return None
    return Wait(name, user_frame(frames[hit + 1 :]))


def sample_of(frames: Sequence[Frame]) -> bool | None:
    """One straggler sample: True when the stack waits in a collective, False when it
    works; None when it says nothing (no stack: a failed dump is no evidence of work;
    a wait of a job still joining, STARTING)."""
    if not frames:
        return None
    wait = waits_in(frames)
    if wait is not None and wait.collective in STARTING:
        return None
    return wait is not None


def _bare(name: str) -> str:
    """py-spy names a method by its qualified name: `DistributedDataParallel._sync_buffers`."""
    return name.rsplit(".", 1)[-1]


def user_frame(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame of the user's own code (not torch, not site-packages)."""
    return next(
        (f for f in frames if not LIBRARY.search(f.file) and not _TORCH.search(f.file)), None
    )


def main_frames(dump: str) -> tuple[tuple[Frame, ...], str | None]:
    """The main thread's frames (innermost first) of one `py-spy dump --json`, or () and
    why not. The dump is the node's data: bounded, parsed strictly, its names made safe
    for a terminal (they reach the report's headline)."""
    if len(dump) > MAX_SPY:
        return (), "py-spy output too long"
    try:
        threads = json.loads(dump)
    except (ValueError, RecursionError):  # RecursionError: arrays nested too deep
        return (), "unreadable py-spy output"
    if not isinstance(threads, list) or not threads:
        return (), "py-spy found no Python thread"
    main = next(
        (t for t in threads if isinstance(t, dict) and t.get("thread_name") == "MainThread"),
        threads[0],
    )
    frames = []
    listed = main.get("frames", []) if isinstance(main, dict) else []
    for f in listed[:MAX_FRAMES] if isinstance(listed, list) else []:
        if isinstance(f, dict) and type(f.get("line")) is int and 0 <= f["line"] < 2**31:
            name, file = _text(f.get("name"), MAX_NAME), _text(f.get("filename"), MAX_PATH)
            frames.append(Frame(name, file, f["line"]))
    return tuple(frames), None if frames else "empty stack"


def record_waits(record: str) -> str:
    """One rank's samples in order, from a `py-spy record --format speedscope` of it: "1"
    a sample of its main thread waiting in a collective, "0" working, "-" saying nothing
    (sample_of's None, or a sample not of our shape). Empty when the record is not one:
    it is the node's data, bounded and parsed strictly like a dump."""
    if len(record) > MAX_SPY:
        return ""
    try:
        data = json.loads(record)
        frames, profiles = data["shared"]["frames"], data["profiles"]
    except (ValueError, RecursionError, TypeError, KeyError):
        return ""
    if not isinstance(frames, list) or not isinstance(profiles, list) or not profiles:
        return ""
    named = [p for p in profiles if isinstance(p, dict) and str(p.get("name", "")).endswith(
        '"MainThread"')]  # fmt: skip
    main = named[0] if named else profiles[0]
    samples = main.get("samples") if isinstance(main, dict) else None
    if not isinstance(samples, list):
        return ""
    table = [_frame(f) for f in frames]
    seen: dict[tuple[int, ...], str] = {}
    out = []
    for sample in samples[:MAX_SAMPLES]:
        key = tuple(sample[:MAX_FRAMES]) if isinstance(sample, list) else ()
        if key not in seen:
            seen[key] = _verdict(key, table)
        out.append(seen[key])
    return "".join(out)


def _frame(f: object) -> Frame | None:
    if not isinstance(f, dict) or type(f.get("line")) is not int or not 0 <= f["line"] < 2**31:
        return None
    return Frame(_text(f.get("name"), MAX_NAME), _text(f.get("file"), MAX_PATH), f["line"])


def _verdict(sample: tuple[object, ...], table: list[Frame | None]) -> str:
    """A speedscope sample lists its frames outermost first, by index into `table`."""
    frames = []
    for i in reversed(sample):
        f = table[i] if type(i) is int and 0 <= i < len(table) else None
        if f is None:
            return "-"
        frames.append(f)
    v = sample_of(frames)
    return "-" if v is None else "1" if v else "0"


def _text(v: object, limit: int) -> str:
    """A name py-spy gave, safe to show; "?" for one that is no string."""
    return one_line(v, limit) if isinstance(v, str) else "?"
