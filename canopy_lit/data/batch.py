"""PreferenceBatch: the typed training / evaluation batch that ``PreferenceCollate`` builds."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple

import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning_utilities.core.apply_func import apply_to_collection

from canopy_lit.encoders.late import LateItem
from canopy_lit.supervision import PairKind


class LateNodes(NamedTuple):
    """What a late-pooling batch (``encoder.node_pooling=late|late_region``) carries to pool its node inputs
    from whole-item forwards (``NodeEncoder.late_embed``) instead of encoding each node alone.

    Attributes:
        items: (I,) the distinct items of the batch's nodes, tokenised once (``late_tokenize``: windows of
            token ids, token offsets, where each token is read).
        node_item: (U,) long, row in ``items`` of each distinct node input's item.
        node_spans: (U,) each node's character ranges of its item's text (``Hierarchy.node_spans``).
    """

    items: list[LateItem]
    node_item: torch.Tensor
    node_spans: list[list[tuple[int, int]]]


@dataclass
class PreferenceBatch:
    """N instances (q, v, P(v)) with P pair slots each, over U distinct node inputs and Q distinct questions.

    Each node input and question appears once (``winner`` / ``loser`` / ``query_index`` point at rows),
    so a node shared by several instances is encoded once. Pair slots beyond an instance's pairs are
    padding: ``pair_kind`` ``PADDING``, ``winner`` = ``loser`` = 0.

    Lightning moves it with :meth:`to` (``transfer_batch_to_device``); a DataLoader with
    ``pin_memory=True`` calls :meth:`pin_memory`.

    Attributes:
        node_texts: (U,) text of each distinct node input.
        query_texts: (Q,) each distinct question.
        query_index: (N,) long, row in ``query_texts`` of each instance's question.
        winner: (N, P) long, row in ``node_texts`` of each pair's winner.
        loser: (N, P) long, row in ``node_texts`` of each pair's loser.
        pair_kind: (N, P) long, the :class:`~canopy_lit.supervision.PairKind` code of each pair slot.
        benchmark: (N,) long, benchmark id (index into the datamodule's ``benchmark_names``).
        depth: (N,) long, depth of v in its tree.
        stop: (N,) bool, v is fully gold (its pairs are v ≻ every child: refinement keeps v whole).
        question_ids: (N,) question id of each instance.
        item_ids: (N,) gold item id of each instance.
        node_keys: (U,) (text, ((frame path, t), ...)) of each distinct node when some node has frames, (item key,
            node id) with late pooling, else None: visual nodes may share a text, and a late node's embedding
            depends on its item, so the eval embedding cache keys on these.
        node_tokens: tokenised node inputs, name -> (U, L) tensors (plus pixel tensors for visual nodes);
            None when the collate has no tokenizer.
        query_tokens: tokenised questions, name -> (Q, L) tensors; None without a tokenizer.
        late: with late pooling, the items and node spans the node embeddings are pooled from (``node_tokens``
            is None then, and ``node_keys`` are (item key, node id): one text may be two nodes in two items);
            None with per-node pooling.
    """

    node_texts: list[str]
    query_texts: list[str]
    query_index: torch.Tensor
    winner: torch.Tensor
    loser: torch.Tensor
    pair_kind: torch.Tensor
    benchmark: torch.Tensor
    depth: torch.Tensor
    stop: torch.Tensor
    question_ids: list[str]
    item_ids: list[str]
    node_keys: list[Any] | None = None
    node_tokens: dict[str, torch.Tensor] | None = None
    query_tokens: dict[str, torch.Tensor] | None = None
    late: LateNodes | None = None

    def __len__(self) -> int:
        return len(self.question_ids)

    def pairs_of(self, kind: PairKind) -> torch.Tensor:
        """(N, P) bool: the pair slots of ``kind``."""
        return self.pair_kind == kind

    @property
    def mask(self) -> torch.Tensor:
        """(N, P) bool: real pairs, P(v)'s and hard negatives' (what the loss ranks)."""
        return self.pair_kind != PairKind.PADDING

    @property
    def tie_ok(self) -> torch.Tensor:
        """(N, P) bool: the winner is a child of the loser (g ≻ v), so a tie holds, as in refinement."""
        return self.pairs_of(PairKind.CHILD_OVER_PARENT)

    @property
    def in_tree(self) -> torch.Tensor:
        """(N, P) bool: P(v)'s pairs, the refinement decision at v (what decision accuracy reads)."""
        return self.mask & ~self.pairs_of(PairKind.HARD_NEGATIVE)

    @property
    def cache_keys(self) -> list[Any]:
        """(U,) key of each distinct node input for embedding caches: ``node_keys``, else the texts."""
        return self.node_keys or self.node_texts

    def to(self, device: torch.device | str) -> PreferenceBatch:
        """A copy with every tensor on ``device`` (non-blocking to accelerators, as Lightning moves batches)."""
        moved = {f.name: move_data_to_device(getattr(self, f.name), device) for f in fields(self)}
        return replace(self, **moved)

    def pin_memory(self) -> PreferenceBatch:
        """A copy with every tensor in pinned host memory (the DataLoader's ``pin_memory=True``)."""
        pin = torch.Tensor.pin_memory
        moved = {f.name: apply_to_collection(getattr(self, f.name), torch.Tensor, pin) for f in fields(self)}
        return replace(self, **moved)
