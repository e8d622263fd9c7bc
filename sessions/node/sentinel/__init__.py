"""The sentinel on each node: its process and its side of the channel, what it
samples (stacks, GPUs, the node's snapshot), the log it ships, its word when it loses
the main and the successor it gives it to, and a worker's guard."""
