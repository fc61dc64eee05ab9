"""canopy_lit/studies/retest_recipe.py: a committed adapter tested again replaces only the test keys, and only when
the in-domain ones (whose gold did not change) come out as committed."""

from __future__ import annotations

from canopy_lit.studies.retest_recipe import in_domain_mismatches, merged, rows


def test_the_retest_replaces_every_test_key_and_keeps_the_training_ones() -> None:
    old = {"val/decision_accuracy": 0.57, "test/tatqa/n": 321.0, "test/nq/n": 277.0, "train/seconds": 600.0}
    new = {"test/tatqa/n": 319.0, "test/nq/n": 277.0, "train/seconds": 40.0, "test/zero_shot/n": 319.0}
    assert merged(old, new) == {"test/nq/n": 277.0, "test/tatqa/n": 319.0, "test/zero_shot/n": 319.0,
                                "train/seconds": 600.0, "val/decision_accuracy": 0.57}  # fmt: skip


def test_an_in_domain_test_key_that_moved_is_flagged_and_tatqa_is_not() -> None:
    old = {"test/hotpotqa/decision_accuracy": 0.6052631735801697, "test/tatqa/decision_accuracy": 0.579}
    same = {"test/hotpotqa/decision_accuracy": 0.6052631735801697 + 1e-9, "test/tatqa/decision_accuracy": 0.583}
    assert in_domain_mismatches(old, same) == []
    moved = {**same, "test/hotpotqa/decision_accuracy": 0.61}
    assert in_domain_mismatches(old, moved) == ["test/hotpotqa/decision_accuracy"]


def test_every_recipe_row_is_retested_on_the_data_it_was_tested_on() -> None:
    """The 23 rows with committed adapters, each with its recorded benchmarks and seeded test subsets."""
    found = rows()
    assert len(found) == 23
    for row, overrides, data in found:
        assert not any(o.startswith(("hydra.", "trainer.max_time")) for o in overrides), row
        assert data["zero_shot"] == ["tatqa"] and data["split_seed"] == 0, row
        assert data["options"]["tatqa"]["max_questions"]["test"] == 126, row
