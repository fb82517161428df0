"""The edges: REST over Falcon, authentication, and the `titen` command line."""
