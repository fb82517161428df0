"""Domain exceptions; the HTTP edge maps each to one status in one place."""

from __future__ import annotations

from datetime import datetime


class DomainError(Exception):
    """A command was refused; nothing was recorded."""


class LeaseHeld(DomainError):
    """Another principal holds an unexpired lease; only its expiry may be told."""

    def __init__(self, expires_at: datetime):
        super().__init__(f"leased until {expires_at.isoformat()}")
        self.expires_at = expires_at


class NotFound(DomainError):
    """Unknown, already ended, or not visible to the caller: indistinguishable on purpose."""


class Forbidden(DomainError):
    """The caller's role may not do this (the message says which roles may)."""


class NotTarget(DomainError):
    """Only a handoff's target principal may resolve it."""


class InvalidField(DomainError):
    """A field is well-formed but refers to something it may not (named in the message)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class Contention(DomainError):
    """A command kept losing optimistic-concurrency races; the caller may retry."""
