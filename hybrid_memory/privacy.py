"""Re-exports :mod:`hybrid_memory.text.privacy` (PII detection and redaction), where the code lives now.

Kept so that ``hybrid_memory.privacy`` keeps importing the same public names.
"""

from __future__ import annotations

from hybrid_memory.text.privacy import (
    PLACEHOLDERS,
    PiiRedactor,
    Redaction,
    china_id_valid,
    luhn_valid,
    redact_pii,
)

__all__ = [
    "PLACEHOLDERS",
    "PiiRedactor",
    "Redaction",
    "china_id_valid",
    "luhn_valid",
    "redact_pii",
]
