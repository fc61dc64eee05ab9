"""Learning-rate schedules for ``model.scheduler``: ``(optimizer, total_steps) -> LRScheduler`` factories.

``NodeEncoderModule.configure_optimizers`` calls the configured one (a ``_partial_`` block, as in
lightning-hydra-template) with the optimizer and ``total_steps``, the trainer's estimate of the optimizer steps
of the whole fit, and steps it every optimizer step. Any callable of that form can be named instead.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import torch
from annotated_types import Interval

Decay = Literal["constant", "linear", "cosine"]  # model.scheduler.decay: the rate after warm-up


def warmup_schedule(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup_ratio: Annotated[float, Interval(ge=0, lt=1)] = 0.0,
    decay: Decay = "constant",
    min_lr_ratio: Annotated[float, Interval(ge=0, le=1)] = 0.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``warmup_ratio`` of the steps, then a flat or decaying rate.

    Args:
        optimizer: the optimizer whose rates are scaled (each group's initial ``lr`` is the peak).
        total_steps: optimizer steps of the whole fit (at least 1 is used).
        warmup_ratio: share of the steps with linear warm-up; step ``s < W`` runs at ``(s + 1) / (W + 1)`` of the peak.
        decay: after warm-up the rate stays flat (``constant``) or decays (``linear`` / ``cosine``) to
            ``min_lr_ratio`` of the peak at the last step.
        min_lr_ratio: the decayed rate at the last step, as a share of the peak.

    Raises:
        ValueError: ``decay`` is not one of constant, linear, cosine.
    """
    if decay not in ("constant", "linear", "cosine"):
        raise ValueError(f"model.scheduler.decay must be constant, linear or cosine, got {decay!r}")
    total = max(int(total_steps), 1)
    warm = int(warmup_ratio * total)

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / (warm + 1)
        if decay == "constant":
            return 1.0
        frac = min((step - warm) / max(total - warm, 1), 1.0)
        shape = 1.0 - frac if decay == "linear" else 0.5 * (1.0 + math.cos(math.pi * frac))
        return min_lr_ratio + (1.0 - min_lr_ratio) * shape

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
