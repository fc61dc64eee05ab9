"""Reports from finished run folders, apart from evaluation: ``python -m canopy_lit.report {tables,plots,view,wandb}``.

- ``runs``: run folders -> ``Run`` (metrics.json, run.json axes, resolved config, records);
- ``tables``: studies -> markdown + CSV; ``plots``: studies -> PNG; ``decisions``: keep / split /
  drop decisions rebuilt from recorded leaf ranges;
- ``viewer`` (+ ``browser``): static HTML evidence viewer of one run; ``wandb``: W&B reporting.

Imports only flow downward (runs <- tables <- plots <- wandb; runs <- decisions <- viewer), and
nothing in ``canopy_lit.eval`` imports this package: evaluation writes run folders, reports read them.
"""
