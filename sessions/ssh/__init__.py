"""The job's nodes as a Cluster (cluster.py): one persistent connection per node, local,
paramiko or OpenSSH, hosts and host keys resolved as the user's ssh does, and the
fan-out over them. Imports config and below; knows nothing of jobs or runs.
"""

from typing import TYPE_CHECKING

from mntui.sessions.exports import lazy_exports

if TYPE_CHECKING:
    from .cluster import Cluster as Cluster
    from .cluster import Node as Node
    from .sshresolve import resolve as resolve
    from .sshresolve import ssh_base_argv as ssh_base_argv
else:
    __getattr__ = lazy_exports(__name__, __file__)
