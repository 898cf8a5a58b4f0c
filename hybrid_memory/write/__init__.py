"""The write path: session state, the writer and its judges, importance and its background refinement, buffer, extraction, summaries, lifecycle, source discipline."""
