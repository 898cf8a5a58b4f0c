"""The one exception tree of hybrid-memory.

Every error the library raises on purpose derives from :class:`HybridMemoryError`, so
``except HybridMemoryError`` catches all of them. Where a builtin fits, the error also derives
from it, so code written against the builtin keeps working::

    HybridMemoryError
    ├── ConfigurationError (ValueError)          bad settings or constructor arguments
    │   └── MissingDependencyError (ImportError)  an optional extra is not installed
    ├── InvalidInputError (ValueError)            bad text, ids, vectors, k, alpha, datetimes
    │   └── EmbeddingDimensionError               a vector of the wrong dimension / embedder swap
    │       └── EmbedderMismatchError             the store's vectors come from another embedder
    ├── NotFoundError (KeyError)                  a memory id that does not exist for that user
    ├── UserForgottenError                        the user was forgotten while a write was in flight
    ├── IdentityMismatchError (PermissionError)   a client-named user disagrees with the authenticated one
    ├── StoreError                                a backend failed
    │   ├── StoreUnavailableError (ConnectionError)  unreachable, timed out or closed
    │   └── SchemaError                           the collection/table does not match
    ├── EmbeddingError                            the embedder raised or returned garbage
    └── ScoringError                              an importance scorer / extractor failed

Foreign exceptions are translated at the boundary with ``raise ... from exc`` so the original
traceback is kept.

Example:
    >>> from hybrid_memory.errors import HybridMemoryError, InvalidInputError
    >>> issubclass(InvalidInputError, (HybridMemoryError, ValueError))
    True
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "EmbedderMismatchError",
    "EmbeddingDimensionError",
    "EmbeddingError",
    "HybridMemoryError",
    "IdentityMismatchError",
    "InvalidInputError",
    "MissingDependencyError",
    "NotFoundError",
    "SchemaError",
    "ScoringError",
    "StoreError",
    "StoreUnavailableError",
    "UserForgottenError",
]


class HybridMemoryError(Exception):
    """Root of every error hybrid-memory raises on purpose.

    Example:
        >>> from hybrid_memory import HybridMemory, HybridMemoryError, InvalidInputError
        >>> from hybrid_memory.testing import HashingEmbedder
        >>> mem = HybridMemory(embedder=HashingEmbedder())
        >>> try:
        ...     mem.remember("alice", "   ")
        ... except HybridMemoryError as e:
        ...     print(type(e).__name__, isinstance(e, InvalidInputError), isinstance(e, ValueError), e)
        InvalidInputError True True item 0: content is empty
        >>> mem.close()
    """


class ConfigurationError(HybridMemoryError, ValueError):
    """Invalid configuration or constructor arguments."""


class MissingDependencyError(ConfigurationError, ImportError):
    """An optional dependency is missing; the message names the ``pip install`` command."""

    def __init__(self, package: str, extra: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(f"{package!r} is not installed. Install it with: pip install 'hybrid-memory[{extra}]'")


class InvalidInputError(HybridMemoryError, ValueError):
    """A caller passed invalid data; nothing was written."""


class EmbeddingDimensionError(InvalidInputError):
    """A vector's dimension does not match the store's."""

    def __init__(self, expected: int, got: int, *, hint: str = "", lead: str = "") -> None:
        self.expected = expected
        self.got = got
        lead = lead or f"the store holds {expected}-d vectors"
        msg = f"embedding dimension mismatch: {lead}, got {got}-d"
        super().__init__(msg + (f". {hint}" if hint else ""))


class EmbedderMismatchError(EmbeddingDimensionError):
    """The store's vectors were made by another embedder than the one given, of the same dimension.

    Vectors of two models are not comparable even when their sizes agree (two 1536-d OpenAI
    models, a 512-d custom model and the default), so a search would rank silently wrong.
    Nothing was written. Use the embedder the store was built with (wrap it with ``name=`` the
    store's name if only its name changed), or migrate with ``hybrid-memory reembed``.

    Attributes:
        stored: The embedder name the store recorded.
        given: The embedder name given.

    Example:
        >>> from hybrid_memory import HybridMemory, LocalStore
        >>> from hybrid_memory.embeddings import CallableEmbedder
        >>> from hybrid_memory.testing import HashingEmbedder
        >>> store = LocalStore(":memory:")
        >>> store.bind_embedder("hashing-64", 64)
        >>> other = CallableEmbedder(HashingEmbedder(64).embed_documents, name="acme-64")
        >>> try:
        ...     HybridMemory(store=store, embedder=other)
        ... except EmbedderMismatchError as e:
        ...     print(e.stored, e.given, e.got)
        hashing-64 acme-64 64
        >>> mem = HybridMemory(store=store)  # embedder=None: the store's own
        >>> mem.embedder.name
        'hashing-64'
        >>> mem.close()
    """

    def __init__(self, stored: str, given: str, dimension: int, *, hint: str = "") -> None:
        self.stored = stored
        self.given = given
        self.expected = self.got = dimension
        hint = hint or (
            "use the embedder the store was built with (the same model under another name: pass "
            f"name={stored!r} to its wrapper, e.g. LangChainEmbedder(embeddings, name=...)), or migrate "
            "the store with `hybrid-memory reembed`"
        )
        InvalidInputError.__init__(
            self,
            f"embedder mismatch: the store's vectors were made by {stored!r}, got {given!r} (both "
            f"{dimension}-d, but the vectors of two models are not comparable). {hint}",
        )


class NotFoundError(HybridMemoryError, KeyError):
    """The requested memory does not exist (for that user)."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable.
        return str(self.args[0]) if self.args else ""


class IdentityMismatchError(HybridMemoryError, PermissionError):
    """The run names a user its authenticated identity does not allow; nothing was read or written.

    Raised by the adapters that can see a server-authenticated identity (the LangGraph server's
    ``langgraph_auth_user``): when a client-supplied user id (run context, ``configurable``, a
    namespace, a retriever's ``user_id``) disagrees with it, when a strict setting refuses any
    client-supplied id, or when authentication is required and the run has none.
    """

    def __init__(self, message: str, *, authenticated: str | None = None, claimed: str | None = None) -> None:
        self.authenticated = authenticated
        self.claimed = claimed
        super().__init__(message)


class StoreError(HybridMemoryError):
    """A storage backend failed."""


class StoreUnavailableError(StoreError, ConnectionError):
    """The backend cannot be reached, timed out, or the store was closed."""


class SchemaError(StoreError):
    """The backend's schema does not match what hybrid-memory expects."""


class EmbeddingError(HybridMemoryError):
    """The embedder failed or returned unusable vectors."""


class ScoringError(HybridMemoryError):
    """An LLM importance scorer or extractor failed after its retries."""


class UserForgottenError(HybridMemoryError):
    """The user was forgotten (``forget_user``, from any process) while this write was in flight.

    Nothing of the refused write was stored. A write that starts after the forget returned is
    accepted as new data.
    """

    def __init__(self, user_id: str) -> None:
        self.user_id = user_id
        super().__init__(
            f"user {user_id!r} was forgotten (forget_user) while this write was in flight; nothing was written"
        )
