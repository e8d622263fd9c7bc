"""The job's config: the YAML read strictly into a frozen JobConfig (jobconfig.py), the
rules of every value (checks, jobchecks, settings, yamlmarks), and the nodes it names:
a list, a hostfile or a Slurm job (nodes, nodenames, nodesource, slurmjobs), and where
`sync: {delete: true}` may never write (syncguard). Imports notify and the ground
only: reading a config never connects anywhere.
"""

from typing import TYPE_CHECKING

from mntui.sessions.exports import lazy_exports

if TYPE_CHECKING:
    from .jobchecks import compile_pattern as compile_pattern
    from .jobconfig import JobConfig as JobConfig
    from .jobconfig import load_config as load_config
    from .nodesource import SourceKind as SourceKind
    from .settings import AUTO_FLOOR as AUTO_FLOOR
    from .settings import AUTO_STEPS as AUTO_STEPS
    from .settings import Action as Action
    from .settings import GitSync as GitSync
    from .settings import HostKeyPolicy as HostKeyPolicy
    from .settings import NodeSpec as NodeSpec
    from .settings import PasswordMode as PasswordMode
    from .settings import QuarantineAfter as QuarantineAfter
    from .settings import ReadyMode as ReadyMode
    from .settings import RestartPolicy as RestartPolicy
    from .settings import SshPolicy as SshPolicy
    from .settings import SshTransport as SshTransport
    from .settings import WatchPolicy as WatchPolicy
    from .settings import WatchWhere as WatchWhere
    from .spans import format_span as format_span
    from .spans import parse_span as parse_span
    from .syncguard import FIX as FIX
    from .syncguard import GUARD_SCRIPT as GUARD_SCRIPT
    from .syncguard import literal_refusal as literal_refusal
    from .syncguard import local_refusal as local_refusal
    from .syncguard import node_refusal as node_refusal
    from .syncguard import parse_refused as parse_refused
    from .yamlmarks import ConfigError as ConfigError
else:
    __getattr__ = lazy_exports(__name__, __file__)
