"""The Flight Recorder settings launch.sh gives a job, unless its env sets them itself.

A hang is found faster when every rank has recorded its collectives. With
TORCH_FR_BUFFER_SIZE each rank keeps its last 2,000 (torch 2.13 reads it for every
backend; TORCH_NCCL_TRACE_BUFFER_SIZE, its deprecated NCCL name, is left alone: setting it
prints a warning in every rank's log). NCCL dumps them when a collective times out
(TORCH_NCCL_DUMP_ON_TIMEOUT) and when a line is written to its debug-info pipe
(TORCH_NCCL_DEBUG_INFO_PIPE_FILE, `<prefix><rank>.pipe`), into
TORCH_FR_DUMP_TEMP_FILE<rank>. Both go into the run's own directory, so a dump is this
run's and nothing lands in a shared /tmp. What the job's environment already has (the
config's `env`, the node's, `setup`'s) wins: the block runs just before the command.
`fr/where` records the two prefixes in force, for the teardown that writes the pipes and
the evidence that copies the dumps (the report wing).
"""

from __future__ import annotations

FR_DIR = "fr"
BUFFER = 2000  # torch's own default for the NCCL trace buffer


def flight_recorder_block() -> str:
    """bash, inside launch.sh, with $run_dir set."""
    return f"""# PyTorch Flight Recorder (mntui): set only what the job's environment leaves unset.
mkdir -m 700 "$run_dir/{FR_DIR}" 2>/dev/null || :
if [ -z "${{TORCH_FR_BUFFER_SIZE+x}}${{TORCH_NCCL_TRACE_BUFFER_SIZE+x}}" ]; then
  export TORCH_FR_BUFFER_SIZE={BUFFER}
fi
[ -n "${{TORCH_NCCL_DUMP_ON_TIMEOUT+x}}" ] || export TORCH_NCCL_DUMP_ON_TIMEOUT=1
if [ -z "${{TORCH_FR_DUMP_TEMP_FILE+x}}${{TORCH_NCCL_DEBUG_INFO_TEMP_FILE+x}}" ]; then
  export TORCH_FR_DUMP_TEMP_FILE="$run_dir/{FR_DIR}/rank_"
fi
[ -n "${{TORCH_NCCL_DEBUG_INFO_PIPE_FILE+x}}" ] ||
  export TORCH_NCCL_DEBUG_INFO_PIPE_FILE="$run_dir/{FR_DIR}/pipe_"
fr_dump=${{TORCH_FR_DUMP_TEMP_FILE:-${{TORCH_NCCL_DEBUG_INFO_TEMP_FILE:-/tmp/nccl_trace_rank_}}}}
printf '%s\\n' "$fr_dump" "$TORCH_NCCL_DEBUG_INFO_PIPE_FILE" >"$run_dir/{FR_DIR}/where"
""".rstrip("\n")
