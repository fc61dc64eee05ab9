"""canopy_lit/studies/recount_near_ties.py: the before -> after of the descend rule's tie tolerance, from node rows."""

from __future__ import annotations

from canopy_lit.studies.recount_near_ties import near_tie_counts


def _rows(scores: list[float]) -> list[dict]:
    """One item's binary tree over two leaves: root, then its two leaves (breadth-first, root-relative)."""
    return [{"question": "q", "item": "i", "depth": d, "root_relative": s} for d, s in zip([0, 1, 1], scores, strict=True)]


def test_a_child_just_below_its_parent_descends_only_under_the_tolerant_rule() -> None:
    counts = near_tie_counts(_rows([0.0, -1e-6, -0.2]), branching=2, delta=0.0, where="rows")
    assert counts["comparisons"] == 2 and counts["in_band"] == 1 and counts["exact_ties"] == 0
    # strict: no child >= the root, the item stays whole; tolerant: the near-tie child is kept, a leaf dropped
    assert counts["items_changed"] == 1 and (counts["pruned_strict"], counts["pruned_tolerant"]) == (0, 1)


def test_gaps_outside_the_band_and_exact_ties_move_nothing() -> None:
    counts = near_tie_counts(_rows([0.0, 0.0, -1e-3]) + [{**r, "item": "j"} for r in _rows([0.0, 0.05, -0.2])],
                             branching=2, delta=0.0, where="rows")  # fmt: skip
    assert counts["exact_ties"] == 1 and counts["in_band"] == 0 and counts["items_changed"] == 0
    assert counts["items"] == 2 and counts["pruned_strict"] == counts["pruned_tolerant"] == 2
    shifted = near_tie_counts(_rows([0.0, 0.02 - 5e-6, -0.2]), branching=2, delta=0.02, where="rows")
    assert shifted["in_band"] == 1 and shifted["items_changed"] == 1  # the band sits at s(v) + δ
