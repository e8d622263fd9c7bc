"""What runs on the nodes: the sentinel that watches a node's ranks and the coordinator
on the main node that judges the whole job (issue 30).

Why a wing of its own: this package is shipped to nodes over SSH as a zipapp and runs
on the node's bare `python3 -I -S` (3.9 or later), where nothing of ours is installed.
So it imports only itself and the standard library (an import contract and a test hold
that), and the manager imports the rules from here rather than the other way round:
one judge, used on both sides.
"""
