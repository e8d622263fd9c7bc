"""The rules both sides run (the manager imports them from here): node states and
the judge, steps and stalls, restarts and placement, stragglers and slow nodes, the
first failure and the log's causes, GPUs held, chain states, what a notice says, and
node text made safe for a terminal."""
