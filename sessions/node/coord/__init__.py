"""The coordinator on the main node (or on the spare that succeeds a lost main):
its process, its port and the door in front of it, the straggler's and slow node's
rules over the sentinels' samples, and the app's stream (its feed and the follower
that reads it on the main)."""
