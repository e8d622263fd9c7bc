"""The chain's notifications as the coordinator sends them (the webhook, a command
on the main) and keeps them for the manager."""
