"""The composition root: everything a server or a command needs, built once from a URL."""

from __future__ import annotations

from dataclasses import dataclass

from eventsourcing.sqlite import SQLiteFactory

from titen.domain.clock import Clock, SystemClock
from titen.domain.cursors import Cursors
from titen.domain.mcp_sessions import SessionIds
from titen.projections.event_log import EventLog
from titen.projections.event_parties import EventParties
from titen.projections.failures import Failures
from titen.projections.handoff_directory import HandoffDirectory
from titen.projections.inbox import Inbox
from titen.projections.lease_directory import LeaseDirectory
from titen.projections.lease_index import LeaseIndex
from titen.projections.lease_terms import LeaseTerms
from titen.projections.projector import Projector
from titen.projections.recent_events import RecentEvents
from titen.projections.store import SQLiteViewStore, ViewStore
from titen.service.answers import StoredAnswers
from titen.service.application import Titen
from titen.service.auditor import Auditor
from titen.service.consumer_table import ConsumerTable, create_tables
from titen.service.delivery import Delivery
from titen.service.handoffs import HandoffService
from titen.service.keys import Keys
from titen.service.leases import LeaseService
from titen.service.readiness import Readiness
from titen.service.revocations import Revocations
from titen.service.store_secret import open_secret
from titen.service.tickets import Tickets
from titen.service.webhook_presence import WebhookPresence
from titen.service.webhooks import Webhooks
from titen.storage.clock import DatabaseClock
from titen.storage.database import Database, parse
from titen.storage.group_commit import Turn
from titen.storage.inline import InlineRecording
from titen.storage.sqlite import Progress, TunedSQLiteRecorder
from titen.storage.topics import register_legacy_topics


@dataclass
class Services:
    database: Database
    clock: Clock
    app: Titen
    store: ViewStore
    projector: Projector
    lease_index: LeaseIndex
    inbox: Inbox
    event_log: EventLog
    cursors: Cursors
    mcp_sessions: SessionIds
    lease_directory: LeaseDirectory
    lease_terms: LeaseTerms
    handoff_directory: HandoffDirectory
    recent_events: RecentEvents
    keys: Keys
    tickets: Tickets
    revocations: Revocations
    leases: LeaseService
    handoffs: HandoffService
    auditor: Auditor
    answers: StoredAnswers
    readiness: Readiness
    consumer_table: ConsumerTable
    delivery: Delivery
    webhooks: Webhooks
    webhook_presence: WebhookPresence

    def close(self) -> None:
        self.app.close()


def bootstrap(
    url: str,
    clock: Clock | None = None,
    pool_size: int = 10,
    catch_up: bool = True,
    turn: Turn | None = None,
    checkpoints: Progress | None = None,
) -> Services:
    """Open the store at `url`, creating its schema on first use.

    Every command writes the read models in its own transaction; what the log holds beyond
    them (a store an earlier release wrote, a new projection) is applied now, before anything
    is served, unless `catch_up=False` (the commands that repair read models, which a read
    model failing on an old event would stop too).

    Every service decides and records by `clock`, by default the store's own (the database's
    on PostgreSQL, which checks each save's instants; the process's on SQLite). A test's clock
    replaces it unchecked, but delivery's claims and retry pauses keep the store's (a test's
    clock stands still). The worker processes of one server pass the `turn` their saves share
    (storage/group_commit.py) and, on SQLite, their WAL `checkpoints` progress (storage/sqlite.py).
    """
    register_legacy_topics()
    database = parse(url)
    with database.migrating():  # everything below creates its tables if they are missing
        app = Titen(database.env(pool_size))
        own = store_clock(app)
        app.clock = clock = clock or own
        store = open_store(app)
        secret = open_secret(store, app.recorder.max_notification_id() or 0)
        app.resource_keys = secret.resource_keys()
        cursors = secret.cursors()
        mcp_sessions = secret.mcp_sessions()
        lease_index = LeaseIndex(store)
        inbox = Inbox(store)
        event_log = EventLog(store, cursors)
        lease_directory = LeaseDirectory(store)
        lease_terms = LeaseTerms(store)
        handoff_directory = HandoffDirectory(store)
        event_parties = EventParties(store)
        projections = [
            lease_index,
            inbox,
            event_log,
            lease_directory,
            lease_terms,
            handoff_directory,
            event_parties,
        ]
        failures = Failures(store, clock, [p.name for p in projections])
        projector = Projector(app, store, projections, failures)
        keys = Keys(store, clock)
        tickets = Tickets(store, clock)
        answers = StoredAnswers(store, clock)
        create_tables(store)
        consumer_table = ConsumerTable(store)
        delivery = Delivery(consumer_table, event_log, lambda: own.now().timestamp())
        webhook_presence = WebhookPresence(store)
        webhooks = Webhooks(store, consumer_table, keys, app, clock, answers, webhook_presence)
    recorder = app.recorder
    assert isinstance(recorder, InlineRecording)  # as storage/database.py configures both backends
    recorder.inline = projector.write
    recorder.keep = answers.write
    if isinstance(clock, DatabaseClock):
        from titen.storage.postgres import InlinePostgresRecorder  # only PostgreSQL's makes one

        assert isinstance(recorder, InlinePostgresRecorder)
        recorder.check_clock = clock.verify
    app.on_read_model_failure.append(projector.write_failed)
    app.commits.turn = turn
    if checkpoints is not None:
        assert isinstance(recorder, TunedSQLiteRecorder)  # only a SQLite server shares them
        recorder.share_checkpoints(checkpoints)
    if catch_up:
        projector.catch_up()
    recent_events = RecentEvents(event_log)
    app.on_commit.append(recent_events.committed)
    revocations = Revocations(keys, webhook_presence)
    revocations.on_revoked(recent_events.wake)
    leases = LeaseService(app, lease_index, lease_directory, clock)
    return Services(
        database=database,
        clock=clock,
        app=app,
        store=store,
        projector=projector,
        lease_index=lease_index,
        inbox=inbox,
        event_log=event_log,
        cursors=cursors,
        mcp_sessions=mcp_sessions,
        lease_directory=lease_directory,
        lease_terms=lease_terms,
        handoff_directory=handoff_directory,
        recent_events=recent_events,
        keys=keys,
        tickets=tickets,
        revocations=revocations,
        leases=leases,
        handoffs=HandoffService(app, inbox, handoff_directory, keys),
        auditor=Auditor(
            app, lease_directory.find, lease_terms.begins, handoff_directory.belongs_to
        ),
        answers=answers,
        readiness=Readiness(app, store, projector),
        consumer_table=consumer_table,
        delivery=delivery,
        webhooks=webhooks,
        webhook_presence=webhook_presence,
    )


def store_clock(app: Titen) -> Clock:
    """The store's own clock: the database server's on PostgreSQL, shared by every node
    (storage/clock.py); the process's on SQLite, a store on one host."""
    if isinstance(app.factory, SQLiteFactory):
        return SystemClock()
    from titen.storage.postgres import InlinePostgresRecorder  # loaded with the store already

    assert isinstance(app.recorder, InlinePostgresRecorder)
    return DatabaseClock.of(app.recorder.datastore)


def open_store(app: Titen) -> ViewStore:
    """The view store on the same database (and connection pool) as the app's event store.
    PostgreSQL's is imported only here, so a process on SQLite never loads psycopg."""
    kind: type[ViewStore] = SQLiteViewStore
    if not isinstance(app.factory, SQLiteFactory):
        from titen.projections.postgres_store import PostgresViewStore

        kind = PostgresViewStore
    store = app.factory.tracking_recorder(kind)
    assert isinstance(store, ViewStore)  # the library makes the class it is given
    return store
