"""``python -m canopy_lit.assets``: see ``canopy_lit.assets.cli``."""

from canopy_lit.assets.cli import main

raise SystemExit(main())
