"""The embedded default store (being split by concern; see :mod:`.store`)."""

from hybrid_memory.stores.local.store import DEFAULT_WIPE_TIMEOUT, SCHEMA_VERSION, LocalStore

__all__ = ["LocalStore"]
