"""canopy-lit: CANOPY's node encoder training and evaluation (Lightning + Hydra)."""

from canopy_lit import resolvers as _resolvers

_resolvers.register()  # the configs' ${if_gpu:...} must resolve wherever they are composed

__all__ = ["Compressor", "compress"]


def __getattr__(name: str) -> object:
    # ``import canopy_lit`` stays light (configs, reports): the pipeline loads on first use of the API.
    if name in __all__:
        from canopy_lit import api

        return getattr(api, name)
    raise AttributeError(f"module 'canopy_lit' has no attribute {name!r}")
