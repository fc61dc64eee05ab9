"""``python -m canopy_lit.studies.frontier [choose | operating-points]``."""

import sys

from canopy_lit.studies.frontier import main

sys.exit(main())
