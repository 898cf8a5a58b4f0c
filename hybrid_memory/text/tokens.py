"""Token counting: exact with tiktoken when its files are on disk, a documented approximation otherwise.

The fuser caps the injected block by tokens, so it needs a count; it never needs the network
and never depends on another framework's package data.

**Exact** (``TokenCounter.name == "tiktoken:o200k_base"``, ``exact`` is true) when tiktoken
can load the encoding from its cache directory, chosen exactly as tiktoken chooses it:
``TIKTOKEN_CACHE_DIR`` if set, else ``DATA_GYM_CACHE_DIR``, else tiktoken's default
``<tempdir>/data-gym-cache``. The file must already be there under tiktoken's name for it (the
SHA-1 of the encoding's download URL) with the expected SHA-256; only then is tiktoken asked to
load it, so a missing or corrupt file never turns into a download (or a hang on a machine
without network). To get exact counts offline, put the files there once, e.g. on a machine with
network::

    TIKTOKEN_CACHE_DIR=~/.cache/tiktoken python -c "import tiktoken; tiktoken.get_encoding('o200k_base')"

and set the same ``TIKTOKEN_CACHE_DIR`` where the library runs.

**Approximate** (``name == "approx"``, ``exact`` is false) otherwise, with no warning: one token
per kana, Hangul or CJK / full-width punctuation character, 0.8 per CJK ideograph, one per 3.7
other characters, rounded up. Calibrated against ``o200k_base`` on LoCoMo (English),
MemoryBank-CN (Chinese) and mixed Chinese/English turns, it over-counts by about 18 % in total
(14 % on Chinese) and under-counts by more than 10 % on fewer than 2 % of texts, so a token budget
rarely overflows. ``cl100k_base`` spends about 1.4 tokens per ideograph: for those models the
approximation under-counts Chinese. The fallback is logged once at INFO on the
``hybrid_memory.tokens`` logger and is visible wherever it matters:
:attr:`TokenCounter.name` and ``FusedContext.token_counter``.

Example:
    >>> c = TokenCounter(encoding="approx")
    >>> c.name, c.exact
    ('approx', False)
    >>> c.count("我喜欢喝茶。"), c.count("hello world, how are you?")
    (5, 7)
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

__all__ = ["APPROX", "TokenCounter", "count_tokens", "tiktoken_cache_dir"]

logger = logging.getLogger("hybrid_memory.tokens")

#: The name of the approximate counter (``TokenCounter.name``, ``FusedContext.token_counter``).
APPROX = "approx"

#: Download URL and SHA-256 of the encodings we can load offline (from ``tiktoken_ext.openai_public``).
_BLOBS: dict[str, tuple[str, str]] = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}

_LOCK = threading.Lock()
_LOGGED: set[tuple[str, str]] = set()
#: Loaded encodings by (name, cache directory). Failures are not cached: a file put there later is used.
_LOADED: dict[tuple[str, str], Any] = {}


def tiktoken_cache_dir() -> str | None:
    """The directory tiktoken reads its cached files from, resolved as tiktoken does.

    Returns:
        ``TIKTOKEN_CACHE_DIR``, else ``DATA_GYM_CACHE_DIR``, else ``<tempdir>/data-gym-cache``;
        ``None`` when the variable is set to the empty string (tiktoken then never caches and
        would always download).
    """
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            return os.environ[var] or None
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def _cached_file_ok(path: Path, sha256: str) -> bool:
    try:
        data = path.read_bytes()
    except OSError:
        return False
    return hashlib.sha256(data).hexdigest() == sha256


def _load_encoding(name: str, cache_dir: str | None) -> tuple[Any, str | None]:
    """``(encoding, None)`` when ``name`` loads from ``cache_dir`` without network, else ``(None, why)``."""
    blob = _BLOBS.get(name)
    if blob is None:
        return None, f"no offline loader for encoding {name!r} (known: {', '.join(sorted(_BLOBS))})"
    if cache_dir is None:
        return None, "TIKTOKEN_CACHE_DIR is set to '' (tiktoken caching disabled)"
    with _LOCK:
        loaded = _LOADED.get((name, cache_dir))
    if loaded is not None:
        return loaded, None
    url, sha256 = blob
    path = Path(cache_dir) / hashlib.sha1(url.encode()).hexdigest()
    if not _cached_file_ok(path, sha256):
        return None, f"no valid cached {name} file at {path}"
    try:
        import tiktoken
    except ImportError:  # pragma: no cover - tiktoken is a base dependency
        return None, "tiktoken is not installed"
    # The verified file is where tiktoken looks, so this reads it and never downloads.
    try:
        enc = tiktoken.get_encoding(name)
    except Exception as exc:  # a broken tiktoken install must not break token counting
        return None, f"tiktoken could not load {name}: {exc!r}"
    with _LOCK:
        _LOADED[(name, cache_dir)] = enc
    return enc, None


def _encoding_for_model(model: str) -> str:
    m = model.lower()
    if m.startswith(("gpt-4o", "o1", "o3", "o4", "gpt-4.1", "gpt-5")):
        return "o200k_base"
    return "cl100k_base"


def _approx_count(text: str) -> int:
    ideographs = 0.0
    wide = 0
    other = 0
    for ch in text:
        cp = ord(ch)
        if 0x3400 <= cp <= 0x9FFF or 0xF900 <= cp <= 0xFAFF or 0x20000 <= cp <= 0x3FFFF:
            ideographs += 0.8
        elif 0x2E80 <= cp <= 0x30FF or 0xAC00 <= cp <= 0xD7AF or 0x1100 <= cp <= 0x11FF or 0x3130 <= cp <= 0x318F:
            wide += 1  # CJK radicals and punctuation, kana, Hangul
        elif 0xFF00 <= cp <= 0xFFEF:
            wide += 1  # full-width forms (，：（）)
        else:
            other += 1
    return math.ceil(ideographs + wide + other / 3.7)


class TokenCounter:
    """Counts tokens like the target model's tokenizer, without network access.

    Exact (tiktoken) when the encoding's file is in tiktoken's cache directory, the documented
    approximation otherwise (see the module docstring). The fallback is logged once per process
    and reason at INFO, not WARNING: it is the expected state of a base install, Python's
    last-resort handler would print a WARNING into every application that has not configured
    logging, and the choice is already reported by :attr:`name` and ``FusedContext.token_counter``.

    Args:
        model: Model name used to choose the encoding (``gpt-4o*`` → o200k_base, else cl100k_base).
        encoding: Force an encoding name, or ``"approx"`` for the offline approximation.

    Attributes:
        encoding_name: The encoding asked for (``"o200k_base"``, ``"cl100k_base"`` or ``"approx"``).
        fallback_reason: Why the approximation is used instead of the asked-for encoding, or ``None``.
    """

    def __init__(self, model: str = "gpt-4o-mini", *, encoding: str | None = None) -> None:
        self.encoding_name = encoding if encoding is not None else _encoding_for_model(model)
        self._enc: Any = None
        self.fallback_reason: str | None = None
        if self.encoding_name != APPROX:
            self._enc, self.fallback_reason = _load_encoding(self.encoding_name, tiktoken_cache_dir())
        if self.fallback_reason is not None:
            key = (self.encoding_name, self.fallback_reason)
            with _LOCK:
                first = key not in _LOGGED
                _LOGGED.add(key)
            if first:
                logger.info(
                    "token counts are approximate (%s); for exact %s counts put tiktoken's file in "
                    "TIKTOKEN_CACHE_DIR (see hybrid_memory.tokens)",
                    self.fallback_reason,
                    self.encoding_name,
                )

    @property
    def exact(self) -> bool:
        """Whether counts come from tiktoken (True) or the approximation (False)."""
        return self._enc is not None

    @property
    def name(self) -> str:
        """``"tiktoken:<encoding>"`` for exact counts, ``"approx"`` for the approximation."""
        return f"tiktoken:{self.encoding_name}" if self._enc is not None else APPROX

    def __repr__(self) -> str:
        return f"TokenCounter(name={self.name!r})"

    def count(self, text: str) -> int:
        """Number of tokens in ``text``."""
        if not text:
            return 0
        if self._enc is not None:
            return len(self._enc.encode(text, disallowed_special=()))
        return _approx_count(text)

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` with at most ``max_tokens`` tokens."""
        if max_tokens <= 0:
            return ""
        if self._enc is not None:
            ids = self._enc.encode(text, disallowed_special=())
            return text if len(ids) <= max_tokens else str(self._enc.decode(ids[:max_tokens]))
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.count(text[:mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo]


def count_tokens(text: str, model: str = "gpt-4o-mini") -> int:
    """Count tokens of ``text`` for ``model`` (offline; exact or approximate as :class:`TokenCounter`)."""
    return TokenCounter(model).count(text)
