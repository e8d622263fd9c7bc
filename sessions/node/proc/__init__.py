"""The node's own processes and files: an attempt's start and its pane, the job's
process tree, its members and its kill, listening ports, the log's tail, the daemon's
start, and the watchers keeping each other up."""
