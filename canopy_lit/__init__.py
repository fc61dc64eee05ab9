"""canopy-lit: CANOPY's node encoder training and evaluation (Lightning + Hydra)."""

from canopy_lit import resolvers as _resolvers

_resolvers.register()  # the configs' ${if_gpu:...} must resolve wherever they are composed
