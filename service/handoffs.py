"""The handoff commands and queries as a caller makes them.

Who may see or resolve a handoff lives here once; the REST resources only translate HTTP to these
calls. A command's inbox rows commit with its events, so its caller reads its own write at once.
"""

from __future__ import annotations

from uuid import UUID

from titen.domain.errors import Forbidden, NotFound
from titen.domain.handoff import Handoff, public_id
from titen.domain.ids import HANDOFF, to_uuid
from titen.projections.handoff_directory import HandoffDirectory
from titen.projections.inbox import Inbox, PendingHandoff
from titen.service import metrics
from titen.service.application import Keep, Titen
from titen.service.keys import Keys, Principal
from titen.service.roles import WHOLE_LOG


class HandoffService:
    def __init__(self, app: Titen, inbox: Inbox, directory: HandoffDirectory, keys: Keys):
        self.app = app
        self.inbox = inbox
        self.directory = directory
        self.keys = keys

    def create(
        self,
        caller: Principal,
        *,
        to_principal: str,
        subject_id: str,
        context_id: str | None,
        checkpoint_id: str | None,
        message: str | None,
        keep: Keep = None,
    ) -> Handoff:
        """A pending handoff from the caller to another principal of its organization;
        `keep(handoff)` is stored with the events (an idempotent request's answer)."""
        committed = self.app.create_handoff(
            organization=caller.organization,
            from_principal=caller.name,
            to_principal=to_principal,
            subject_id=subject_id,
            context_id=context_id,
            checkpoint_id=checkpoint_id,
            message=message,
            is_principal=lambda name: self.keys.is_principal(caller.organization, name),
            keep=keep,
        )
        metrics.HANDOFFS_CREATED.inc()
        return committed.value

    def pending(
        self, caller: Principal, *, after: int, limit: int, subject_id: str | None
    ) -> list[PendingHandoff]:
        """The caller's inbox: what others handed to it, never what it sent."""
        return self.inbox.pending(
            caller.organization, caller.name, after=after, limit=limit, subject_id=subject_id
        )

    def pending_in_organization(
        self, caller: Principal, *, after: int, limit: int, to_principal: str | None
    ) -> list[PendingHandoff]:
        """Every pending handoff of the caller's organization, oldest first; refused to an
        agent, which sees only its own inbox."""
        if not caller.reads_organization:
            readers = " or ".join(WHOLE_LOG)
            raise Forbidden(f"The organization's handoffs need the {readers} role.")
        return self.inbox.organization_pending(
            caller.organization, after=after, limit=limit, to_principal=to_principal
        )

    def get(self, caller: Principal, handoff_id: str) -> Handoff:
        """One handoff in any status, for its sender and its target; to anyone else, missing."""
        missing = f"No handoff {handoff_id}."
        handoff = self.app.get_handoff(self._key(caller, handoff_id, missing), missing)
        if not handoff.visible_to(caller.organization, caller.name):
            raise NotFound(missing)
        return handoff

    def resolve(
        self, caller: Principal, handoff_id: str, *, accept: bool, keep: Keep = None
    ) -> Handoff:
        """Accept or reject, once, as the target (`keep` as for `create`)."""
        committed = self.app.resolve_handoff(
            organization=caller.organization,
            key=self._key(caller, handoff_id, f"No pending handoff {handoff_id}."),
            by=caller.name,
            accept=accept,
            keep=keep,
        )
        metrics.HANDOFFS_RESOLVED.labels(committed.value.status).inc()
        return committed.value

    def _key(self, caller: Principal, handoff_id: str, missing: str) -> UUID:
        """The aggregate id inside a handoff id of the caller's organization, accepted in its
        canonical (lowercase) form only.

        The directory is asked first, by organization, so an id of another organization's
        aggregate (or of no handoff at all) is missing before any event is read."""
        key = to_uuid(HANDOFF, handoff_id)
        if key is None or public_id(key) != handoff_id:
            raise NotFound(missing)
        if not self.directory.belongs_to(handoff_id, caller.organization):
            raise NotFound(missing)
        return key
