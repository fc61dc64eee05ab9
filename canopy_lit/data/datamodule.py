"""PreferenceDataModule: (q, v, P(v)) training instances from gold-span mappings (METHOD.md §1.2).

Every gold item of every question becomes a tree; every node of V_i becomes one
instance with its preference pairs. Nodes are rendered by the run's own
``Hierarchy`` (``cfg.tree``) with ``node_input``, exactly as inference renders them
(text, plus frames / describer text for visual nodes). Every distinct node text and
question is tokenised once per dataset; a batch of 16 instances only pads and
stacks ids. Batches come from :class:`GroupedBatchSampler`, which shards them over
DDP processes itself (disjoint instances, the same number of batches per rank).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any

import lightning as L
from annotated_types import Ge, Interval
from torch.utils.data import DataLoader, SequentialSampler

from canopy_lit.data.benchmark import load_benchmark
from canopy_lit.data.collate import PreferenceCollate, Tokenize
from canopy_lit.data.examples import Example, ExampleDataset, render_instance
from canopy_lit.data.sampler import GroupedBatchSampler, item_groups
from canopy_lit.data.splits import carve_val, split_questions
from canopy_lit.encoders.base import EncoderInput
from canopy_lit.errors import ConfigError
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.supervision import Instance, add_hard_negatives, training_instances
from canopy_lit.supervision import InstanceStats as SplitStats
from canopy_lit.types import Question, Tree

log = logging.getLogger(__name__)
_UNSET = object()

SPLITS = ("train", "val", "test")
# Hard negatives only shape training: val / test batches stay P(v)-only, so selection and test
# numbers remain comparable with runs trained without them.
HARD_NEGATIVE_SPLITS = ("train",)
# the poolings whose batches differ (late ones carry items); cross pooling reads the per-node batches
NODE_POOLINGS = ("node", "late", "late_region")




def _named(benchmarks: Mapping[str, Mapping[str, Any] | None] | Sequence[str] | str | None) -> dict[str, dict[str, Any]]:
    """Benchmark names (a name, a list, or name -> options) as name -> options."""
    if not benchmarks:
        return {}
    if isinstance(benchmarks, str):
        return {benchmarks: {}}
    if isinstance(benchmarks, Mapping):
        return {str(k): dict(v or {}) for k, v in benchmarks.items()}
    return {str(b): {} for b in benchmarks}


def _flat(value: Any, prefix: str) -> dict[str, Any]:
    """Nested mappings as ``{"a.b.c": leaf}`` (one entry per setting, so a difference names its key); leaves
    become plain values, so a checkpoint holding them still loads with ``torch.load(weights_only=True)``."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}"))
        return out
    return {prefix: _plain(value)}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Sequence):
        return [_plain(v) for v in value]
    return str(value)  # e.g. a Path


def _show(settings: Mapping[str, Any], key: str) -> str:
    return repr(settings[key]) if key in settings else "unset"



class PreferenceDataModule(L.LightningDataModule):
    """Instances (q, v, P(v)) from the configured benchmarks, split by ``split_questions``.

    Args:
        benchmarks: names (or name -> options) of the in-domain benchmarks: train, val and test splits.
        zero_shot: names (or name -> options) of out-of-domain benchmarks evaluated **zero-shot**: only
            their test split is loaded, never trained or validated on (the paper's protocol: TAT-QA and
            2WikiMultiHopQA). Their ids follow the in-domain ones in ``benchmark_names``.
        options: name -> options for ``canopy_lit.data.load_benchmark`` (``path``, reader options), plus
            ``max_questions`` (int or {split: int}): a seeded random subset of each split's questions.
        tree: the run's ``Hierarchy`` (``cfg.tree``): builds the trees and renders every node exactly
            as evaluation does (``node_input``: same text, same frames / describer text).
        branching: tree branching factor B when no ``tree`` is given (default 2); with a ``tree`` it
            must match ``tree.branching``.
        batch_size: instances per batch and process (paper: 16).
        num_workers: DataLoader knobs (collate only pads cached ids,
            so workers mostly overlap host-to-device copies; pinned memory enables async copies).
        pin_memory: see ``num_workers``.
        persistent_workers: see ``num_workers``.
        seed: the training seed: batch order only.
        split_seed: seed of the train / val / test split and of the ``max_questions`` subsets (default 0,
            as evaluation's ``data.seed``). Kept apart from ``seed``, so that another training seed trains on
            the same questions and never on the test questions of the split evaluation reads; the adapter
            records it (``split_record``), and evaluate.py refuses a split made with another seed.
        val_fraction: share of training questions moved to validation when the benchmark has no val split.
        group_by_item: training batches keep each (question, gold item)'s instances together, so shared
            nodes are encoded once per batch (cheaper steps; groups are still shuffled).
        hard_negatives: n > 0 adds, to every train instance, n nodes of its question's distractor items
            (delivered, not gold) that each gold node of {v} ∪ children(v) must beat in the loss
            (``supervision.add_hard_negatives``); never in val / test, never in decision accuracy.
        node_pooling: the encoder's ``node_pooling`` (``train.py`` sets it from ``encoder.node_pooling``).
            ``late`` / ``late_region``: batches carry each node's item (tokenised once, ``LateNodes``) and its
            character ranges, so the module pools it from one whole-item forward, as inference does; ``node``:
            node tokens, each node encoded alone.
    """

    def __init__(
        self,
        benchmarks: Mapping[str, Mapping[str, Any] | None] | Sequence[str] = ("hotpotqa",),
        options: Mapping[str, Mapping[str, Any] | None] | None = None,
        zero_shot: Mapping[str, Mapping[str, Any] | None] | Sequence[str] = (),
        tree: Hierarchy | None = None,
        branching: Annotated[int, Ge(2)] | None = None,
        batch_size: Annotated[int, Ge(1)] = 16,
        num_workers: Annotated[int, Ge(0)] = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        seed: int = 0,
        val_fraction: Annotated[float, Interval(ge=0, lt=1)] = 0.1,
        group_by_item: bool = False,
        hard_negatives: Annotated[int, Ge(0)] = 0,
        split_seed: int = 0,
        node_pooling: str = "node",
    ) -> None:
        super().__init__()
        self.node_pooling = "node"
        self.set_node_pooling(node_pooling)
        if int(hard_negatives) < 0:
            raise ValueError(f"datamodule.hard_negatives must be >= 0, got {hard_negatives}")
        in_domain, zero = _named(benchmarks), _named(zero_shot)
        both = sorted(set(in_domain) & set(zero))
        if both:
            raise ValueError(
                f"datamodule: {both} listed both in benchmarks (trained on) and zero_shot (never trained on)"
            )
        if not in_domain:
            raise ValueError("datamodule.benchmarks is empty: nothing to train on")
        self.benchmark_options: dict[str, dict[str, Any]] = {**in_domain, **zero}
        self.zero_shot_names = list(zero)
        for name, opts in (options or {}).items():
            if name in self.benchmark_options:  # options of benchmarks not selected are ignored
                self.benchmark_options[name].update(opts or {})
        self.benchmark_names = list(self.benchmark_options)
        self.in_domain_names = list(in_domain)
        if tree is None:
            tree = Hierarchy(2 if branching is None else int(branching))
        elif branching is not None and int(branching) != tree.branching:
            raise ValueError(
                f"datamodule.branching={branching} differs from tree.branching={tree.branching}: "
                "set tree.branching only (datamodule.tree renders the training nodes)"
            )
        self.hierarchy = tree
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.persistent_workers = persistent_workers and num_workers > 0
        self.seed = seed
        self.split_seed = int(split_seed)
        self.val_fraction = val_fraction
        self.group_by_item = group_by_item
        self.hard_negatives = int(hard_negatives)
        self.collate = PreferenceCollate()
        self.examples: dict[str, list[Example]] = {}
        self.stats: dict[str, dict[str, SplitStats]] = {}
        self.samplers: dict[str, GroupedBatchSampler] = {}
        self._train_epoch = 0  # restored from a checkpoint before the train sampler exists

    # --------------------------------------------------------------- wiring
    @property
    def late(self) -> bool:
        """Late pooling: batches carry items and node spans (``node_pooling`` late or late_region)."""
        return self.node_pooling != "node"

    def set_node_pooling(self, node_pooling: str) -> None:
        """The encoder's node pooling, before :meth:`setup` renders the examples (they differ: late examples
        name each node's place in its item)."""
        if node_pooling not in NODE_POOLINGS:
            raise ValueError(f"node_pooling must be one of {', '.join(NODE_POOLINGS)}, got {node_pooling!r}")
        if getattr(self, "examples", None) and (node_pooling != "node") != self.late:
            raise RuntimeError("set the node pooling before setup(): the examples are rendered for the other one")
        self.node_pooling = node_pooling

    def set_tokenizer(self, tokenize: Tokenize, pretokenize: bool = True, late: Callable[[Sequence[str]], list[Any]] | None = None) -> None:
        """The encoder's tokenizer; collate output then carries token tensors (ids cached per dataset).

        ``pretokenize``: tokenise the loaded splits now; False leaves each split to its first loader
        (``train.py``: the test split's tokens are not held through fit). The ids are the same either way.
        ``late``: the encoder's ``late_tokenize``, which late pooling tokenises each item with.
        """
        self.collate.tokenize = tokenize
        if late is not None:
            self.collate.late_tokenize = late
        elif self.late:
            raise ValueError(f"node_pooling={self.node_pooling} needs the encoder's late_tokenize (set_tokenizer(..., late=))")
        if pretokenize:
            self.pretokenize()

    def pretokenize(self, splits: Sequence[str] | None = None) -> int:
        """Tokenise every distinct text-only node input and question of the loaded ``splits`` (default: all) once."""
        if self.collate.tokenize is None or not self.examples:
            return 0
        inputs: list[EncoderInput] = []
        items: list[str] = []
        for split, examples in self.examples.items():
            if splits is not None and split not in splits:
                continue
            for e in examples:
                inputs.append(e.question)
                if e.nodes is not None:  # late: the items, not the node texts
                    items.extend(k for k, _ in e.nodes)
                else:
                    inputs.extend(e.inputs)
        added = self.collate.pretokenize(inputs) + self.collate.pretokenize_items(items)
        if added:
            log.info("pre-tokenised %d distinct texts%s", added, f" ({', '.join(splits)})" if splits else "")
        return added

    @classmethod
    def from_instances(
        cls,
        splits: Mapping[str, Sequence[Instance]],
        benchmarks: Sequence[str],
        branching: int | None = None,
        **kwargs: Any,
    ) -> PreferenceDataModule:
        """A datamodule over ready-made instances (tests, custom data): ``{"train": [...], "val": [...], ...}``."""
        dm = cls(benchmarks=list(benchmarks), branching=branching, **kwargs)
        ids = {b: i for i, b in enumerate(dm.benchmark_names)}
        cache: dict = {}
        spans = dm.collate.items if dm.late else None
        dm.examples = {
            s: [render_instance(x, dm.hierarchy, ids.get(x.benchmark, 0), cache, spans) for x in insts]
            for s, insts in splits.items()
        }
        dm.pretokenize()
        return dm

    # --------------------------------------------------------------- loading
    def _split(self, bench: Any, split: str, options: dict[str, Any]) -> list[Question]:
        qs = list(split_questions(bench, split, seed=self.split_seed))
        cap = options.get("max_questions")
        if isinstance(cap, Mapping):
            cap = cap.get(split)
        if cap is not None and len(qs) > int(cap):
            rng = random.Random(f"{self.split_seed}:{bench.name}:{split}")
            qs = rng.sample(qs, int(cap))
        return qs

    def setup(self, stage: str | None = None) -> None:
        if self.examples:
            return
        input_cache: dict = {}
        out: dict[str, list[Example]] = {s: [] for s in SPLITS}
        for b_id, (name, options) in enumerate(self.benchmark_options.items()):
            opts = {k: v for k, v in options.items() if k not in {"max_questions"}}
            bench = load_benchmark(name, **opts)
            trees: dict[str, Tree] = {}
            if name in self.zero_shot_names:
                # Zero-shot: the adapter never sees this benchmark; only its held-out test split is read.
                splits = {"train": [], "val": [], "test": self._split(bench, "test", options)}
            else:
                splits = {s: self._split(bench, s, options) for s in SPLITS}
            if not splits["val"] and splits["train"]:
                # No val split for this benchmark: hold out whole document groups of its training questions.
                splits["val"], splits["train"] = carve_val(splits["train"], self.val_fraction, self.split_seed)
            self.stats[name] = {}
            for s, qs in splits.items():
                st = SplitStats()
                insts = training_instances(qs, bench.items, self.hierarchy, name, trees, st)
                if self.hard_negatives and s in HARD_NEGATIVE_SPLITS:
                    k = add_hard_negatives(insts, qs, bench.candidates, bench.items, self.hierarchy, self.hard_negatives, trees)
                    log.info("%s %s: %d hard-negative nodes on %d instances", name, s, k, len(insts))
                self.stats[name][s] = st
                spans = self.collate.items if self.late else None
                out[s].extend(render_instance(x, self.hierarchy, b_id, input_cache, spans) for x in insts)
            log.info(
                "%s: %s",
                name,
                ", ".join(
                    f"{s} {st.questions} q / {st.instances} inst" for s, st in self.stats[name].items()
                ),
            )
        self.examples = out
        self.pretokenize()

    def summary(self) -> dict[str, int]:
        return {f"{s}/instances": len(v) for s, v in self.examples.items()}

    # --------------------------------------------------------------- loaders
    def _replicas(self) -> tuple[int, int]:
        """(world size, global rank) of the attached trainer; (1, 0) without one."""
        trainer = getattr(self, "trainer", None)
        if trainer is None:
            return 1, 0
        return int(trainer.world_size), int(trainer.global_rank)

    def sampler(self, split: str) -> GroupedBatchSampler:
        """This process's batch sampler of ``split`` (train: shuffled per epoch; val/test: in order)."""
        data = self.examples.get(split) or []
        if not data:
            raise RuntimeError(
                f"no {split} instances: check the configured benchmarks ({self.benchmark_names})"
            )
        train = split == "train"
        groups = item_groups(data) if train and self.group_by_item else [[i] for i in range(len(data))]
        world, rank = self._replicas()
        sampler = GroupedBatchSampler(groups, self.batch_size, shuffle=train, seed=self.seed, num_replicas=world, rank=rank)
        if train:
            sampler.set_epoch(self._train_epoch)
        self.samplers[split] = sampler
        return sampler

    def _overfit_batches(self) -> int | float:
        """The attached trainer's ``overfit_batches`` (0 without a trainer, or when not overfitting)."""
        return getattr(getattr(self, "trainer", None), "overfit_batches", 0) or 0

    def _fixed_batches_loader(self, overfit: int | float) -> DataLoader:
        """The first batches of epoch 0's training order, replayed every epoch and validated on
        (``trainer.overfit_batches``: N batches, or a fraction of them): can the model learn these at all?
        Lightning would swap the batch sampler for a ``SequentialSampler`` over single examples; a sequential
        sampler over whole batches it leaves alone."""
        batches = list(self.sampler("train"))
        n = int(overfit) if overfit >= 1 else max(1, math.ceil(float(overfit) * len(batches)))
        data = ExampleDataset(self.examples["train"])
        fixed = [data[b] for b in batches[:n]]
        return DataLoader(fixed, sampler=SequentialSampler(fixed), batch_size=None, collate_fn=self.collate)  # type: ignore[arg-type]

    def _loader(self, split: str) -> DataLoader:
        self.pretokenize((split,))  # a no-op once the split's texts are cached (set_tokenizer, an earlier loader)
        if split in ("train", "val") and self._overfit_batches():
            return self._fixed_batches_loader(self._overfit_batches())
        # batch_size=None: the sampler yields whole batches (lists of indices) and shards them itself.
        return DataLoader(
            ExampleDataset(self.examples.get(split) or []),
            sampler=self.sampler(split),
            batch_size=None,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers,
            collate_fn=self.collate,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    # --------------------------------------------------------------- checks
    def check_splits(self, test: bool = True) -> None:
        """Every in-domain benchmark has train and val instances and, with ``test``, every benchmark has
        test instances; call after ``setup`` and before fitting.

        Raises:
            ConfigError: one line per empty split, naming the benchmark and its question counts.
        """
        problems = []
        for name, stats in self.stats.items():
            zero_shot = name in self.zero_shot_names
            needed = ["test"] if zero_shot else ["train", "val", "test"]
            for split in needed if test else [s for s in needed if s != "test"]:
                if stats[split].instances:
                    continue
                counts = ", ".join(f"{s} {st.questions}" for s, st in stats.items())
                fix = "set test=false" if split == "test" else "list it under datamodule.zero_shot (test only)"
                problems.append(
                    f"datamodule: benchmark {name} has no {split} instances (questions per split: {counts}): "
                    f"add questions{'' if zero_shot and split == 'test' else ', or ' + fix}"
                )
        for split in ("train", "val", "test") if test else ("train", "val"):
            if not self.stats and not self.examples.get(split):
                problems.append(f"datamodule: no {split} instances in {self.benchmark_names}")
        if problems:
            raise ConfigError(problems)

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The settings that decide which instances exist and how they are batched, flat ``key -> value``.

        Checkpoints store it; a resume must match it (:meth:`check_fingerprint`). Loader mechanics
        (workers, pinned memory) are left out: they never change a batch.
        """
        return {
            "benchmarks": list(self.in_domain_names),
            "zero_shot": list(self.zero_shot_names),
            **_flat(self.benchmark_options, "options"),
            "tree.branching": self.hierarchy.branching,
            "tree.renderer": self.hierarchy.fingerprint,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "split_seed": self.split_seed,
            "val_fraction": self.val_fraction,
            "group_by_item": self.group_by_item,
            "hard_negatives": self.hard_negatives,
            # late batches carry items, not node texts; left out at "node", so older checkpoints still resume
            **({"node_pooling": self.node_pooling} if self.late else {}),
        }

    @property
    def split_record(self) -> dict[str, Any]:
        """What an adapter trained on this data records of its split (``splits.record_adapter_split``): the
        split seed and the benchmarks trained on, which evaluate.py checks ``data.seed`` against."""
        return {
            "split_seed": self.split_seed,
            "benchmarks": list(self.in_domain_names),
            "zero_shot": list(self.zero_shot_names),
        }

    def check_fingerprint(self, stored: Mapping[str, Any], source: str = "the checkpoint") -> None:
        """Refuse to continue a training state made on other data than this datamodule's.

        Raises:
            ConfigError: one line naming each differing ``datamodule.*`` setting, stored vs. this run.
        """
        mine = self.fingerprint
        both = set(stored.get("benchmarks", [])) | set(stored.get("zero_shot", []))
        both &= set(self.benchmark_names)
        diffs = []
        for key in sorted(set(stored) | set(mine), key=lambda k: (k.startswith("options."), k)):
            if key.startswith("options.") and key.split(".")[1] not in both:
                continue  # a benchmark added or dropped: its names differ already
            if stored.get(key, _UNSET) != mine.get(key, _UNSET):
                diffs.append(f"datamodule.{key} {_show(stored, key)} there, {_show(mine, key)} here")
        if diffs:
            raise ConfigError([
                f"{source} was trained on other data than this run's datamodule ({'; '.join(diffs)}): resume "
                "with the same datamodule settings, or train in a new run folder (encoder.adapter=<run>/adapter "
                "starts from its adapter)"
            ])

    # --------------------------------------------------------------- checkpoint state
    def state_dict(self) -> dict[str, Any]:
        """The train sampler's epoch and seed and the data fingerprint (Lightning stores this in every checkpoint)."""
        sampler = self.samplers.get("train")
        return {
            "train_sampler": sampler.state_dict() if sampler else {"epoch": self._train_epoch, "seed": self.seed},
            "fingerprint": self.fingerprint,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the sampler position after checking the checkpoint was trained on this data.

        Raises:
            ConfigError: the checkpoint's data settings differ (:meth:`check_fingerprint`).
        """
        state = state_dict.get("train_sampler") or {}
        if "fingerprint" in state_dict:
            self.check_fingerprint(state_dict["fingerprint"])
        else:
            log.warning("the checkpoint has no datamodule fingerprint (an older version wrote it): "
                        "cannot check that it was trained on this data")
            if "seed" in state and int(state["seed"]) != self.seed:
                log.warning("checkpoint batch order used seed %s, this run uses %s", state["seed"], self.seed)
        self._train_epoch = int(state.get("epoch", 0))
        if "train" in self.samplers:
            self.samplers["train"].load_state_dict(state)
