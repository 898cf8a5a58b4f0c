"""``python -m hybrid_memory.cli``."""

from hybrid_memory.cli import main

raise SystemExit(main())
