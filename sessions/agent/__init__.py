"""The run's agent: the watchdog's local socket (server.py, listener.py, requests.py,
place.py) and its client (client.py): snapshots, log reads, a kill, a live report.
Imports report and below; never the watchdog that hosts it.
"""

from typing import TYPE_CHECKING

from mntui.sessions.exports import lazy_exports

if TYPE_CHECKING:
    from .client import AgentClient as AgentClient
    from .client import AgentStatus as AgentStatus
    from .client import Via as Via
    from .client import decode_status as decode_status
    from .client import fetch_status as fetch_status
    from .client import kill as kill
    from .client import live_report as live_report
    from .client import read_logs as read_logs
    from .client import try_connect as try_connect
    from .place import AgentUnavailable as AgentUnavailable
    from .server import Agent as Agent
    from .server import start_agent as start_agent
else:
    __getattr__ = lazy_exports(__name__, __file__)
