"""``shard=I/N``: the spec, the partition of a run's questions, the config checks and the merge's refusals of
shard sets that are not one run (``canopy_lit.data.shards``, ``canopy_lit.eval.shards``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose

from canopy_lit.data.shards import Shard, shard_questions
from canopy_lit.eval.shards import ShardFolder, ShardMergeError, check_shards
from canopy_lit.schema import ConfigError, validate_eval_config


@pytest.mark.parametrize(("spec", "shard"), [("0/1", Shard(0, 1)), ("2/3", Shard(2, 3)), (" 1 / 4 ", Shard(1, 4)),
                                              (None, None)])  # fmt: skip
def test_a_spec_is_a_zero_based_index_of_n(spec: str | None, shard: Shard | None) -> None:
    assert Shard.parse(spec) == shard
    assert shard is None or str(shard) == spec.replace(" ", "")


@pytest.mark.parametrize("spec", ["3/3", "1/0", "0/0", "-1/3", "a/b", "1", "1/3/5", "", 1, 0.5])
def test_a_bad_spec_names_the_rule(spec: object) -> None:
    with pytest.raises(ValueError, match=r"shard must be I/N with 0 <= I < N \(0-based"):
        Shard.parse(spec)


@pytest.mark.parametrize("n", [1, 2, 5, 7, 12])
def test_the_shards_partition_the_questions_in_their_order(n: int) -> None:
    questions = [f"q{i}" for i in range(n)]
    for count in range(1, n + 1):
        parts = [Shard(i, count).select(questions) for i in range(count)]
        assert sorted(q for p in parts for q in p) == sorted(questions)  # every question once
        assert all(p for p in parts)  # none empty while count <= n
        assert all(p == [q for q in questions if q in p] for p in parts)  # each in the run's order
        assert max(map(len, parts)) - min(map(len, parts)) <= 1  # balanced


def test_more_shards_than_questions_is_a_config_error() -> None:
    assert shard_questions(["a", "b", "c"], None) == ["a", "b", "c"]
    assert shard_questions(["a", "b", "c"], "1/2") == ["b"]
    with pytest.raises(ConfigError, match="shard=0/4: the run has 3 questions, fewer than its 4 shards"):
        shard_questions(["a", "b", "c"], "0/4")


def _problems(*overrides: str) -> list[str]:
    try:
        validate_eval_config(compose("evaluate", overrides=list(overrides)))
    except ConfigError as err:
        return err.problems
    return []


def test_the_config_check_takes_qa_and_evidence_shards_only(hydra_ctx) -> None:
    assert _problems("shard=1/3") == []
    assert _problems("experiment=evidence", "shard=0/2") == []
    assert _problems("shard=3/3")[0].startswith("shard must be I/N with 0 <= I < N")
    (probe,) = _problems("experiment=probe", "shard=0/2")
    assert probe.startswith("shard=0/2: mode=probe runs whole")
    (carve,) = [p for p in _problems("method=carve", "shard=0/2") if p.startswith("shard=")]
    assert "runs whole" in carve


def _folder(name: str, shard: str, *, limit: int = 6, k: int = 5) -> ShardFolder:
    parsed = Shard.parse(shard)
    assert parsed is not None
    return ShardFolder(Path(name), parsed, {"limit": limit, "k": k}, {"fingerprint": str(k), "settings": {"retrieval.k": k}})


def test_a_merge_takes_exactly_the_n_shards_of_one_run() -> None:
    a, b, c = _folder("a", "0/3"), _folder("b", "1/3"), _folder("c", "2/3")
    assert check_shards([c, a, b]) == [a, b, c]
    refusals = {
        "shard 1/3 missing: merging needs all 3 shards (given: 0/3 (a), 2/3 (c))": [a, c],
        "shard 0/3 given twice: a and a2": [a, _folder("a2", "0/3"), b, c],
        "a is shard 0/3 but d is shard 1/2: the shards of one run share N": [a, _folder("d", "1/2")],
        "a and b2 were run with other settings: retrieval.k 5 vs 3": [a, _folder("b2", "1/3", k=3), c],
        "a and c2 were run with other settings: limit 6 vs 9": [a, b, _folder("c2", "2/3", limit=9)],
        "no shard folders given": [],
    }
    for message, folders in refusals.items():
        with pytest.raises(ShardMergeError) as err:
            check_shards(folders)
        assert str(err.value).startswith(message), str(err.value)
