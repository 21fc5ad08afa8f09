"""``python -m acpgate`` runs the command line."""

from acpgate.cli import main

raise SystemExit(main())
