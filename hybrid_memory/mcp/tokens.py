"""Bearer tokens of the MCP server's HTTP transport, mapped to user ids (standard library only).

The token file is one JSON object ``{token: user_id}``. A key may be the token itself or, better,
``"sha256:<hex digest of the token>"`` so the file never holds a usable secret::

    {
      "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08": "alice",
      "a-long-random-token-for-bob-0123456789": "bob"
    }

Make a token and its digest with::

    python -c "import secrets, hashlib; t = secrets.token_urlsafe(32); print(t, 'sha256:' + hashlib.sha256(t.encode()).hexdigest())"

Tokens are compared by their SHA-256 digest only; the raw tokens are not kept in memory.

Example:
    >>> import hashlib
    >>> table = TokenTable.from_mapping({"sha256:" + hashlib.sha256(b"s3cret-token-for-alice").hexdigest(): "alice"})
    >>> table.user_for("s3cret-token-for-alice"), table.user_for("guess")
    ('alice', None)
    >>> table.users()
    ['alice']
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from hybrid_memory.errors import ConfigurationError, InvalidInputError
from hybrid_memory.records import check_id

__all__ = ["MIN_TOKEN_CHARS", "TOKENS_ENV", "TokenTable", "token_digest"]

#: Environment variable naming the token file when ``--tokens`` is not given.
TOKENS_ENV = "HYBRID_MEMORY_MCP_TOKENS"
#: Shortest raw token accepted in a token file (a guessable token is a configuration error).
MIN_TOKEN_CHARS = 16
_DIGEST = re.compile(r"^sha256:([0-9a-fA-F]{64})$")


def token_digest(token: str) -> str:
    """The hex SHA-256 digest of ``token`` (UTF-8)."""
    return hashlib.sha256(token.encode("utf-8", errors="surrogatepass")).hexdigest()


class TokenTable:
    """Bearer token digests mapped to user ids.

    Build it with :meth:`from_file` or :meth:`from_mapping`; :meth:`user_for` answers whose
    token a request carries.
    """

    def __init__(self, digests: Mapping[str, str]) -> None:
        if not digests:
            raise ConfigurationError("the token table is empty: add at least one token for a user")
        self._users: dict[str, str] = dict(digests)

    @classmethod
    def from_mapping(cls, data: object, *, source: str = "the token table") -> TokenTable:
        """Validate ``{token_or_"sha256:<hex>": user_id}`` and build the table.

        Raises:
            ConfigurationError: not an object of strings, a short raw token, a bad user id, or
                the same token listed twice.
        """
        if not isinstance(data, Mapping):
            raise ConfigurationError(f"{source} must be a JSON object {{token: user_id}}")
        digests: dict[str, str] = {}
        for key, user in data.items():
            if not isinstance(key, str) or not isinstance(user, str):
                raise ConfigurationError(f"{source}: every key and value must be a string")
            try:
                check_id(user)
            except InvalidInputError as exc:
                raise ConfigurationError(f"{source}: bad user id {user!r}: {exc}") from exc
            m = _DIGEST.match(key)
            if m is not None:
                digest = m.group(1).lower()
            else:
                if len(key) < MIN_TOKEN_CHARS:
                    raise ConfigurationError(
                        f"{source}: a token of user {user!r} has {len(key)} characters; use at least "
                        f"{MIN_TOKEN_CHARS} random characters (or its 'sha256:<hex>' digest)"
                    )
                digest = token_digest(key)
            if digest in digests and digests[digest] != user:
                raise ConfigurationError(f"{source}: one token is given to two users")
            digests[digest] = user
        return cls(digests)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> TokenTable:
        """Read a token file (see the module docstring).

        Raises:
            ConfigurationError: the file is missing or not valid JSON, or its content is invalid.
        """
        p = Path(path).expanduser()
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"cannot read the token file {str(p)!r}: {exc.strerror or exc}") from exc
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigurationError(f"the token file {str(p)!r} is not valid JSON: {exc}") from exc
        return cls.from_mapping(data, source=f"token file {str(p)!r}")

    def user_for(self, token: str) -> str | None:
        """The user id whose token this is, or ``None``."""
        if not isinstance(token, str) or not token:
            return None
        return self._users.get(token_digest(token))

    def users(self) -> list[str]:
        """The user ids that have a token, sorted."""
        return sorted(set(self._users.values()))
