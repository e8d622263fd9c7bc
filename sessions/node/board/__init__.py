"""The coordinator's board: what each sentinel said, the live channels, the files the
manager reads later, and the teardown that kills every node at once."""
