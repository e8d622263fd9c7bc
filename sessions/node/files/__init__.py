"""A run dir's files as the node side opens them: never through a symlink, never
blocking, a regular file only (the job writes in the same dirs)."""
