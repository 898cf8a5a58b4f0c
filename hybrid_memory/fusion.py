"""Re-export of :mod:`hybrid_memory.read.context` (the context block builder), kept for old imports."""

from hybrid_memory.read.context import CLOSE, OPEN, ContextFuser, detect_language, passes_floor, time_label

__all__ = ["CLOSE", "OPEN", "ContextFuser", "detect_language", "passes_floor", "time_label"]
