"""One call to compress retrieved evidence: ``canopy_lit.compress(question, items, adapter=..., budget=...)``.

    >>> from canopy_lit import compress
    >>> ev = compress("Who designed the Eiffel Tower?", ["The Eiffel Tower is ... designed by ...", ...],
    ...               adapter="quickstart", budget=300)
    >>> print(ev.text)           # what a reader gets, items in the order given
    >>> ev.regions               # the kept regions: item, leaf range, score, text

The items go through the same code as one round of the evidence loop (``pipeline.round.compress_round`` and the
reader cap of ``reader.budget``), so the evaluate path gives the same evidence for the same items: region trees
(branching B), node scores from the node encoder (fθ with ``adapter``, f0 without), parent-relative
refinement (δ = ``descend_margin``), optionally item pruning (``item_margin``: an item whose best kept region
scores more than this below the best item's is dropped whole; off by default, as in the paper) and, with a
``budget``, the reader cap: items are kept whole in the
order given while they fit, the first that does not is cut at a region (or token) boundary, the rest dropped.
No LLM is called. ``Compressor`` keeps the encoder loaded and the node embeddings cached across calls.

Input is checked before any encoding; each bad input is one error naming the item and field:

* ``question``: a non-empty ``str`` (``TypeError`` / ``ValueError``).
* ``items``: a sequence of items; one ``str``, dict or ``Item`` alone is one item (not one item per character).
  A text item that is empty or only whitespace is skipped (``CompressedEvidence.skipped``), never a block.
  Fields have their documented types (a dict ``title`` is a ``TypeError`` naming ``items[i].title``); a table
  needs ``header`` and ``rows``; text with a lone surrogate (not encodable as UTF-8) is a ``ValueError``.
* ``image`` / ``video.path``: an existing file with an image / video suffix (an image's first bytes must be one
  of PNG, JPEG, GIF, BMP, WebP, TIFF); with ``media_root`` a relative path resolves under it and no path may
  leave it (``..`` or a link out included).
* ``budget``: None or a whole number >= 1 (``True``, ``"lots"``, ``inf``, ``nan`` are refused).
* ``descend_margin``: a finite number; ``item_margin``: None or a finite number >= 0.
* size: an item longer than ``max_item_chars`` (default ``MAX_ITEM_CHARS``, text or table cells) is refused
  before any sentence splitting or encoding, so a huge input answers at once; split it into passages, or pass
  ``max_item_chars=None`` to take it whole (every node of it may be encoded: minutes for a megabyte).
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.pipeline.round import compress_round
from canopy_lit.reader.budget import EvidenceBudget, ReaderBlock
from canopy_lit.refine import AggregationCheck, ParentRelativeRefiner
from canopy_lit.scoring.scorers import node_scorer
from canopy_lit.types import Item, Modality, Question, Table, VideoRef

ItemLike = Item | str | Mapping[str, Any]
UNLIMITED = 10**9  # "no budget": the reader cap never binds
MAX_ITEM_CHARS = 20_000  # ~5k tokens, hundreds of sentences: well above a retrieved passage, seconds to compress
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff")
VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv", ".avi", ".webm", ".m4v", ".mpg", ".mpeg")
# First bytes of the image formats the describers open (a text file renamed .png is not an image).
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM", b"II*\x00", b"MM\x00*")


@dataclass(frozen=True)
class Region:
    """One kept region: leaves ``[start, end)`` of item ``item_id``, its node score and its text."""

    item_id: str
    start: int
    end: int
    score: float
    text: str


@dataclass
class CompressedEvidence:
    """What ``compress`` keeps of the items.

    Attributes:
        blocks: one evidence block per item that kept anything, in the order the items were given.
        regions: the kept regions (whole nodes the reader gets) with their node scores.
        tokens: tokens of ``blocks`` (``count_tokens``); ``item_tokens``: of the whole items.
        cut: ids of items cut or dropped by the budget.
        block_ids: the item id of each of ``blocks`` (framework adapters map blocks back to their inputs).
        skipped: ids of text items with no text (empty or whitespace only): no block, no tokens.
        dropped: ids of items dropped whole by ``item_margin`` (their best region scored too far below the
            best item's); empty when ``item_margin`` is None.
    """

    blocks: list[str]
    regions: list[Region]
    tokens: int
    item_tokens: int
    cut: list[str] = field(default_factory=list)
    block_ids: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n\n".join(self.blocks)

    @property
    def kept_ratio(self) -> float:
        return self.tokens / self.item_tokens if self.item_tokens else 0.0

    def __str__(self) -> str:
        return self.text


def as_item(item: ItemLike, index: int) -> Item:
    """An ``Item`` from an Item, a plain string (a text passage) or a dict (``Item.from_dict``'s fields).

    Raises:
        TypeError: not one of these, or a field of the wrong type (named ``items[index].<field>``).
        ValueError: a bad value (modality, a table without ``header``, ...), named the same way.
    """
    where = f"items[{index}]"
    if isinstance(item, Item):
        built = item
    elif isinstance(item, str):
        built = Item(f"item{index}", Modality.TEXT, text=item)
    elif isinstance(item, Mapping):
        built = _from_mapping(dict(item), index)
    else:
        raise TypeError(f"{where}: expected an Item, a str or a dict, got {type(item).__name__}")
    _check_fields(built, where)
    return built


_ITEM_FIELDS = frozenset(f.name for f in fields(Item))


def _from_mapping(d: dict[str, Any], index: int) -> Item:
    where = f"items[{index}]"
    unknown = sorted(str(k) for k in d if k not in _ITEM_FIELDS)
    if unknown:
        raise TypeError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(sorted(_ITEM_FIELDS))})")
    d.setdefault("id", f"item{index}")
    d.setdefault("modality", "text")
    _expect(d["modality"], str, f"{where}.modality")
    if d["modality"] not in {m.value for m in Modality}:
        raise ValueError(f"{where}.modality: {d['modality']!r} is not one of {', '.join(m.value for m in Modality)}")
    table, video = d.get("table"), d.get("video")
    if isinstance(table, Mapping):
        for key in ("header", "rows"):
            if key not in table:
                raise ValueError(f"{where}.table: no {key!r} field (a table is {{'header': [...], 'rows': [[...]]}})")
        extra = sorted(set(table) - {"header", "rows", "caption"})
        if extra:
            raise TypeError(f"{where}.table: unknown field {extra[0]!r} (fields: header, rows, caption)")
        d["table"] = Table(**table)
    if isinstance(video, Mapping):
        if "path" not in video:
            raise ValueError(f"{where}.video: no 'path' field")
        extra = sorted(set(video) - {"path", "start", "end"})
        if extra:
            raise TypeError(f"{where}.video: unknown field {extra[0]!r} (fields: path, start, end)")
        d["video"] = VideoRef(**video)
    try:
        return Item(**d)
    except ValueError as err:  # no payload for the modality: the message names the item id
        raise ValueError(f"{where}: {err}") from None


def _expect(value: Any, kind: type | tuple[type, ...], where: str) -> None:
    if not isinstance(value, kind) or isinstance(value, bool):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise TypeError(f"{where}: expected {names}, got {type(value).__name__}")


def _unicode(text: str, where: str) -> None:
    """Text the sentence splitter and tokenizers can encode: a lone surrogate is refused, named."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(
            f"{where}: not valid Unicode (a lone surrogate {text[err.start]!r} at character {err.start}); "
            "decode the source with errors='replace'"
        ) from None


def _check_fields(item: Item, where: str) -> None:
    """Field types of a built item (a dataclass does not check them) and text the pipeline can encode."""
    _expect(item.id, str, f"{where}.id")
    _expect(item.title, str, f"{where}.title")
    _unicode(item.title, f"{where}.title")
    if item.text is not None:
        _expect(item.text, str, f"{where}.text")
    if item.sentences is not None:
        _expect(item.sentences, (list, tuple), f"{where}.sentences")
        for i, sent in enumerate(item.sentences):
            _expect(sent, str, f"{where}.sentences[{i}]")
    if item.text is not None:
        _unicode(item.text, f"{where}.text")
    if item.table is not None:
        t = item.table
        _expect(t, Table, f"{where}.table")
        _expect(t.header, (list, tuple), f"{where}.table.header")
        _expect(t.rows, (list, tuple), f"{where}.table.rows")
        _expect(t.caption, str, f"{where}.table.caption")
        for i, cell in enumerate(t.header):
            _expect(cell, str, f"{where}.table.header[{i}]")
            _unicode(cell, f"{where}.table.header[{i}]")
        for r, row in enumerate(t.rows):
            _expect(row, (list, tuple), f"{where}.table.rows[{r}]")
            for c, cell in enumerate(row):
                _expect(cell, str, f"{where}.table.rows[{r}][{c}]")
                _unicode(cell, f"{where}.table.rows[{r}][{c}]")
    if item.image is not None:
        _expect(item.image, (str, os.PathLike), f"{where}.image")
    if item.video is not None:
        _expect(item.video, VideoRef, f"{where}.video")
        _expect(item.video.path, (str, os.PathLike), f"{where}.video.path")


def item_chars(item: Item) -> int:
    """Characters of an item's text or table cells (what sentence splitting and rendering read)."""
    if item.table is not None:
        t = item.table
        return len(t.caption) + sum(map(len, t.header)) + sum(len(c) for row in t.rows for c in row)
    return len(item.text or "")


def media_file(path: str | os.PathLike[str], where: str, kind: str, media_root: str | Path | None) -> Path:
    """``path`` checked as a media file of ``kind`` (``image`` or ``video``): it exists, is readable, has the
    kind's suffix (an image also its format's first bytes), and stays inside ``media_root`` when one is given
    (a relative path resolves under it). Returns the resolved path.

    Raises:
        ValueError: naming ``where`` and the file.
    """
    raw = Path(path)
    root = Path(media_root).resolve() if media_root is not None else None
    file = (root / raw if root is not None and not raw.is_absolute() else raw).resolve()
    if root is not None and not file.is_relative_to(root):
        raise ValueError(f"{where}: {path} is outside media_root={root}")
    suffixes = IMAGE_SUFFIXES if kind == "image" else VIDEO_SUFFIXES
    if file.suffix.lower() not in suffixes:
        raise ValueError(f"{where}: {path} is not an {kind} file (suffix {file.suffix or 'none'!r}; "
                         f"expected one of {', '.join(suffixes)})")
    if not file.is_file():
        raise ValueError(f"{where}: {kind} file not found: {file}")
    try:
        with file.open("rb") as fh:
            head = fh.read(12)
    except OSError as err:
        raise ValueError(f"{where}: cannot read {file}: {err.strerror or err}") from None
    is_image = head.startswith(_IMAGE_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")
    if kind == "image" and not is_image:
        raise ValueError(f"{where}: {file} is not an image (not PNG, JPEG, GIF, BMP, WebP or TIFF data)")
    return file


def check_question(question: Any) -> str:
    """A question ``compress`` can score: a non-empty str of valid Unicode."""
    if not isinstance(question, str):
        raise TypeError(f"question: expected a str, got {type(question).__name__}")
    if not question.strip():
        raise ValueError("question: empty (nothing to score the items against)")
    _unicode(question, "question")
    return question


def check_budget(budget: Any) -> int | None:
    """None, or a whole number of tokens >= 1 (``True`` is not a budget; ``300.0`` is 300)."""
    if budget is None:
        return None
    line = f"budget must be a positive whole number of tokens or None, got {budget!r}"
    if isinstance(budget, bool) or not isinstance(budget, numbers.Real):
        raise TypeError(line)
    if not math.isfinite(budget) or budget != int(budget) or budget < 1:
        raise ValueError(line)
    return int(budget)


def check_margin(descend_margin: Any) -> float:
    """δ: a finite number (NaN compares false everywhere, so every parent would be kept whole)."""
    if isinstance(descend_margin, bool) or not isinstance(descend_margin, numbers.Real):
        raise TypeError(f"descend_margin: expected a number, got {type(descend_margin).__name__}")
    if not math.isfinite(descend_margin):
        raise ValueError(f"descend_margin must be a finite number, got {descend_margin}")
    return float(descend_margin)


def check_item_margin(item_margin: Any) -> float | None:
    """None (every item keeps a region) or a finite number >= 0."""
    if item_margin is None:
        return None
    if isinstance(item_margin, bool) or not isinstance(item_margin, numbers.Real):
        raise TypeError(f"item_margin: expected a number or None, got {type(item_margin).__name__}")
    if not math.isfinite(item_margin) or item_margin < 0:
        raise ValueError(f"item_margin must be None or a finite number >= 0, got {item_margin}")
    return float(item_margin)


def _items_list(items: Any) -> list[Any]:
    if isinstance(items, (str, Item, Mapping)):
        return [items]  # one passage / item, not one item per character (or per key)
    if isinstance(items, (bytes, bytearray)):
        raise TypeError("items: expected a sequence of items or one str, got bytes (decode it first)")
    try:
        return list(items)
    except TypeError:
        raise TypeError(f"items: expected a sequence of items, got {type(items).__name__}") from None


class Compressor:
    """CANOPY compression with the encoder loaded once (see the module docstring for ``compress``).

    Args:
        adapter: a LoRA adapter folder (``train.py``'s ``<run dir>/adapter``), or ``"quickstart"``: the
            trained adapter shipped in the package (``canopy_lit.adapters``); None = f0.
        encoder: the backbone (``"minilm"``, ``"mpnet"``, a Qwen3-VL folder ...) or a built ``NodeEncoder``.
        branching: B of the region trees (the paper: 2).
        descend_margin: δ of the refinement rule (0 = the paper); larger keeps more, coarser regions.
        item_margin: None (the paper: every item keeps a region) or drop each item whose best kept region
            scores more than this below the best item's (0.3 dropped items at no measurable recall cost on the
            bundled benchmarks, 0.2 cost 3-6 points: experiments/frontier.md, "Item drop").
        count_tokens: the reader's token counter for ``budget``; default: the node encoder's tokenizer.
        cache_dir: a folder for node embeddings (None = in memory, for this object's lifetime).
        aggregation: a table-aggregation check (``is_aggregation(question) -> bool``, e.g.
            ``canopy_lit.refine.AggregationClassifier(llm)``), asked
            once per call with a table among the items; None = no check (tables are refined like any item).
    """

    def __init__(
        self,
        adapter: str | Path | None = None,
        encoder: Any = "minilm",
        branching: int = 2,
        descend_margin: float = 0.0,
        count_tokens: Callable[[str], int] | None = None,
        cache_dir: str | Path | None = None,
        item_margin: float | None = None,
        aggregation: AggregationCheck | None = None,
    ) -> None:
        check_margin(descend_margin)  # before the encoder loads
        check_item_margin(item_margin)
        if isinstance(encoder, str):
            from canopy_lit.adapters import resolve_adapter
            from canopy_lit.encoders import load_encoder  # torch: only when a backbone must be loaded
            from canopy_lit.encoders.base import adapter_node_pooling
            from canopy_lit.encoders.fingerprint import read_fingerprint

            # the adapter scores nodes the way it was trained (per node, late chunking, or read after the question)
            path = resolve_adapter(adapter)
            pooling = adapter_node_pooling(read_fingerprint(Path(path)) or {}) if path else "node"
            encoder = load_encoder(encoder, adapter=path, **({"node_pooling": pooling} if pooling != "node" else {}))
        elif adapter is not None:
            raise ValueError("adapter= applies to a backbone name; a built encoder carries its own adapter")
        self.encoder = encoder
        self.hierarchy = Hierarchy(branching)
        self.refiner = ParentRelativeRefiner(
            descend_margin=check_margin(descend_margin), item_margin=check_item_margin(item_margin)
        )
        self.scorer = node_scorer(encoder, self.hierarchy, cache_dir=cache_dir)
        self.count_tokens = count_tokens or _tokenizer_counter(encoder)
        self.aggregation = aggregation

    def __call__(
        self,
        question: str,
        items: Sequence[ItemLike] | ItemLike,
        budget: int | None = None,
        *,
        media_root: str | Path | None = None,
        max_item_chars: int | None = MAX_ITEM_CHARS,
        aggregation: bool | None = None,
    ) -> CompressedEvidence:
        """Compress ``items`` (most relevant first) for ``question``; ``budget``: at most that many tokens.

        ``media_root``: image / video paths must stay inside it (relative ones resolve under it).
        ``max_item_chars``: longer items are refused before any work (None = no bound). ``aggregation``: True =
        the question aggregates over tables, which are then kept whole (the loop's aggregation check); None = ask
        the compressor's ``aggregation`` check when a table is among the items. Input rules: the module docstring.
        """
        check_question(question)
        cap = check_budget(budget)
        built = []
        for i, it in enumerate(_items_list(items)):
            item = as_item(it, i)
            chars = item_chars(item)
            if max_item_chars is not None and chars > max_item_chars:
                raise ValueError(
                    f"items[{i}] ({item.id!r}): {chars} characters, over max_item_chars={max_item_chars}; "
                    "split it into passages, or pass max_item_chars=None to compress it whole (slow)"
                )
            # the caller's Item is not changed: a checked copy carries the resolved path
            if item.image is not None:
                item = replace(item, image=str(media_file(item.image, f"items[{i}].image", "image", media_root)))
            if item.video is not None:
                path = media_file(item.video.path, f"items[{i}].video.path", "video", media_root)
                item = replace(item, video=VideoRef(str(path), item.video.start, item.video.end))
            built.append(item)
        ids = [it.id for it in built]
        if len(set(ids)) != len(ids):
            raise ValueError(f"items need distinct ids, got {ids}")
        skipped = [it.id for it in built if it.modality == Modality.TEXT and not (it.text or "").strip()]
        built = [it for it in built if it.id not in skipped]
        if not built:
            return CompressedEvidence([], [], 0, 0, skipped=skipped)
        trees = [self.hierarchy.build(it) for it in built]
        tables = [t.item.modality == Modality.TABLE for t in trees]
        if aggregation is None:  # as the loop: classified from the question alone, only when a table is there
            aggregation = any(tables) and self.aggregation is not None and bool(
                self.aggregation.is_aggregation(Question("compress", question, []))
            )
        flags = [bool(aggregation) and table for table in tables]
        # the evidence loop's round and reader cap, with the caller's items as the round's retrieved items
        kept = compress_round(question, trees, self.refiner, self.hierarchy, self.scorer, flags)
        held = [ev for ev in kept if ev.node_ids]
        budgeted = EvidenceBudget(self.hierarchy, self.count_tokens, cap or UNLIMITED)
        capped = budgeted.cap(held, [self.count_tokens(budgeted.block(ev)) for ev in held])
        blocks = [b for b in capped.items if b.text]
        # every item's whole tokens, those item pruning dropped (no region kept, no evidence held) included
        whole = sum(self.count_tokens(self.hierarchy.evidence_text(t, [0])) for t in trees)
        return CompressedEvidence(
            blocks=[b.text for b in blocks],
            regions=self._regions(question, blocks),
            tokens=capped.tokens,
            item_tokens=whole,
            cut=[b.evidence.tree.item.id for b in capped.items if b.cap != "whole"],
            block_ids=[b.evidence.tree.item.id for b in blocks],
            skipped=skipped,
            dropped=[ev.tree.item.id for ev in kept if not ev.node_ids],
        )

    def _regions(self, question: str, blocks: Sequence[ReaderBlock]) -> list[Region]:
        with_nodes = [b for b in blocks if b.node_ids]
        trees = [b.evidence.tree for b in with_nodes]
        scores = self.scorer.score(question, trees, [b.node_ids for b in with_nodes]) if trees else []
        return [
            Region(t.item.id, int(t.starts[v]), int(t.ends[v]), float(s), self.hierarchy.evidence_text(t, [v]))
            for b, t, row in zip(with_nodes, trees, scores, strict=True)
            for v, s in zip(b.node_ids, row, strict=True)
        ]


def _tokenizer_counter(encoder: Any) -> Callable[[str], int]:
    tokenizer = getattr(encoder, "tokenizer", None)
    if tokenizer is None:
        return lambda text: len(text.split())
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


_COMPRESSORS: dict[tuple[Any, ...], Compressor] = {}


def compress(
    question: str,
    items: Sequence[ItemLike] | ItemLike,
    adapter: str | Path | None = None,
    budget: int | None = None,
    *,
    encoder: str = "minilm",
    branching: int = 2,
    descend_margin: float = 0.0,
    item_margin: float | None = None,
    media_root: str | Path | None = None,
    max_item_chars: int | None = MAX_ITEM_CHARS,
    tokenizer: str | None = None,
    aggregation: bool | None = None,
) -> CompressedEvidence:
    """Compress retrieved ``items`` for ``question`` with CANOPY (no LLM call).

    Args:
        question: the user's question (a non-empty str).
        items: retrieved items, most relevant first: ``Item`` objects, plain text passages, or dicts of
            ``Item`` fields (``{"title": ..., "text": ...}``, ``{"modality": "table", "table": {...}}``);
            one str (or one dict / Item) alone is one item.
        adapter: a trained node-encoder adapter folder or a shipped adapter's name (``"quickstart"``); None = f0.
        budget: at most this many tokens (``tokenizer``'s); None = what refinement keeps.
        encoder: backbone name (default the bundled all-MiniLM-L6-v2).
        branching: B of the region trees.
        descend_margin: δ of the refinement rule.
        item_margin: None, or drop items whose best region scores more than this below the best item's.
        media_root: image / video paths must stay inside this folder (relative ones resolve under it).
        max_item_chars: an item longer than this is refused at once (None = no bound).
        tokenizer: the reader's tokenizer that counts ``budget`` and ``.tokens`` (an asset name such as
            ``"qwen2.5-1.5b"``, a GGUF file or a tokenizer folder, as ``evidence.tokenizer``); None = the node
            encoder's.
        aggregation: True = the question aggregates over tables (tables are kept whole, as the evaluate path
            does when its aggregation classifier says so); None / False = tables are refined like any item.

    Returns:
        ``CompressedEvidence``: ``.text`` for a reader, ``.regions`` with their scores, ``.tokens``.
        The encoder of one (adapter, encoder, branching, δ, item margin) is loaded once per process.

    Raises:
        TypeError, ValueError: bad input, one line naming the argument, item and field (module docstring).
    """
    check_question(question)
    check_budget(budget)
    margin, drop = check_margin(descend_margin), check_item_margin(item_margin)
    key = (str(adapter) if adapter is not None else None, encoder, int(branching), margin, drop, tokenizer)
    if key not in _COMPRESSORS:
        count = None
        if tokenizer is not None:
            from canopy_lit.llm.tokenizers import token_counter

            count = token_counter(str(tokenizer))
        _COMPRESSORS[key] = Compressor(adapter, encoder, branching, margin, count_tokens=count, item_margin=drop)
    return _COMPRESSORS[key](
        question, items, budget, media_root=media_root, max_item_chars=max_item_chars, aggregation=aggregation
    )
