"""Late chunking's data: an item tokenised once, in windows, and the pooling of node spans from its states.

``TextEncoder.late_tokenize`` makes a :class:`LateItem` per item text; ``TextEncoder.late_embed`` runs the
windows through the backbone and pools each node with :func:`pool_spans`. Inference
(``TextEncoder.encode_spans``, the node cache's late path) and training (the ``PreferenceBatch`` of a
late-pooling datamodule, ``NodeEncoderModule``) both go through these, so a node's training embedding is
its inference embedding. Only torch and numpy here: the training batch carries ``LateItem`` tuples; ``late_embed_trees``
embeds the nodes of region trees (a ``Hierarchy`` gives their spans) for the scorer and the node cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

Ranges = Sequence[tuple[int, int]]


class LateItem(NamedTuple):
    """One item text tokenised for late chunking (``TextEncoder.late_tokenize``).

    Attributes:
        windows: (L_w,) long token ids of each window (special tokens included), in order.
        offsets: (T, 2) long character range of each content token of the text.
        index: (lead + T + trail,) long: for each position of the item's token sequence ([CLS], content tokens,
            [SEP]), the row of the concatenated window states it is read from (each content token from the window
            where it is most central, ``window_plan``; the specials from the first / last window).
    """

    windows: list[torch.Tensor]
    offsets: torch.Tensor
    index: torch.Tensor


def pool_spans(
    seq: torch.Tensor, spans: Sequence[Ranges], offsets: torch.Tensor, lead: int, trail: int, specials: bool = True
) -> torch.Tensor:
    """(n_nodes, D) from an item's (lead + T + trail, D) token states ``seq``: each node's normalised mean over
    the states of the content tokens its character ranges overlap (with ``specials``: and the special tokens'; a
    node with no token at all falls back to them). Differentiable in ``seq``."""
    n_tok = offsets.shape[0]
    starts = offsets[:, 0].reshape(-1, 1).cpu()
    ends = offsets[:, 1].reshape(-1, 1).cpu()
    member = torch.zeros((len(spans), seq.shape[0]), dtype=seq.dtype)
    if specials:
        member[:, :lead] = 1
        member[:, seq.shape[0] - trail :] = 1
    for n, ranges in enumerate(spans):
        inside = torch.zeros(n_tok, dtype=torch.bool)
        for s, e in ranges:
            if e > s:
                inside |= ((starts < e) & (ends > s)).reshape(-1)
        member[n, lead : lead + n_tok] = inside.to(seq.dtype)
        if not member[n].any():  # an empty region (a blank row): its item's special tokens
            member[n, :lead] = 1
            member[n, seq.shape[0] - trail :] = 1
    member = member.to(seq.device)
    pooled = (member @ seq) / member.sum(1, keepdim=True)
    return F.normalize(pooled, dim=-1)


LATE_POOLINGS = ("late", "late_region")  # node embeddings pooled from one forward over the whole item


def is_late(encoder: Any) -> bool:
    """Whether ``encoder`` embeds nodes by late chunking (``node_pooling`` late or late_region)."""
    return getattr(encoder, "node_pooling", "node") in LATE_POOLINGS


def late_embed_trees(encoder: Any, hierarchy: Any, trees: Sequence[Any]) -> list[np.ndarray]:
    """(num_nodes, D) float32 late-chunked embeddings of every node of each tree: one item forward each."""
    if not trees:
        return []
    embs = encoder.encode_spans([hierarchy.node_spans(t) for t in trees])
    return [np.asarray(e.detach().cpu().float().numpy() if hasattr(e, "detach") else e, np.float32) for e in embs]
