"""GroupedBatchSampler: batches of one item's instances, sharded over DDP processes by the sampler itself
(disjoint instances, the same number of batches per rank)."""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence

from torch.utils.data import DistributedSampler

from canopy_lit.data.examples import Example


def item_groups(examples: Sequence[Example]) -> list[list[int]]:
    """Indices of the instances of each (question, gold item), in first-seen order."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, e in enumerate(examples):
        groups.setdefault((e.question_id, e.item_id), []).append(i)
    return list(groups.values())


def fill_batches(indices: Sequence[int], n_batches: int, batch_size: int) -> list[list[int]]:
    """Split ``indices`` in order into exactly ``n_batches`` non-empty batches.

    Batches hold ``batch_size`` indices while the rest still fills the remaining batches (so one
    process gives plain consecutive chunks); a share larger than ``n_batches * batch_size`` spreads
    the surplus evenly instead of dropping it.
    """
    if len(indices) < n_batches:
        raise ValueError(f"{len(indices)} instances cannot fill {n_batches} batches")
    out: list[list[int]] = []
    pos = 0
    for j in range(n_batches):
        rest, left = len(indices) - pos, n_batches - j
        size = max(min(batch_size, rest - (left - 1)), -(-rest // left))
        out.append(list(indices[pos : pos + size]))
        pos += size
    return out


class GroupedBatchSampler(DistributedSampler):
    """Whole batches of example indices for one process of ``num_replicas``, groups kept together.

    Each group (the instances of one (question, gold item), or single instances) goes to exactly one
    process: the (optionally shuffled) group sequence is cut into ``num_replicas`` contiguous shares
    at the group boundaries nearest to equal instance counts. Every process then yields the same
    number of batches, ``ceil(N / (num_replicas * batch_size))``, filled in order, so DDP ranks stay
    in step and every instance is seen exactly once per epoch (no padding duplicates, no drops).
    With one process the batches are consecutive ``batch_size`` chunks of the group order.

    The order depends only on ``(seed, epoch)``: Lightning calls ``set_epoch`` at every epoch start
    (also after a resume), and ``state_dict`` / ``load_state_dict`` carry the epoch in checkpoints.

    It subclasses ``DistributedSampler`` because Lightning leaves a loader whose sampler is one alone
    (``use_distributed_sampler=True`` would otherwise re-wrap it and break the grouping). Use it as a
    DataLoader ``sampler`` with ``batch_size=None`` over an :class:`ExampleDataset`.
    """

    def __init__(
        self,
        groups: Sequence[Sequence[int]],
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} outside [0, {num_replicas})")
        if batch_size < 1:
            raise ValueError(f"datamodule.batch_size must be >= 1, got {batch_size}")
        self.groups = [list(g) for g in groups if len(g)]
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = False
        n = sum(len(g) for g in self.groups)
        self.total_size = n
        self._len = -(-n // (num_replicas * batch_size)) if n else 0
        self.num_samples = self._len
        if n and self._len:
            # Fail at construction, not in the middle of an epoch: every share must fill its batches.
            self._shares(list(range(len(self.groups))))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "seed": self.seed}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.epoch = int(state.get("epoch", 0))

    def _order(self) -> list[int]:
        order = list(range(len(self.groups)))
        if self.shuffle:
            random.Random(f"{self.seed}:{self.epoch}").shuffle(order)
        return order

    def _shares(self, order: list[int]) -> list[list[int]]:
        """Instance indices of each process: contiguous runs of whole groups, near-equal sizes."""
        sizes = [len(self.groups[g]) for g in order]
        total = sum(sizes)
        shares: list[list[int]] = [[] for _ in range(self.num_replicas)]
        r, done = 0, 0
        for g, size in zip(order, sizes, strict=True):
            # Move on to the next process once this one is closer to its target without the group.
            target = total * (r + 1) / self.num_replicas
            if r < self.num_replicas - 1 and shares[r] and done + size / 2 > target:
                r += 1
            shares[r].extend(self.groups[g])
            done += size
        short = [i for i, s in enumerate(shares) if len(s) < self._len]
        if short:
            raise ValueError(
                f"{total} instances in {len(self.groups)} groups cannot give {self.num_replicas} processes "
                f"{self._len} batches each (processes {short} fall short): use fewer devices or more data"
            )
        return shares

    def batches(self) -> list[list[int]]:
        """This process's batches for the current epoch."""
        if not self._len:
            return []
        share = self._shares(self._order())[self.rank]
        return fill_batches(share, self._len, self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches())

    def __len__(self) -> int:
        return self._len


