"""PII redaction before anything is embedded or stored.

:class:`PiiRedactor` replaces personal identifiers with typed placeholders:

* ``[ID_NUMBER]``: Chinese resident ID numbers (18 characters) whose ISO 7064 MOD 11-2 check
  digit is valid and whose birth date is a real date;
* ``[BANK_CARD]``: 13-19 digit card numbers (optionally grouped by spaces or dashes) passing the
  Luhn check;
* ``[PHONE]``: Chinese mobiles (``1[3-9]x`` + 8 digits, optional ``+86``/``0086``, grouped
  ``138 1234 5678`` or ``138-1234-5678``), Chinese landlines (``010-12345678``), and
  international / North-American numbers written with a ``+`` or a separator;
* ``[EMAIL]``: e-mail addresses.

Numbers that fail their checksum are left alone, so order numbers, amounts and dates survive.
The order of the passes matters: an 18-digit ID that also happens to pass Luhn is reported as an
ID number, and a card number is never split into phone numbers.

Example:
    >>> r = PiiRedactor()
    >>> r.redact("我的手机是13812345678，邮箱 li.lei@example.com").text
    '我的手机是[PHONE]，邮箱 [EMAIL]'
    >>> r.redact("身份证 11010519491231002X").text
    '身份证 [ID_NUMBER]'
    >>> r.redact("card 4111 1111 1111 1111, order 4111111111111112").text
    'card [BANK_CARD], order 4111111111111112'
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import date

__all__ = [
    "PLACEHOLDERS",
    "PiiRedactor",
    "Redaction",
    "china_id_valid",
    "luhn_valid",
    "redact_pii",
]

#: Placeholder per PII type.
PLACEHOLDERS = {
    "ID_NUMBER": "[ID_NUMBER]",
    "BANK_CARD": "[BANK_CARD]",
    "PHONE": "[PHONE]",
    "EMAIL": "[EMAIL]",
}

_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"


def china_id_valid(number: str) -> bool:
    """Whether ``number`` is a well-formed 18-character Chinese resident ID number.

    Checks the ISO 7064 MOD 11-2 check character and that positions 7-14 are a real date
    between 1900 and 2099.

    Example:
        >>> china_id_valid("11010519491231002X"), china_id_valid("110105194912310021")
        (True, False)
    """
    s = number.upper()
    if len(s) != 18 or not s[:17].isdigit() or not (s[17].isdigit() or s[17] == "X"):
        return False
    total = sum(int(c) * w for c, w in zip(s[:17], _ID_WEIGHTS, strict=True))
    if _ID_CHECK[total % 11] != s[17]:
        return False
    try:
        born = date(int(s[6:10]), int(s[10:12]), int(s[12:14]))
    except ValueError:
        return False
    return 1900 <= born.year <= 2099


def luhn_valid(digits: str) -> bool:
    """Whether a digit string passes the Luhn (mod 10) check used by payment cards.

    Example:
        >>> luhn_valid("4111111111111111"), luhn_valid("4111111111111112")
        (True, False)
    """
    if not digits.isdigit() or not digits:
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


_EMAIL = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![A-Za-z0-9-])"
)
# 18-character ID numbers, optionally written 6-8-4 with spaces.
_ID = re.compile(r"(?<![0-9A-Za-z])(\d{6})[ ]?(\d{8})[ ]?(\d{3}[0-9Xx])(?![0-9A-Za-z])")
# 13-19 digits, contiguous or in groups of 4 (last group 1-4) separated by one space or dash.
_CARD = re.compile(r"(?<![\d-])(?:\d{13,19}|\d{4}(?:[ -]\d{4}){2,3}(?:[ -]\d{1,4})?)(?![\d-])")
# Chinese mobiles: optional country code, 1[3-9] + 9 digits, optionally grouped 3-4-4.
_CN_MOBILE = re.compile(r"(?<![\d+])(?:(?:\+|00)86[ -]?)?1[3-9]\d(?:[ -]?\d{4}){2}(?!\d)")
# Chinese landlines: area code 0xx / 0xxx, a dash or space, 7-8 digits; optional extension.
_CN_LANDLINE = re.compile(r"(?<![\d+])(?:\(0\d{2,3}\)|0\d{2,3}[ -])\d{7,8}(?:-\d{1,6})?(?!\d)")
# International numbers with a + prefix and separators, and North-American (xxx) xxx-xxxx / xxx-xxx-xxxx.
_INTL = re.compile(r"(?<![\w+])\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5}\d(?!\d)")
_NANP = re.compile(r"(?<!\d)(?:\(\d{3}\)[ ]?|\d{3}[ .-])\d{3}[ .-]\d{4}(?!\d)")


# Every supported kind contains a digit or an "@": a cheap guard before the full passes.
_MAYBE_PII = re.compile(r"[\d@]")


@dataclass(frozen=True)
class Redaction:
    """The redacted text and how many items of each type were replaced."""

    text: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        """Whether anything was redacted."""
        return bool(self.counts)

    def summary(self) -> str:
        """A short description such as ``"PHONE×2, EMAIL×1"`` (empty when nothing changed)."""
        return ", ".join(f"{k}×{v}" for k, v in sorted(self.counts.items()))


class PiiRedactor:
    """Replaces phone numbers, e-mails, Chinese ID numbers and bank cards with placeholders.

    Args:
        kinds: Which types to redact (default all of ``PLACEHOLDERS``).
    """

    def __init__(self, kinds: tuple[str, ...] | None = None) -> None:
        chosen = tuple(PLACEHOLDERS) if kinds is None else tuple(kinds)
        unknown = set(chosen) - set(PLACEHOLDERS)
        if unknown:
            from hybrid_memory.errors import ConfigurationError

            raise ConfigurationError(f"unknown PII kinds {sorted(unknown)}; choose from {sorted(PLACEHOLDERS)}")
        self.kinds = chosen

    def redact(self, text: str) -> Redaction:
        """Return ``text`` with PII replaced by typed placeholders, and the counts per type."""
        if not _MAYBE_PII.search(text):
            return Redaction(text, {})
        counts: Counter[str] = Counter()

        def sub(pattern: re.Pattern[str], kind: str, check: object, s: str) -> str:
            if kind not in self.kinds:
                return s

            def repl(m: re.Match[str]) -> str:
                if callable(check) and not check(m.group(0)):
                    return m.group(0)
                counts[kind] += 1
                return PLACEHOLDERS[kind]

            return pattern.sub(repl, s)

        out = sub(_EMAIL, "EMAIL", None, text)
        out = sub(_ID, "ID_NUMBER", lambda s: china_id_valid(re.sub(r"\s", "", s)), out)
        out = sub(_CARD, "BANK_CARD", lambda s: luhn_valid(re.sub(r"[ -]", "", s)), out)
        for pattern in (_CN_MOBILE, _CN_LANDLINE, _INTL, _NANP):
            out = sub(pattern, "PHONE", _phone_digits_ok, out)
        return Redaction(out, dict(counts))


def _phone_digits_ok(s: str) -> bool:
    return 7 <= sum(c.isdigit() for c in s) <= 15


_DEFAULT = PiiRedactor()


def redact_pii(text: str) -> str:
    """Redact every supported PII type in ``text`` (see :class:`PiiRedactor`).

    Example:
        >>> redact_pii("call +1 415-555-0134 or (415) 555-0199")
        'call [PHONE] or [PHONE]'
    """
    return _DEFAULT.redact(text).text
