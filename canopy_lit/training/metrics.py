"""Refinement-decision accuracy (METHOD.md §1.3): share of V_i nodes whose every preference holds."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torchmetrics import Metric


def pairs_hold(
    winner_scores: torch.Tensor, loser_scores: torch.Tensor, mask: torch.Tensor, tie_ok: torch.Tensor
) -> torch.Tensor:
    """(N,) bool: does every real pair of each instance hold?

    Same rule as ``canopy_lit.supervision.pair_holds``: a child beating its parent needs
    ``>=`` (refinement keeps a child that ties), every other preference a strict ``>``.

    Args:
        winner_scores, loser_scores: (N, P) s(q, a), s(q, b).
        mask: (N, P) bool, real pairs.
        tie_ok: (N, P) bool, the winner is a child of the loser.
    """
    holds = (winner_scores > loser_scores) | (tie_ok.bool() & (winner_scores >= loser_scores))
    return (holds | ~mask.bool()).all(dim=1)


class DecisionAccuracy(Metric):
    """Decision accuracy overall, per benchmark and per tree depth of v.

    Args:
        benchmarks: benchmark names, in the order of the ``benchmark`` ids passed to ``update``.
        max_depth: depths above it are pooled into ``max_depth``.

    ``compute()`` returns ``{"decision_accuracy": ..., "<bench>/decision_accuracy": ...,
    "depth<d>/decision_accuracy": ...}`` for every group that saw at least one instance.
    """

    full_state_update = False
    higher_is_better = True

    def __init__(self, benchmarks: Sequence[str] = (), max_depth: int = 16, **kwargs) -> None:
        super().__init__(**kwargs)
        self.benchmarks = list(benchmarks)
        self.max_depth = max_depth
        nb = max(len(self.benchmarks), 1)
        self.add_state("correct", torch.zeros(nb + max_depth + 2, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("total", torch.zeros(nb + max_depth + 2, dtype=torch.long), dist_reduce_fx="sum")

    def update(
        self,
        winner_scores: torch.Tensor,
        loser_scores: torch.Tensor,
        mask: torch.Tensor,
        tie_ok: torch.Tensor,
        benchmark: torch.Tensor,
        depth: torch.Tensor,
    ) -> None:
        """Args: (N, P) scores and masks as in :func:`pairs_hold`; (N,) long ``benchmark`` ids and ``depth``."""
        ok = pairs_hold(winner_scores, loser_scores, mask, tie_ok).long()
        nb = max(len(self.benchmarks), 1)
        slots = [
            torch.zeros_like(benchmark),  # overall
            1 + benchmark.clamp(0, nb - 1),
            1 + nb + depth.clamp(0, self.max_depth),
        ]
        for s in slots:
            self.correct.scatter_add_(0, s, ok)
            self.total.scatter_add_(0, s, torch.ones_like(ok))

    def compute(self) -> dict[str, torch.Tensor]:
        out = {
            name: self.correct[i].float() / self.total[i].float()
            for i, name in enumerate(self._names())
            if self.total[i] > 0 and not (not self.benchmarks and name.startswith("all/"))
        }
        out.setdefault("decision_accuracy", torch.tensor(0.0))
        return out

    def counts(self) -> dict[str, int]:
        """Instances seen per group (same keys as ``compute`` with ``n`` for ``decision_accuracy``)."""
        return {k.replace("decision_accuracy", "n"): int(self.total[i]) for i, k in enumerate(self._names()) if self.total[i] > 0}

    def _names(self) -> list[str]:
        return (
            ["decision_accuracy"]
            + [f"{b}/decision_accuracy" for b in (self.benchmarks or ["all"])]
            + [f"depth{d}/decision_accuracy" for d in range(self.max_depth + 1)]
        )
