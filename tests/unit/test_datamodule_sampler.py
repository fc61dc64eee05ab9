"""GroupedBatchSampler: disjoint shares per rank, equal batch counts, seeded by epoch, state in checkpoints."""

from __future__ import annotations

import random

import pytest
from torch.utils.data import DistributedSampler

from canopy_lit.data.datamodule import PreferenceDataModule
from canopy_lit.data.sampler import GroupedBatchSampler, fill_batches


def _groups(seed: int = 0, n: int = 40) -> list[list[int]]:
    """Hand-made groups of 1-7 consecutive indices (like the V_i instances of one gold item)."""
    rng = random.Random(seed)
    out, i = [], 0
    for _ in range(n):
        k = rng.randint(1, 7)
        out.append(list(range(i, i + k)))
        i += k
    return out


def _old_batches(groups: list[list[int]], batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    """The pre-DDP single-process sampler: shuffled groups, filled into consecutive batch_size chunks."""
    order = list(range(len(groups)))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    flat = [i for g in order for i in groups[g]]
    return [flat[b : b + batch_size] for b in range(0, len(flat), batch_size)]


def test_one_process_keeps_the_previous_batches() -> None:
    groups = _groups()
    s = GroupedBatchSampler(groups, 16, seed=3)
    for epoch in range(3):
        s.set_epoch(epoch)
        assert list(s) == _old_batches(groups, 16, 3, epoch)
    assert len(s) == len(_old_batches(groups, 16, 3, 0))


@pytest.mark.parametrize("world", [2, 3, 4])
def test_ranks_disjoint_complete_equal_length(world: int) -> None:
    groups = _groups(1)
    owner = {i: g for g, idx in enumerate(groups) for i in idx}
    n = sum(map(len, groups))
    for epoch in range(3):
        per_rank = []
        for rank in range(world):
            s = GroupedBatchSampler(groups, 8, seed=0, num_replicas=world, rank=rank)
            s.set_epoch(epoch)
            batches = list(s)
            assert len(batches) == len(s) == -(-n // (world * 8))  # same number of batches on every rank
            assert all(batches)
            per_rank.append([i for b in batches for i in b])
        flat = [i for r in per_rank for i in r]
        assert sorted(flat) == list(range(n))  # every instance exactly once: no padding, no drops
        rank_groups = [{owner[i] for i in r} for r in per_rank]
        for a in range(world):
            for b in range(a + 1, world):
                assert not rank_groups[a] & rank_groups[b]  # a group lives on one rank only


def test_order_depends_on_seed_and_epoch_only() -> None:
    groups = _groups(2)
    a, b = GroupedBatchSampler(groups, 4, seed=5), GroupedBatchSampler(groups, 4, seed=5)
    a.set_epoch(1)
    b.set_epoch(1)
    assert list(a) == list(b) == list(a)  # iterating does not advance the epoch (a resume replays nothing)
    b.set_epoch(2)
    assert list(a) != list(b)
    assert list(GroupedBatchSampler(groups, 4, shuffle=False)) == fill_batches(
        range(sum(map(len, groups))), len(a), 4
    )


def test_state_dict_round_trip_through_the_datamodule() -> None:
    """A checkpoint's datamodule state restores the train sampler's epoch, before or after it exists."""
    from canopy_lit.data.examples import Example
    from canopy_lit.hierarchy import NodeInput

    ex = [Example(f"q{i // 3}", [NodeInput("v")], [], [], 0, 0, f"q{i // 3}", "item") for i in range(30)]
    dm = PreferenceDataModule(["x"], batch_size=4, group_by_item=True)
    dm.examples = {"train": ex}
    s = dm.sampler("train")
    s.set_epoch(4)  # what Lightning does at the start of epoch 4
    state = dm.state_dict()
    assert state["train_sampler"]["epoch"] == 4

    fresh = PreferenceDataModule(["x"], batch_size=4, group_by_item=True)
    fresh.examples = {"train": ex}
    fresh.load_state_dict(state)  # Lightning restores the datamodule before building loaders
    assert list(fresh.sampler("train")) == list(s)
    assert isinstance(fresh.train_dataloader().sampler, DistributedSampler)  # Lightning leaves it alone


def test_too_little_data_for_the_ranks_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="processes"):
        GroupedBatchSampler([[0, 1, 2, 3, 4]], 4, num_replicas=2, rank=0)


def test_fill_batches_spreads_a_larger_share() -> None:
    assert fill_batches(range(10), 3, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [len(b) for b in fill_batches(range(10), 2, 4)] == [5, 5]
    assert [len(b) for b in fill_batches(range(5), 3, 4)] == [3, 1, 1]


def test_workers_follow_the_epoch() -> None:
    """Persistent workers + pinned memory: each epoch's loader output is that epoch's sampler order."""
    from canopy_lit.data.examples import Example
    from canopy_lit.hierarchy import NodeInput

    ex = [Example(f"q{i // 3}", [NodeInput(f"v{i}")], [], [], 0, 0, f"q{i // 3}", "item") for i in range(40)]
    dm = PreferenceDataModule(["x"], batch_size=4, group_by_item=True, num_workers=2, persistent_workers=True)
    dm.examples = {"train": ex}
    loader = dm.train_dataloader()
    for epoch in (0, 1):
        loader.sampler.set_epoch(epoch)
        got = [b.question_ids for b in loader]
        assert got == [[ex[i].question_id for i in b] for b in dm.samplers["train"].batches()]
