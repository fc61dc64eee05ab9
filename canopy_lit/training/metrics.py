"""Refinement-decision accuracy (METHOD.md §1.3): share of V_i nodes whose every preference holds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torchmetrics import Metric


def pairs_hold(
    winner_scores: torch.Tensor, loser_scores: torch.Tensor, mask: torch.Tensor, tie_ok: torch.Tensor
) -> torch.Tensor:
    """(N,) bool: does every real pair of each instance hold?

    Same rule as ``canopy_lit.supervision.pair_holds``: a child beating its parent needs
    ``>=`` (refinement keeps a child that ties), every other preference a strict ``>``.

    Args:
        winner_scores: (N, P) s(q, a).
        loser_scores: (N, P) s(q, b).
        mask: (N, P) bool, real pairs.
        tie_ok: (N, P) bool, the winner is a child of the loser.
    """
    holds = (winner_scores > loser_scores) | (tie_ok.bool() & (winner_scores >= loser_scores))
    return (holds | ~mask.bool()).all(dim=1)


KINDS = ("descend", "stop")  # decision type of an instance: v partly gold (descend) or fully gold (stop)


class DecisionAccuracy(Metric):
    """Decision accuracy overall, per benchmark, per tree depth of v and per decision type.

    Args:
        benchmarks: benchmark names, in the order of the ``benchmark`` ids passed to ``update``.
        max_depth: depths above it are pooled into ``max_depth``.
        groups: group name -> benchmark names pooled into ``<group>/decision_accuracy`` (instances
            summed, not benchmark means), e.g. ``{"in_domain": [...], "zero_shot": ["tatqa"]}``.

    ``compute()`` returns ``{"decision_accuracy": ..., "<bench>/decision_accuracy": ...,
    "depth<d>/decision_accuracy": ..., "decision_accuracy/stop": ..., "decision_accuracy/descend": ...,
    "<bench>/depth<d>/decision_accuracy": ..., "<bench>/decision_accuracy/stop": ...}`` for every group
    that saw at least one instance (the type keys only when ``update`` got ``stop``). ``counts()`` gives
    the instances per group. Both read the states summed over all processes.
    """

    full_state_update = False
    higher_is_better = True

    def __init__(
        self,
        benchmarks: Sequence[str] = (),
        max_depth: int = 16,
        groups: Mapping[str, Sequence[str]] | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.benchmarks = list(benchmarks)
        unknown = sorted({b for g in (groups or {}).values() for b in g} - set(self.benchmarks))
        if unknown:
            raise ValueError(f"decision-accuracy groups name unknown benchmarks {unknown} (known: {self.benchmarks})")
        self.groups = {str(k): [self.benchmarks.index(b) for b in v] for k, v in (groups or {}).items() if v}
        self.max_depth = max_depth
        n = len(self._names())
        self.add_state("correct", torch.zeros(n, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("total", torch.zeros(n, dtype=torch.long), dist_reduce_fx="sum")

    def update(
        self,
        winner_scores: torch.Tensor,
        loser_scores: torch.Tensor,
        mask: torch.Tensor,
        tie_ok: torch.Tensor,
        benchmark: torch.Tensor,
        depth: torch.Tensor,
        stop: torch.Tensor | None = None,
        in_tree: torch.Tensor | None = None,
    ) -> None:
        """Args: (N, P) scores and masks as in :func:`pairs_hold`; (N,) long ``benchmark`` ids and ``depth``;
        optional (N,) bool ``stop`` (v fully gold) for the per-type groups; optional (N, P) bool ``in_tree``
        (the batch's ``pair_in_tree``): only these pairs count, as a refinement decision compares v with
        its children only, never with another item's nodes (hard negatives are for the loss)."""
        if in_tree is not None:
            mask = mask.bool() & in_tree.bool()
        ok = pairs_hold(winner_scores, loser_scores, mask, tie_ok).long()
        nb = max(len(self.benchmarks), 1)
        nd = self.max_depth + 1
        b = benchmark.clamp(0, nb - 1)
        d = depth.clamp(0, self.max_depth)
        slots = [
            torch.zeros_like(benchmark),  # overall
            1 + b,
            1 + nb + d,
            1 + nb + nd + b * nd + d,  # per benchmark and depth
        ]
        if stop is not None:
            kind = stop.long().to(benchmark.device)
            base = 1 + nb + nd + nb * nd
            slots += [base + kind, base + 2 + 2 * b + kind]
        for s in slots:
            self.correct.scatter_add_(0, s, ok)
            self.total.scatter_add_(0, s, torch.ones_like(ok))

    def compute(self) -> dict[str, torch.Tensor]:
        out = {
            name: self.correct[i].float() / self.total[i].float()
            for i, name in enumerate(self._names())
            if self.total[i] > 0 and not (not self.benchmarks and name.startswith("all/"))
        }
        for name, (correct, total) in self._pooled().items():
            if total > 0:
                out[f"{name}/decision_accuracy"] = correct.float() / total.float()
        out.setdefault("decision_accuracy", torch.zeros((), device=self.total.device))
        return out

    def _pooled(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """(correct, total) of each group: the per-benchmark slots (1 + benchmark id) summed."""
        return {
            name: (self.correct[[1 + i for i in ids]].sum(), self.total[[1 + i for i in ids]].sum())
            for name, ids in self.groups.items()
        }

    def counts(self) -> dict[str, int]:
        """Instances seen per group, summed over processes (``compute`` keys with ``decision_accuracy`` -> ``n``).

        Must be called on every process (it syncs like ``compute``).
        """
        with self.sync_context(should_sync=self._to_sync, should_unsync=self._should_unsync):
            total = self.total.tolist()
            pooled = {name: int(t) for name, (_, t) in self._pooled().items()}
        out = {
            k.replace("decision_accuracy", "n"): int(total[i])
            for i, k in enumerate(self._names())
            if total[i] > 0 and not (not self.benchmarks and k.startswith("all/"))
        }
        return out | {f"{name}/n": t for name, t in pooled.items() if t > 0}

    def _names(self) -> list[str]:
        benches = self.benchmarks or ["all"]
        depths = range(self.max_depth + 1)
        return (
            ["decision_accuracy"]
            + [f"{b}/decision_accuracy" for b in benches]
            + [f"depth{d}/decision_accuracy" for d in depths]
            + [f"{b}/depth{d}/decision_accuracy" for b in benches for d in depths]
            + [f"decision_accuracy/{k}" for k in KINDS]
            + [f"{b}/decision_accuracy/{k}" for b in benches for k in KINDS]
        )
