"""A run on its nodes: the plan (plan.py), starting it and waiting until it is ready
(start.py, startchecks.py), its tmux sessions, attach, log reads, the kill (kill.py; a
user's: userkill.py), freeing its ports (ports.py) and where the run's chain is
(chains.py). Imports sync and below; never what polls, reports or watches.
"""

from typing import TYPE_CHECKING

from mntui.sessions.exports import lazy_exports

if TYPE_CHECKING:
    from .attach import attach_all_argv as attach_all_argv
    from .attach import attach_argv as attach_argv
    from .board import BoardView as BoardView
    from .board import board_dir as board_dir
    from .board import read_board as read_board
    from .chains import ChainView as ChainView
    from .chains import chain_of as chain_of
    from .chains import check_nodes as check_nodes
    from .chains import run_config as run_config
    from .kill import kill_job as kill_job
    from .kill import not_clean as not_clean
    from .kill import summarize as summarize
    from .logs import LineSplitter as LineSplitter
    from .logs import LogChunk as LogChunk
    from .logs import last_lines as last_lines
    from .logs import parse_read as parse_read
    from .logs import read_new as read_new
    from .logs import read_script as read_script
    from .nodeplan import home_path as home_path
    from .nodeplan import job_environment as job_environment
    from .plan import Plan as Plan
    from .plan import describe as describe
    from .ports import free_ports as free_ports
    from .ports import port_holders as port_holders
    from .ports import still_held as still_held
    from .start import launch as launch
    from .start import make_plan as make_plan
    from .start import master_addr as master_addr
    from .tmux import PaneStatus as PaneStatus
    from .tmux import format_pane_status as format_pane_status
    from .tmux import has_session as has_session
    from .tmux import no_pane as no_pane
    from .tmux import pane_status as pane_status
    from .tmux import parse_pane_status as parse_pane_status
    from .tmux import session_name as session_name
    from .userkill import stop_job as stop_job
else:
    __getattr__ = lazy_exports(__name__, __file__)
