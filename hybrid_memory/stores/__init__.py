"""Storage backends: :class:`LocalStore` (embedded SQLite, the default) and ``WeaviateStore``."""
