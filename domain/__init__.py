"""The domain: aggregates, their events, and the application's commands."""
