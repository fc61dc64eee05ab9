"""Quiet entry points: third-party warnings and notices that tell a canopy-lit user nothing are hidden.

Called by ``train.py`` and ``evaluate.py`` only (library code never filters globally, so a program that
imports canopy_lit sees every warning). ``CANOPY_LIT_VERBOSE=1`` shows them all again.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

VERBOSE_ENV = "CANOPY_LIT_VERBOSE"

# (message regex, category): each says nothing the user can act on.
_IGNORED_WARNINGS: tuple[tuple[str, type[Warning]], ...] = (
    # LoRA training freezes the backbone's dropout on purpose (model.backbone_dropout=false).
    (r"Found \d+ module\(s\) in eval mode", UserWarning),
)
# Lightning's product tips, logged at INFO on every Trainer.
_IGNORED_LOG_MESSAGES = ("litlogger", "LitLogger")
_LIGHTNING_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero", "lightning_utilities.core.rank_zero",
)


class _DropMessages(logging.Filter):
    def __init__(self, needles: tuple[str, ...]) -> None:
        super().__init__()
        self.needles = needles

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(n in message for n in self.needles)


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "").strip().lower() in {"1", "true", "yes"}


def quiet_third_party() -> None:
    """Hide deprecation notices of transformers / torch internals, Lightning's tips and the weight-loading
    progress bars for this process (nothing when ``CANOPY_LIT_VERBOSE=1``)."""
    if verbose():
        return
    # Deprecations raised inside library internals (e.g. Lightning's use of torch's LeafSpec): fixed by
    # upgrading the library, not by the user's code or config.
    for module in ("transformers", "peft", "torch", "lightning"):
        warnings.filterwarnings("ignore", category=FutureWarning, module=rf"{module}(\.|$)")
    for message, category in _IGNORED_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    drop = _DropMessages(_IGNORED_LOG_MESSAGES)
    for name in _LIGHTNING_LOGGERS:
        logging.getLogger(name).addFilter(drop)
    # "Loading weights: 100%|...": transformers reads this once, at its import.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
