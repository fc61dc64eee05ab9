"""Lightning loggers as canopy-lit configures them (``configs/logger/``).

``WandbLogger`` is Lightning's, less one argument: Lightning always passes ``anonymous`` to ``wandb.init``
(None unless asked for), and wandb >= 0.19 answers any value of that retired setting with "The anonymous
setting has no effect and will be removed", a warning on every run that the user can do nothing about.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger


class WandbLogger(LightningWandbLogger):
    """``lightning.pytorch.loggers.WandbLogger`` (same arguments) without the retired ``anonymous`` setting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self._wandb_init.get("anonymous") is None:  # anonymous=True still reaches wandb, and its warning
            self._wandb_init.pop("anonymous", None)


__all__ = ["WandbLogger"]
