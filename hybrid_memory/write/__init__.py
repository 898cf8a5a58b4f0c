"""The write path: session state, the writer and its judges, importance, buffer, extraction, summaries, lifecycle."""
