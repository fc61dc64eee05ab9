"""The studies behind experiments/: the generators of every committed table, plot and generated block, and the
scripts that ran or recount a study. Each is a module run from a source checkout, e.g.
``python -m canopy_lit.studies.refresh --check`` (CI) or ``python -m canopy_lit.studies.frontier choose``.

They read and write the checkout's ``experiments/`` (``PROJECT_ROOT``); the library imports nothing from here.
"""

from pathlib import Path

# The source checkout these modules belong to: its experiments/ holds the run archives and the write-ups.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
