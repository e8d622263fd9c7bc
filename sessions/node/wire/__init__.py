"""What travels between the nodes and the manager: frames and their codec, the
refusals, each frame's facts, the snapshots and GPU readings, the app's feed, the watch
file the launch writes, and what every node keeps of the chain (its epoch, the chain's
copy)."""
