"""Plain data model shared by every stage: items, their region trees, questions.

Everything here is a dataclass that round-trips through JSON (``to_dict`` /
``from_dict``), so corpora, predictions and caches can be stored as JSONL.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

import numpy as np

# The evidence loop's stages, in order: records time each (``time/<stage>_s``) and reports read them by name
STAGES = ("retrieve", "route", "trees", "encode", "refine", "aggregation", "critic", "reader")


class Modality(str, Enum):
    TEXT = "text"
    TABLE = "table"
    IMAGE = "image"
    VIDEO = "video"


@dataclass(frozen=True)
class Table:
    """A table payload: column names and rows of cell strings (ragged rows are padded on render)."""

    header: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass(frozen=True)
class VideoRef:
    """A video segment: a file and a time window in seconds (``end=None`` = to the end of the file)."""

    path: str
    start: float = 0.0
    end: float | None = None


@dataclass
class Item:
    """One retrievable unit: a passage, a table, an image or a video segment.

    Exactly one payload field is set, matching ``modality``. ``sentences`` lets a
    benchmark hand over pre-split text (HotpotQA): the leaves are then these
    sentences verbatim and ``text`` is their concatenation. Field reference and the
    JSONL form readers accept without code: docs/how-to/custom-data.md.

    Attributes:
        id: globally unique, ``"<benchmark>:<source id>"``.
        modality: which payload is set (text, table, image, video).
        title: shown with every node of the item.
        text: text payload; its leaves are sentences with character offsets into it.
        sentences: pre-split text payload; each sentence is a leaf.
        table: ``Table(header, rows, caption)``; each row is a leaf, the header travels with every node.
        image: image file; one leaf. ``meta["caption"]`` is the text a text-only encoder scores.
        video: ``VideoRef(path, start, end)`` in seconds; 30-s clips from ``start`` are the leaves.
        meta: free-form (readers record provenance here).
    """

    id: str
    modality: Modality
    title: str = ""
    text: str | None = None
    sentences: list[str] | None = None
    table: Table | None = None
    image: str | None = None
    video: VideoRef | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.modality = Modality(self.modality)
        payload = {
            Modality.TEXT: self.text is not None or self.sentences is not None,
            Modality.TABLE: self.table is not None,
            Modality.IMAGE: self.image is not None,
            Modality.VIDEO: self.video is not None,
        }
        if not payload[self.modality]:
            raise ValueError(f"item {self.id!r}: modality {self.modality.value} but no matching payload")
        if self.sentences is not None and self.text is None:
            self.text = " ".join(self.sentences)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["modality"] = self.modality.value
        return {k: v for k, v in d.items() if v is not None and v != {}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Item:
        d = dict(d)
        if isinstance(d.get("table"), dict):
            d["table"] = Table(**d["table"])
        if isinstance(d.get("video"), dict):
            d["video"] = VideoRef(**d["video"])
        return cls(**d)


@dataclass(frozen=True)
class Leaf:
    """A minimal region of an item (METHOD.md §1.1 step 2).

    text: a sentence, ``[char_start, char_end)`` into ``Item.text``; table: row
    ``index``; video: the clip ``[t_start, t_end)`` in seconds; image: the image.
    """

    index: int
    text: str = ""
    char_start: int = -1
    char_end: int = -1
    t_start: float = 0.0
    t_end: float = 0.0


@dataclass(frozen=True)
class Node:
    """A contiguous leaf range ``[start, end)`` of one item: the unit that is scored and kept."""

    item_id: str
    start: int
    end: int

    @property
    def n_leaves(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Frame:
    """A visual input: an image file, or one frame of a video at ``t`` seconds."""

    path: str
    t: float | None = None


@dataclass
class NodeInput:
    """What an encoder sees for one node: text, plus frames/images for visual nodes.

    Tree builders (``hierarchy/``) produce it and encoders consume it; it lives here so that
    encoders need not import the hierarchy.
    """

    text: str
    frames: list[Frame] = field(default_factory=list)


class Tree:
    """A region tree over an item's leaves with branching factor ``branching``.

    Nodes are stored in arrays indexed by node id (0 = root, breadth-first
    order), so refinement and supervision walk integers, not objects:

    - ``starts[i], ends[i]``: leaf range of node i (half-open)
    - ``parent[i]``: parent id (-1 for the root); ``depth[i]``: root = 0
    - ``children[i]``: tuple of child ids in leaf order (empty for a leaf node)

    Every internal node splits its range into ``min(B, n_leaves)`` contiguous,
    near-equal parts (sizes differ by at most one, larger parts first).
    """

    def __init__(self, item: Item, leaves: list[Leaf], branching: int) -> None:
        if branching < 2:
            raise ValueError(f"branching factor must be >= 2, got {branching}")
        if not leaves:
            raise ValueError(f"item {item.id!r} has no leaves")
        self.item = item
        self.leaves = leaves
        self.branching = branching
        starts, ends, parent, depth, children = [0], [len(leaves)], [-1], [0], []
        i = 0
        while i < len(starts):  # breadth-first expansion
            s, e = starts[i], ends[i]
            n = e - s
            kids: list[int] = []
            if n > 1:
                parts = min(branching, n)
                base, extra = divmod(n, parts)
                lo = s
                for p in range(parts):
                    hi = lo + base + (1 if p < extra else 0)
                    kids.append(len(starts))
                    starts.append(lo)
                    ends.append(hi)
                    parent.append(i)
                    depth.append(depth[i] + 1)
                    lo = hi
            children.append(tuple(kids))
            i += 1
        self.starts = np.asarray(starts, dtype=np.int64)
        self.ends = np.asarray(ends, dtype=np.int64)
        self.parent = np.asarray(parent, dtype=np.int64)
        self.depth = np.asarray(depth, dtype=np.int64)
        self.children: list[tuple[int, ...]] = children

    def __len__(self) -> int:
        return len(self.starts)

    def __repr__(self) -> str:
        return f"Tree(item={self.item.id!r}, leaves={self.n_leaves}, nodes={len(self)}, B={self.branching})"

    @property
    def n_leaves(self) -> int:
        return len(self.leaves)

    @property
    def root(self) -> int:
        return 0

    def node(self, i: int) -> Node:
        return Node(self.item.id, int(self.starts[i]), int(self.ends[i]))

    def nodes(self) -> list[Node]:
        return [self.node(i) for i in range(len(self))]

    def is_leaf(self, i: int) -> bool:
        return not self.children[i]

    def leaf_range(self, i: int) -> range:
        return range(int(self.starts[i]), int(self.ends[i]))

    def ancestors(self, i: int) -> list[int]:
        """Proper ancestors of node i, nearest first."""
        out = []
        p = int(self.parent[i])
        while p >= 0:
            out.append(p)
            p = int(self.parent[p])
        return out

    def find(self, start: int, end: int) -> int:
        """Node id covering exactly leaves ``[start, end)``; KeyError if no node does."""
        hits = np.flatnonzero((self.starts == start) & (self.ends == end))
        if len(hits) == 0:
            raise KeyError(f"no node covers leaves [{start}, {end}) of item {self.item.id!r}")
        return int(hits[0])  # a single-child chain cannot occur (parts >= 2), so this is unique


@dataclass
class Question:
    """A benchmark question with its gold answers and gold evidence.

    ``gold`` maps item id -> gold leaf indices on that item's leaves; an empty
    list means the item is gold but its span could not be located (treated as
    whole-gold: it yields no training instance). ``choices`` holds the options
    of multiple-choice questions (answer = option letter).

    Attributes:
        id: unique within its benchmark.
        text: the question.
        answers: gold answers; a question without one is skipped in QA mode (``no_answer``).
        benchmark: the benchmark's name.
        gold: item id -> gold leaf indices (``canopy_lit.data.gold_leaves`` computes them from spans).
        choices: options of a multiple-choice question, or None.
        meta: free-form; ``split`` (train / val / test) fixes the question's split and ``doc`` (document
            ids) keeps questions that share a document in one split (``canopy_lit.data.splits``).
    """

    id: str
    text: str
    answers: list[str]
    benchmark: str = ""
    gold: dict[str, list[int]] = field(default_factory=dict)
    choices: list[str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Question:
        return cls(**d)


@dataclass
class Evidence:
    """Regions kept from one item: the item, its tree and the retained node ids (leaf order).

    ``text``: the block the reader gets when a refiner rewrites the regions' text (token-level
    compression, ``refine=longllmlingua``); None = the regions rendered as they are.
    """

    tree: Tree
    node_ids: list[int]
    round: int = 0
    text: str | None = None

    @property
    def item(self) -> Item:
        return self.tree.item

    def nodes(self) -> list[Node]:
        return [self.tree.node(i) for i in self.node_ids]

    def leaf_ranges(self) -> list[tuple[int, int]]:
        return [(int(self.tree.starts[i]), int(self.tree.ends[i])) for i in self.node_ids]
