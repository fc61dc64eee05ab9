"""Pairwise ranking loss over preference pairs (METHOD.md §1.2)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn


def pair_costs(
    pair_kind: torch.Tensor, costs: Mapping[int, float], dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """(N, P) per-pair costs c_k for :func:`pairwise_ranking_loss`'s ``pair_weight``, chosen by pair kind.

    Args:
        pair_kind: (N, P) integer kind code of each pair (e.g. ``canopy_lit.supervision.PairKind``).
        costs: kind code -> cost c > 0; pairs of any other kind (padding included) cost 1.
        dtype: of the result (the scores' dtype).

    Relations:
        c_k = 1 + Σ_kind (costs[kind] − 1) · [kind_k = kind]: each pair has one kind, so one term applies.
    """
    out = torch.ones(pair_kind.shape, dtype=dtype, device=pair_kind.device)
    for kind, cost in costs.items():
        out = out + (cost - 1.0) * (pair_kind == kind).to(dtype)
    return out


def pairwise_ranking_loss(
    winner_scores: torch.Tensor,
    loser_scores: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float = 20.0,
    reduction: str = "mean",
    margin: float = 0.0,
    weight: torch.Tensor | None = None,
    pair_weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """ℓ(q, v) = log(1 + Σ_{(a ≻ b) ∈ P(v)} exp(λ · [s(q, b) − s(q, a)])), computed with logsumexp.

    Args:
        winner_scores: (N, P) s(q, a) for each instance's pairs, padded to P pairs.
        loser_scores: (N, P) s(q, b), aligned with ``winner_scores``.
        mask: (N, P) bool, True for real pairs (None = all real). Padded pairs contribute nothing;
            an instance with no real pair has loss log(1) = 0.
        scale: λ, the temperature on score differences (paper: 20).
        reduction: ``"mean"`` over instances, ``"sum"`` or ``"none"`` (returns (N,)).
        margin: m >= 0 asks each winner to lead by m: x_k = λ · (s(q, b) − s(q, a) + m). 0 = the paper's loss.
        weight: (N,) non-negative per-instance weights (e.g. up-weighted "stop" instances); ``"mean"``
            becomes the weighted mean Σ w ℓ / Σ w, ``"sum"`` Σ w ℓ, ``"none"`` w ℓ.
        pair_weight: (N, P) positive per-pair costs c_k: ℓ = log(1 + Σ c_k exp(x_k)). A pair with c_k
            counts as c_k copies of itself, so its violation costs more (e.g. a gold child that must beat
            its parent: violating it drops gold). None = every c_k = 1, the paper's loss.

    Returns:
        Scalar loss, or (N,) per-instance losses for ``reduction="none"``.

    Relations:
        log(1 + Σ exp(x_k)) = logsumexp([0, x_1, ..., x_P]); padded x_k are set to -inf;
        c_k exp(x_k) = exp(x_k + log c_k).
    """
    if winner_scores.shape != loser_scores.shape or winner_scores.dim() != 2:
        raise ValueError(f"expected two (N, P) score tensors, got {tuple(winner_scores.shape)} and {tuple(loser_scores.shape)}")
    logits = scale * (loser_scores - winner_scores + margin)
    if pair_weight is not None:
        if pair_weight.shape != logits.shape:
            raise ValueError(f"pair_weight must be (N, P) = {tuple(logits.shape)}, got {tuple(pair_weight.shape)}")
        if bool((pair_weight <= 0).any()):
            raise ValueError("pair_weight must be > 0 (mask pairs out with mask)")
        logits = logits + pair_weight.to(logits).log()
    if mask is not None:
        logits = logits.masked_fill(~mask.bool(), float("-inf"))
    zero = logits.new_zeros(logits.shape[0], 1)
    per_instance = torch.logsumexp(torch.cat([zero, logits], dim=1), dim=1)
    if weight is not None:
        if weight.shape != per_instance.shape:
            raise ValueError(f"weight must be (N,) = {tuple(per_instance.shape)}, got {tuple(weight.shape)}")
        weight = weight.to(per_instance)
        per_instance = per_instance * weight
        if reduction == "mean":
            return per_instance.sum() / weight.sum().clamp_min(1e-12)
    if reduction == "mean":
        return per_instance.mean()
    if reduction == "sum":
        return per_instance.sum()
    if reduction == "none":
        return per_instance
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


class PairwiseRankingLoss(nn.Module):
    """Module wrapper of :func:`pairwise_ranking_loss` (so λ lives in the config).

    Args:
        scale: λ (paper: 20).
        margin: m, the lead each winner must keep (paper: 0).
    """

    def __init__(self, scale: float = 20.0, margin: float = 0.0) -> None:
        super().__init__()
        self.scale = scale
        self.margin = margin

    def forward(
        self,
        winner_scores: torch.Tensor,
        loser_scores: torch.Tensor,
        mask: torch.Tensor | None = None,
        weight: torch.Tensor | None = None,
        pair_weight: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return pairwise_ranking_loss(
            winner_scores, loser_scores, mask, self.scale, margin=self.margin, weight=weight, pair_weight=pair_weight
        )
