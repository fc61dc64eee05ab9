"""PreferenceDataModule: (q, v, P(v)) training instances from gold-span mappings (METHOD.md §1.2).

Every gold item of every question becomes a tree; every node of V_i becomes one
instance with its preference pairs. A batch holds 16 instances; its collate
renders each distinct node text once (v and its children, shared across
instances of the same item) and tokenises it once.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.supervision import Instance, instances_for
from canopy_lit.types import Item, Question, Tree

log = logging.getLogger(__name__)

Tokenize = Callable[[Sequence[str]], dict[str, torch.Tensor]]
SPLITS = ("train", "val", "test")


@dataclass
class Example:
    """One instance, rendered: texts of v and its children, pairs as local indices into ``texts``."""

    question: str
    texts: list[str]  # texts[0] = v, texts[1:] = children in leaf order
    pairs: list[tuple[int, int]]  # (winner, loser) local indices
    tie_ok: list[bool]  # winner is a child of loser (ties hold, as in refinement)
    benchmark: int
    depth: int
    question_id: str = ""
    item_id: str = ""


@dataclass
class SplitStats:
    questions: int = 0
    gold_items: int = 0
    instances: int = 0
    skipped_items: dict[str, int] = field(default_factory=dict)


def render_instance(
    inst: Instance, hierarchy: Hierarchy, benchmark_id: int, text_cache: dict | None = None
) -> Example:
    """Node texts of v and its children plus the pairs re-indexed into them."""
    tree = inst.tree
    ids = [inst.node, *tree.children[inst.node]]
    local = {n: i for i, n in enumerate(ids)}
    texts = []
    for n in ids:
        key = (tree.item.id, tree.branching, n)
        if text_cache is not None and key in text_cache:
            texts.append(text_cache[key])
            continue
        t = hierarchy.node_text(tree, n)
        if text_cache is not None:
            text_cache[key] = t
        texts.append(t)
    pairs = [(local[a], local[b]) for a, b in inst.pairs]
    tie_ok = [bool(tree.parent[a] == b) for a, b in inst.pairs]
    return Example(inst.question, texts, pairs, tie_ok, benchmark_id, inst.depth, inst.question_id, tree.item.id)


def build_instances(
    questions: Sequence[Question],
    items: Mapping[str, Item],
    hierarchy: Hierarchy,
    benchmark: str,
    tree_cache: dict[str, Tree] | None = None,
    stats: SplitStats | None = None,
) -> list[Instance]:
    """All (q, v) instances of the gold items of ``questions``; items missing from ``items`` are counted, not fatal."""
    trees = tree_cache if tree_cache is not None else {}
    out: list[Instance] = []
    for q in questions:
        if stats is not None:
            stats.questions += 1
        for item_id, gold in q.gold.items():
            item = items.get(item_id)
            if item is None:
                if stats is not None:
                    stats.skipped_items["missing_item"] = stats.skipped_items.get("missing_item", 0) + 1
                continue
            if item_id not in trees:
                trees[item_id] = hierarchy.build(item)
            tree = trees[item_id]
            try:
                inst = instances_for(q.id, q.text, tree, gold, benchmark or q.benchmark)
            except IndexError as err:
                raise ValueError(f"{benchmark}: question {q.id!r}, item {item_id!r}: {err}") from err
            if stats is not None:
                stats.gold_items += 1
                stats.instances += len(inst)
            out.extend(inst)
    return out


class ExampleDataset(Dataset):
    def __init__(self, examples: list[Example]) -> None:
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> Example:
        return self.examples[i]


class GroupedBatchSampler(Sampler[list[int]]):
    """Shuffled batches that keep the instances of one (question, gold item) together.

    The V_i nodes of one item are parents and children of each other, so a batch holding them
    together encodes fewer distinct node texts (about 20% fewer on the bundled data). Groups are
    shuffled every epoch (seeded); batches are filled with whole groups in that order.
    """

    def __init__(self, examples: Sequence[Example], batch_size: int, seed: int = 0) -> None:
        groups: dict[tuple[str, str], list[int]] = {}
        for i, e in enumerate(examples):
            groups.setdefault((e.question_id, e.item_id), []).append(i)
        self.groups = list(groups.values())
        self.batch_size = batch_size
        self.seed = seed
        self.epoch = 0
        self._len = sum(1 for _ in self._batches(random.Random(0)))

    def _batches(self, rng: random.Random):
        order = list(range(len(self.groups)))
        rng.shuffle(order)
        batch: list[int] = []
        for g in order:
            for i in self.groups[g]:
                batch.append(i)
                if len(batch) == self.batch_size:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def __iter__(self):
        rng = random.Random(f"{self.seed}:{self.epoch}")
        self.epoch += 1
        yield from self._batches(rng)

    def __len__(self) -> int:
        return self._len


class PreferenceCollate:
    """Examples -> one batch with each distinct node text and question tokenised once.

    Batch keys:
        ``node_tokens`` / ``query_tokens``: tokenised distinct texts (U, L) / (Q, L);
        ``node_texts`` / ``query_texts``: the distinct texts (U,) / (Q,);
        ``query_index``: (N,) row of each instance's question;
        ``winner`` / ``loser``: (N, P) rows into the distinct nodes, padded with 0;
        ``mask`` / ``tie_ok``: (N, P) bool; ``benchmark`` / ``depth``: (N,) long.
    """

    def __init__(self, tokenize: Tokenize | None = None) -> None:
        self.tokenize = tokenize

    def __call__(self, examples: Sequence[Example]) -> dict[str, Any]:
        node_row: dict[str, int] = {}
        query_row: dict[str, int] = {}
        n, p = len(examples), max(max((len(e.pairs) for e in examples), default=1), 1)
        winner = torch.zeros(n, p, dtype=torch.long)
        loser = torch.zeros(n, p, dtype=torch.long)
        mask = torch.zeros(n, p, dtype=torch.bool)
        tie_ok = torch.zeros(n, p, dtype=torch.bool)
        qidx = torch.empty(n, dtype=torch.long)
        for i, e in enumerate(examples):
            rows = [node_row.setdefault(t, len(node_row)) for t in e.texts]
            qidx[i] = query_row.setdefault(e.question, len(query_row))
            for k, ((a, b), tie) in enumerate(zip(e.pairs, e.tie_ok, strict=True)):
                winner[i, k], loser[i, k], mask[i, k], tie_ok[i, k] = rows[a], rows[b], True, tie
        batch: dict[str, Any] = {
            "node_texts": list(node_row),
            "query_texts": list(query_row),
            "query_index": qidx,
            "winner": winner,
            "loser": loser,
            "mask": mask,
            "tie_ok": tie_ok,
            "benchmark": torch.tensor([e.benchmark for e in examples], dtype=torch.long),
            "depth": torch.tensor([e.depth for e in examples], dtype=torch.long),
        }
        if self.tokenize is not None:
            batch["node_tokens"] = self.tokenize(batch["node_texts"])
            batch["query_tokens"] = self.tokenize(batch["query_texts"])
        return batch


class PreferenceDataModule(L.LightningDataModule):
    """Instances (q, v, P(v)) from the configured benchmarks, split by ``split_questions``.

    Args:
        benchmarks: names (or name -> options) of the benchmarks to train on.
        options: name -> options for ``canopy_lit.data.load_benchmark`` (``path``, reader options), plus
            ``max_questions`` (int or {split: int}): a seeded random subset of each split's questions.
        branching: tree branching factor B.
        batch_size: instances per batch (paper: 16).
        num_workers, pin_memory, persistent_workers: DataLoader knobs.
        seed: split seed and question-subsampling seed.
        val_fraction: share of training questions moved to validation when the benchmark has no val split.
        group_by_item: training batches keep each (question, gold item)'s instances together, so shared
            nodes are encoded once per batch (cheaper steps; groups are still shuffled).
    """

    def __init__(
        self,
        benchmarks: Mapping[str, Mapping[str, Any] | None] | Sequence[str] = ("hotpotqa",),
        options: Mapping[str, Mapping[str, Any] | None] | None = None,
        branching: int = 2,
        batch_size: int = 16,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        seed: int = 0,
        val_fraction: float = 0.1,
        group_by_item: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(benchmarks, str):
            benchmarks = [benchmarks]
        self.benchmark_options: dict[str, dict[str, Any]] = (
            {k: dict(v or {}) for k, v in benchmarks.items()}
            if isinstance(benchmarks, Mapping)
            else {b: {} for b in benchmarks}
        )
        for name, opts in (options or {}).items():
            if name in self.benchmark_options:  # options of benchmarks not selected are ignored
                self.benchmark_options[name].update(opts or {})
        self.benchmark_names = list(self.benchmark_options)
        self.hierarchy = Hierarchy(branching)
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.persistent_workers = persistent_workers and num_workers > 0
        self.seed = seed
        self.val_fraction = val_fraction
        self.group_by_item = group_by_item
        self.collate = PreferenceCollate()
        self.examples: dict[str, list[Example]] = {}
        self.stats: dict[str, dict[str, SplitStats]] = {}

    # --------------------------------------------------------------- wiring
    def set_tokenizer(self, tokenize: Tokenize) -> None:
        """The encoder's tokenizer; collate output then carries token tensors."""
        self.collate.tokenize = tokenize

    @classmethod
    def from_instances(
        cls,
        splits: Mapping[str, Sequence[Instance]],
        benchmarks: Sequence[str],
        branching: int = 2,
        **kwargs: Any,
    ) -> PreferenceDataModule:
        """A datamodule over ready-made instances (tests, custom data): ``{"train": [...], "val": [...], ...}``."""
        dm = cls(benchmarks=list(benchmarks), branching=branching, **kwargs)
        ids = {b: i for i, b in enumerate(dm.benchmark_names)}
        cache: dict = {}
        dm.examples = {
            s: [render_instance(x, dm.hierarchy, ids.get(x.benchmark, 0), cache) for x in insts]
            for s, insts in splits.items()
        }
        return dm

    # --------------------------------------------------------------- loading
    def _split(self, bench: Any, split: str, options: dict[str, Any]) -> list[Question]:
        from canopy_lit.data import split_questions

        qs = list(split_questions(bench, split, seed=self.seed))
        cap = options.get("max_questions")
        if isinstance(cap, Mapping):
            cap = cap.get(split)
        if cap is not None and len(qs) > int(cap):
            rng = random.Random(f"{self.seed}:{bench.name}:{split}")
            qs = rng.sample(qs, int(cap))
        return qs

    def setup(self, stage: str | None = None) -> None:
        if self.examples:
            return
        from canopy_lit.data import load_benchmark

        text_cache: dict = {}
        out: dict[str, list[Example]] = {s: [] for s in SPLITS}
        for b_id, (name, options) in enumerate(self.benchmark_options.items()):
            opts = {k: v for k, v in options.items() if k not in {"max_questions"}}
            bench = load_benchmark(name, **opts)
            trees: dict[str, Tree] = {}
            splits = {s: self._split(bench, s, options) for s in SPLITS}
            if not splits["val"] and splits["train"]:
                # No val split for this benchmark: hold out a slice of its training questions.
                k = max(1, int(round(len(splits["train"]) * self.val_fraction)))
                splits["val"], splits["train"] = splits["train"][:k], splits["train"][k:]
            self.stats[name] = {}
            for s, qs in splits.items():
                st = SplitStats()
                insts = build_instances(qs, bench.items, self.hierarchy, name, trees, st)
                self.stats[name][s] = st
                out[s].extend(render_instance(x, self.hierarchy, b_id, text_cache) for x in insts)
            log.info(
                "%s: %s",
                name,
                ", ".join(
                    f"{s} {st.questions} q / {st.instances} inst" for s, st in self.stats[name].items()
                ),
            )
        self.examples = out

    def summary(self) -> dict[str, int]:
        return {f"{s}/instances": len(v) for s, v in self.examples.items()}

    # --------------------------------------------------------------- loaders
    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        data = self.examples.get(split) or []
        if not data:
            raise RuntimeError(
                f"no {split} instances: check the configured benchmarks ({self.benchmark_names})"
            )
        loader_args: dict[str, Any] = {"batch_size": self.batch_size, "shuffle": shuffle}
        if shuffle and self.group_by_item:
            loader_args = {"batch_sampler": GroupedBatchSampler(data, self.batch_size, self.seed)}
        return DataLoader(
            ExampleDataset(data),
            **loader_args,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers,
            collate_fn=self.collate,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
