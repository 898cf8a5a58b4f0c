"""Observing a memory: the per-operation trace (what each call did, replayable) and in-process metrics."""
