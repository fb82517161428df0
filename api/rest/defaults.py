"""Server settings' defaults, in a pure module so `titen --help` shows them without loading
the web framework."""

MAX_SUBSCRIBERS = 64
HEARTBEAT_SECONDS = 15.0
THREADS = 16
