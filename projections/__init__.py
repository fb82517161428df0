"""Read models built from the event log: each can be dropped and rebuilt to the same content."""
