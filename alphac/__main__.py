"""``python -m alphac`` is the ``alphac`` command."""
from alphac.cli import main

raise SystemExit(main())
