"""A run id's shape (launch/plan.py: new_run_id): the one rule, for the node side (a
watch file, an attempt's start) and this machine (runs.py re-exports it: `--run`, the
state dir's runs).

Why a module of its own: the rule is a regex, and every reader of a run record checks
it; reading it from the watch file's module loaded the judge's and the restarts'
settings into every `mntui status` too.
"""

from __future__ import annotations

import re

RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{4}\Z")
