"""Training examples: each instance (q, v, P(v)) rendered to node inputs by the run's own ``Hierarchy``
(``render_instance``), exactly as inference renders them, and the dataset that holds them."""

from __future__ import annotations

from dataclasses import dataclass

from torch.utils.data import Dataset

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.supervision import Instance, PairKind
from canopy_lit.types import NodeInput, Tree


@dataclass
class Example:
    """One instance, rendered: node inputs of v and its children, pairs as local indices into ``inputs``.

    With hard negatives, their inputs follow the children and their pairs (kind ``HARD_NEGATIVE``)
    follow P(v)'s.
    """

    question: str
    inputs: list[NodeInput]  # inputs[0] = v, then children in leaf order, then hard negatives
    pairs: list[tuple[int, int]]  # (winner, loser) local indices
    kinds: list[PairKind]  # per pair: what it compares (PADDING is no kind of a real pair)
    benchmark: int
    depth: int
    question_id: str = ""
    item_id: str = ""
    stop: bool = False  # v fully gold: refinement should keep it whole (else descend)
    # late pooling only: (item key, node id) of each input, its node in its item's tree (``render_instance``)
    nodes: list[tuple[str, int]] | None = None

    @property
    def texts(self) -> list[str]:
        return [x.text for x in self.inputs]


def item_key(benchmark_id: int, tree: Tree) -> str:
    """The key of a tree's item in a datamodule (late pooling): benchmark id and item id."""
    return f"{benchmark_id}:{tree.item.id}"


def render_instance(
    inst: Instance,
    hierarchy: Hierarchy,
    benchmark_id: int,
    input_cache: dict | None = None,
    item_spans: dict[str, tuple[str, list[list[tuple[int, int]]]]] | None = None,
) -> Example:
    """Node inputs of v, its children and its hard negatives (``hierarchy.node_input``, as inference)
    plus the re-indexed pairs: P(v) first, then gold node ≻ hard negative.

    ``item_spans`` (late pooling): each input's (item key, node id) goes into ``Example.nodes`` and each
    item's text and node ranges (``hierarchy.node_spans``, once per item) into ``item_spans``.
    """
    tree = inst.tree

    def render(t: Tree, n: int) -> NodeInput:
        # A node's rendering depends on its item and leaf range only (as in the node-embedding cache).
        key = (t.item.id, int(t.starts[n]), int(t.ends[n]))
        if input_cache is not None and key in input_cache:
            return input_cache[key]
        x = hierarchy.node_input(t, n)
        if input_cache is not None:
            input_cache[key] = x
        return x

    ids = [inst.node, *tree.children[inst.node]]
    local = {n: i for i, n in enumerate(ids)}
    inputs = [render(tree, n) for n in ids] + [render(t, n) for t, n in inst.hard_negatives]
    pairs = [(local[a], local[b]) for a, b in inst.pairs]
    hard = [(local[g], len(ids) + k) for g, k in inst.hard_pairs]
    nodes = None
    if item_spans is not None:
        owners = [(tree, n) for n in ids] + list(inst.hard_negatives)
        nodes = []
        for t, n in owners:
            key = item_key(benchmark_id, t)
            if key not in item_spans:
                item_spans[key] = hierarchy.node_spans(t)
            nodes.append((key, int(n)))
    return Example(
        inst.question,
        inputs,
        pairs + hard,
        inst.pair_kinds + [PairKind.HARD_NEGATIVE] * len(hard),
        benchmark_id,
        inst.depth,
        inst.question_id,
        tree.item.id,
        inst.stop,
        nodes,
    )


class ExampleDataset(Dataset):
    """Examples by index, or a list of examples for a list of indices (one whole batch per sampler step)."""

    def __init__(self, examples: list[Example]) -> None:
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int | list[int]) -> Example | list[Example]:
        if isinstance(i, list):
            return [self.examples[j] for j in i]
        return self.examples[i]


