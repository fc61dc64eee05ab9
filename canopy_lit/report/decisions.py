"""Keep / split / drop decisions of the refinement, rebuilt from the kept leaf ranges a run records.

A tree's shape depends only on its leaf count and B, so the visited nodes of every item are
recovered exactly without the item's text (used by the decision plots and the evidence viewer).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from canopy_lit.report.runs import Run
from canopy_lit.types import Item, Leaf, Modality, Tree

DECISIONS = ("kept", "split", "dropped")


def tree_shape(n_leaves: int, branching: int) -> Tree:
    """The tree over ``n_leaves`` leaves with branching B: its shape depends on nothing else."""
    return Tree(Item("shape", Modality.TEXT, text=""), [Leaf(i) for i in range(n_leaves)], branching)


def tree_decisions(n_leaves: int, branching: int, leaf_ranges: Iterable[Sequence[int]]) -> Counter[str]:
    """Counts of the refinement's decisions on one item, from its retained leaf ranges.

    A visited node is *kept* (retained), *split* (an ancestor of a retained node: refinement
    descended) or *dropped* (a child of a split node that is neither). Nodes below a dropped
    or kept node were never visited. An item with nothing retained counts one dropped root.

    Raises:
        ValueError: a range that is no node of the tree (the run used another B).
    """
    tree = tree_shape(n_leaves, branching)
    try:
        kept = {tree.find(int(s), int(e)) for s, e in leaf_ranges}
    except KeyError as err:
        raise ValueError(f"leaf ranges do not match a B={branching} tree over {n_leaves} leaves: {err}") from err
    split = {a for v in kept for a in tree.ancestors(v)}
    out: Counter[str] = Counter()
    if not kept:
        out["dropped"] += 1
        return out
    for v in range(len(tree)):
        if v in kept:
            out["kept"] += 1
        elif v in split:
            out["split"] += 1
        elif int(tree.parent[v]) in split:
            out["dropped"] += 1
    return out


def run_decisions(run: Run) -> dict[str, Counter[str]]:
    """Modality -> decision counts over every item of every round of a run's records."""
    branching = int(run.setting("B") or 2)
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for rec in run.records():
        for rd in rec.get("rounds") or []:
            for k in rd.get("kept") or []:
                try:
                    out[str(k.get("modality", "?"))].update(
                        tree_decisions(int(k["n_leaves"]), branching, k.get("leaf_ranges") or [])
                    )
                except (KeyError, TypeError, ValueError):
                    out[str(k.get("modality", "?"))]["unmatched"] += 1
    return out
