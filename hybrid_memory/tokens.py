"""Token counting with tiktoken, offline.

tiktoken downloads its BPE files on first use. We never let that happen: if
``TIKTOKEN_CACHE_DIR`` is unset we point tiktoken at the cache that ships inside llama-index-core
(``llama_index/core/_static/tiktoken_cache``, cl100k_base and o200k_base) when it is installed,
and without a usable cache we fall back to an approximate counter (one token per CJK character,
about four characters per token otherwise) and say so once with a warning.

Example:
    >>> c = TokenCounter(encoding="approx")
    >>> c.count("我喜欢喝茶"), c.count("hello world, how are you?")
    (5, 7)
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

__all__ = ["TokenCounter", "count_tokens"]

_LOCK = threading.Lock()


def _bundled_cache() -> str | None:
    spec = find_spec("llama_index.core")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        p = Path(loc) / "_static" / "tiktoken_cache"
        if p.is_dir():
            return str(p)
    return None


@lru_cache(maxsize=8)
def _load_encoding(name: str) -> Any:
    """Load a tiktoken encoding without network access, or return None."""
    try:
        import tiktoken
    except ImportError:
        return None
    with _LOCK:
        env_before = os.environ.get("TIKTOKEN_CACHE_DIR")
        cache = env_before or _bundled_cache()
        if cache is None:
            return None
        # tiktoken reads the variable at load time; set it only for this call.
        os.environ["TIKTOKEN_CACHE_DIR"] = cache
        try:
            return tiktoken.get_encoding(name)
        except Exception:  # no cached file and no network: fall back
            return None
        finally:
            if env_before is None:
                os.environ.pop("TIKTOKEN_CACHE_DIR", None)


def _encoding_for_model(model: str) -> str:
    m = model.lower()
    if m.startswith(("gpt-4o", "o1", "o3", "o4", "gpt-4.1", "gpt-5")):
        return "o200k_base"
    return "cl100k_base"


class TokenCounter:
    """Counts tokens like the target model's tokenizer, without network access.

    Args:
        model: Model name used to choose the encoding (``gpt-4o*`` → o200k_base, else cl100k_base).
        encoding: Force an encoding name, or ``"approx"`` for the offline approximation.
    """

    _warned = False

    def __init__(self, model: str = "gpt-4o-mini", *, encoding: str | None = None) -> None:
        self.encoding_name = encoding or _encoding_for_model(model)
        self._enc = None if self.encoding_name == "approx" else _load_encoding(self.encoding_name)
        if self._enc is None and self.encoding_name != "approx" and not TokenCounter._warned:
            TokenCounter._warned = True
            warnings.warn(
                f"tiktoken encoding {self.encoding_name!r} is not available offline; using an "
                "approximate token counter (install llama-index-core or set TIKTOKEN_CACHE_DIR)",
                RuntimeWarning,
                stacklevel=2,
            )

    @property
    def exact(self) -> bool:
        """Whether counts come from tiktoken (True) or the approximation (False)."""
        return self._enc is not None

    def count(self, text: str) -> int:
        """Number of tokens in ``text``."""
        if not text:
            return 0
        if self._enc is not None:
            return len(self._enc.encode(text, disallowed_special=()))
        cjk = sum(1 for ch in text if "\u3040" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff")
        rest = len(text) - cjk
        return cjk + math.ceil(rest / 4)

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


@lru_cache(maxsize=4)
def _default_counter(model: str) -> TokenCounter:
    return TokenCounter(model)


def count_tokens(text: str, model: str = "gpt-4o-mini") -> int:
    """Count tokens of ``text`` for ``model`` (offline)."""
    return _default_counter(model).count(text)
