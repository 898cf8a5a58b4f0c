"""Moved to :mod:`hybrid_memory.write.buffer`; this module re-exports its public names."""

from hybrid_memory.write.buffer import KeyFrameBuffer

__all__ = ["KeyFrameBuffer"]
