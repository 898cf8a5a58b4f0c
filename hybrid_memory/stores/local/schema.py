"""The SQLite file's schema: tables, version, in-place migrations and the ``meta`` key-value table.

Tables: ``meta`` (schema version, analyzer and embedder names, embedder dimension, a pending
wipe), ``memories`` (one row per memory with its analysed text and unit vector), ``turns`` (the
durable turn log), ``extracted`` and ``summarized`` (each session's fact-extraction and summary
watermarks; created in place in older files), ``retired_turns`` (a hash of each turn that left
its log in the last seven days, forgotten or ended, so a late retry cannot bring a forgotten turn
back; created in place too), ``forget_epochs`` and ``user_versions`` (per-user
counters under a SHA-256 of the user id), ``snapshots`` (schema 2: each user's search index as contiguous arrays, so a cold
process loads it with one query instead of rebuilding it from the rows; see :mod:`.cache`) and
``snapshot_vectors`` (schema 3: the snapshot's vector matrix in parts of whole rows, outside the
``snapshots`` row).

Schema 3 keeps the vectors out of the ``snapshots`` row (its ``vectors`` column is then empty):
SQLite stores a large value as a chain of overflow pages, and reading a column stored after it
in the same row walks that whole chain first, so a schema-2 row made every load read the 150 MB
of a 100k-memory user's vectors twice. Parts also keep each value under SQLite's 1 GB limit.
Schema-2 rows (vectors inside) still load, and are saved again in the new form when the
partition leaves the process (see :mod:`.cache`).

A snapshot is valid only for the ``user_versions`` counter it was saved at: triggers delete a
user's snapshot and its vectors in the same transaction as any write that bumps the counter, so
a crash between two lines never leaves a stale snapshot to serve (and a forgotten user's snapshot
goes with its rows, zeroed by ``secure_delete``). Older files get the tables and triggers on open
(additive: nothing is copied or rewritten).
"""

from __future__ import annotations

import sqlite3

from hybrid_memory.errors import SchemaError
from hybrid_memory.text.analyzer import Analyzer

SCHEMA_VERSION = "3"
#: Schema versions this library opens and migrates in place to :data:`SCHEMA_VERSION`.
_MIGRATABLE = ("1", "2")
_BUSY_TIMEOUT_MS = 5000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS memories (
    user_id          TEXT NOT NULL,
    id               TEXT NOT NULL,
    session_id       TEXT,
    content          TEXT NOT NULL,
    analyzed         TEXT NOT NULL,
    category         TEXT NOT NULL,
    importance       REAL NOT NULL,
    source           TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    created_us       INTEGER NOT NULL,
    updated_at       TEXT NOT NULL,
    last_accessed_at TEXT,
    access_count     INTEGER NOT NULL,
    tags             TEXT NOT NULL,
    metadata         TEXT NOT NULL,
    status           TEXT NOT NULL,
    version          INTEGER NOT NULL,
    supersedes       TEXT,
    superseded_by    TEXT,
    provenance       TEXT NOT NULL,
    vector           BLOB NOT NULL,
    context          TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (user_id, id)
);
CREATE INDEX IF NOT EXISTS memories_by_time ON memories (user_id, created_us, id);
CREATE TABLE IF NOT EXISTS turns (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id      TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    id           TEXT NOT NULL,
    role         TEXT NOT NULL,
    content      TEXT NOT NULL,
    timestamp    TEXT NOT NULL,
    importance   REAL NOT NULL,
    key_frame    INTEGER NOT NULL,
    key_frame_reason TEXT,
    tokens       INTEGER NOT NULL,
    scoring_note TEXT
);
CREATE INDEX IF NOT EXISTS turns_by_session ON turns (user_id, session_id, seq);
CREATE INDEX IF NOT EXISTS turns_by_id ON turns (user_id, id);
CREATE TABLE IF NOT EXISTS extracted (
    user_id    TEXT NOT NULL,
    session_id TEXT NOT NULL,
    upto       INTEGER NOT NULL,
    PRIMARY KEY (user_id, session_id)
);
CREATE TABLE IF NOT EXISTS summarized (
    user_id    TEXT NOT NULL,
    session_id TEXT NOT NULL,
    upto       INTEGER NOT NULL,
    PRIMARY KEY (user_id, session_id)
);
CREATE TABLE IF NOT EXISTS retired_turns (
    key        TEXT PRIMARY KEY,
    forgotten  INTEGER NOT NULL,
    epoch      INTEGER NOT NULL,
    retired_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS retired_turns_by_time ON retired_turns (retired_at);
CREATE TABLE IF NOT EXISTS forget_epochs (
    user_hash TEXT PRIMARY KEY,
    epoch     INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS user_versions (
    user_hash TEXT PRIMARY KEY,
    version   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS snapshots (
    user_hash TEXT PRIMARY KEY,
    version   INTEGER NOT NULL,
    rows      INTEGER NOT NULL,
    dim       INTEGER NOT NULL,
    vectors   BLOB NOT NULL,
    columns   BLOB NOT NULL,
    postings  BLOB NOT NULL,
    ids       TEXT NOT NULL,
    terms     TEXT NOT NULL,
    sessions  TEXT NOT NULL,
    tags      TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS snapshot_vectors (
    user_hash TEXT NOT NULL,
    part      INTEGER NOT NULL,
    version   INTEGER NOT NULL,
    vectors   BLOB NOT NULL,
    PRIMARY KEY (user_hash, part)
);
"""

#: A write bumps ``user_versions`` in its transaction; these drop the user's snapshot with it
#: (the first two from schema 2, the other two added by schema 3 for the vectors' parts).
_TRIGGERS = (
    "CREATE TRIGGER IF NOT EXISTS snapshots_stale_on_update AFTER UPDATE ON user_versions "
    "BEGIN DELETE FROM snapshots WHERE user_hash = NEW.user_hash; END",
    "CREATE TRIGGER IF NOT EXISTS snapshots_stale_on_insert AFTER INSERT ON user_versions "
    "BEGIN DELETE FROM snapshots WHERE user_hash = NEW.user_hash; END",
    "CREATE TRIGGER IF NOT EXISTS snapshot_vectors_stale_on_update AFTER UPDATE ON user_versions "
    "BEGIN DELETE FROM snapshot_vectors WHERE user_hash = NEW.user_hash; END",
    "CREATE TRIGGER IF NOT EXISTS snapshot_vectors_stale_on_insert AFTER INSERT ON user_versions "
    "BEGIN DELETE FROM snapshot_vectors WHERE user_hash = NEW.user_hash; END",
)


def _create_or_migrate(c: sqlite3.Connection, analyzer: Analyzer, path: str) -> None:
    """Inside a write transaction: create what is missing, check the schema version, migrate in place.

    Migrations are additive (a column added with a default; schema 1 -> 2 adds the ``snapshots``
    table and its triggers, 2 -> 3 the ``snapshot_vectors`` table and its triggers); a file indexed with another analyzer has its analysed text
    recomputed (:func:`_reanalyze`).

    Raises:
        SchemaError: the file holds a schema version this library neither reads nor migrates.
    """
    version = _read_meta(c, "schema_version") if _has_table(c, "meta") else None
    if version is not None and version != SCHEMA_VERSION and version not in _MIGRATABLE:
        raise SchemaError(f"{path!r} has schema version {version}; this library reads {SCHEMA_VERSION}")
    for stmt in _SCHEMA.split(";"):
        if stmt.strip():
            c.execute(stmt)
    for trigger in _TRIGGERS:
        c.execute(trigger)
    if version != SCHEMA_VERSION:
        _write_meta(c, "schema_version", SCHEMA_VERSION)
    columns = {str(r[1]) for r in c.execute("PRAGMA table_info(memories)")}
    if "context" not in columns:  # files written before memories had a search context (additive)
        c.execute("ALTER TABLE memories ADD COLUMN context TEXT NOT NULL DEFAULT ''")
    stored = _read_meta(c, "analyzer")
    if stored != analyzer.name:
        if stored is not None:
            _reanalyze(c, analyzer)
        _write_meta(c, "analyzer", analyzer.name)


def _reanalyze(c: sqlite3.Connection, analyzer: Analyzer) -> None:
    """Recompute every memory's analysed text with ``analyzer`` (inside a write transaction).

    Snapshots hold postings of the old analysis: they are dropped (rebuilt from the new rows).
    """
    c.execute("DELETE FROM snapshots")
    c.execute("DELETE FROM snapshot_vectors")
    rows = c.execute("SELECT user_id, id, content, context FROM memories").fetchall()
    c.executemany(
        "UPDATE memories SET analyzed = ? WHERE user_id = ? AND id = ?",
        [
            (analyzer.analyze(f"{context}\n{content}" if context else content), user_id, mid)
            for user_id, mid, content, context in rows
        ],
    )


def _has_table(c: sqlite3.Connection, name: str) -> bool:
    return c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def _read_meta(c: sqlite3.Connection, key: str) -> str | None:
    """The ``meta`` value of ``key`` (``None`` when unset)."""
    row = c.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def _write_meta(c: sqlite3.Connection, key: str, value: str) -> None:
    """Set the ``meta`` value of ``key``."""
    c.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))
