"""The read path: the recall planner, re-ranking and the context block builder."""
