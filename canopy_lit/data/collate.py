"""PreferenceCollate: examples -> a padded ``PreferenceBatch``; every distinct node text and question is
tokenised once per dataset, so a batch only pads and stacks ids."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.nn.utils.rnn import pad_sequence

from canopy_lit.data.batch import LateNodes, PreferenceBatch
from canopy_lit.data.examples import Example
from canopy_lit.encoders.base import EncoderInput
from canopy_lit.supervision import PairKind
from canopy_lit.types import NodeInput

Tokenize = Callable[[Sequence[EncoderInput]], dict[str, torch.Tensor]]
REAL_PAIR_KINDS = frozenset(PairKind) - {PairKind.PADDING}


def _key(x: EncoderInput) -> Any:
    """Cache / dedup key: the text of a text-only input, (text, frames) of a visual one."""
    if isinstance(x, NodeInput):
        return (x.text, tuple(x.frames)) if x.frames else x.text
    return x



class PreferenceCollate:
    """Examples -> one :class:`PreferenceBatch` with each distinct node input and question tokenised once.

    Tokens come from a cache filled once per dataset (:meth:`pretokenize`), so a batch only pads and
    stacks id lists; inputs missing from the cache (visual nodes, ad-hoc examples) are tokenised here.

    Late pooling (examples with ``nodes``): nodes are told apart by (item key, node id), and the batch carries
    the distinct items, each tokenised once per dataset by ``late_tokenize`` (the encoder's), and each node's
    character ranges from ``items`` (item key -> text and node ranges, filled by ``render_instance``) instead
    of node tokens.
    """

    def __init__(self, tokenize: Tokenize | None = None, late_tokenize: Callable[[Sequence[str]], list[Any]] | None = None) -> None:
        self.tokenize = tokenize
        self.cache: dict[str, dict[str, torch.Tensor]] = {}  # text -> unpadded (L,) ids per tokenizer key
        self.pad_values: dict[str, int] = {}
        self.late_tokenize = late_tokenize
        self.items: dict[str, tuple[str, list[list[tuple[int, int]]]]] = {}  # item key -> text, node ranges
        self.late_cache: dict[str, Any] = {}  # item key -> LateItem

    def pretokenize_items(self, keys: Sequence[str], chunk: int = 256) -> int:
        """Late-tokenise the items ``keys`` not tokenised yet; returns how many were added."""
        if self.late_tokenize is None:
            return 0
        todo = list(dict.fromkeys(k for k in keys if k not in self.late_cache))
        for b in range(0, len(todo), chunk):
            part = todo[b : b + chunk]
            for k, plan in zip(part, self.late_tokenize([self.items[k][0] for k in part]), strict=True):
                self.late_cache[k] = plan
        return len(todo)

    def late_nodes(self, node_refs: Sequence[tuple[str, int]]) -> LateNodes:
        """The batch's items (first-seen order) and each node's item row and ranges."""
        if self.late_tokenize is None:
            raise ValueError("late pooling needs the encoder's late_tokenize: datamodule.set_tokenizer(..., late=...)")
        keys = list(dict.fromkeys(k for k, _ in node_refs))
        self.pretokenize_items(keys)
        row = {k: i for i, k in enumerate(keys)}
        return LateNodes(
            items=[self.late_cache[k] for k in keys],
            node_item=torch.tensor([row[k] for k, _ in node_refs], dtype=torch.long),
            node_spans=[[tuple(r) for r in self.items[k][1][n]] for k, n in node_refs],
        )

    def pretokenize(self, inputs: Sequence[EncoderInput], chunk: int = 512) -> int:
        """Tokenise every distinct text-only input once into unpadded (L,) id rows; returns how many were added.

        Needs a right-padding tokenizer (``attention_mask`` rows of ones then zeros), as both encoders use.
        """
        if self.tokenize is None:
            return 0
        todo = list(dict.fromkeys(x for x in (_key(i) for i in inputs) if isinstance(x, str) and x not in self.cache))
        for b in range(0, len(todo), chunk):
            texts = todo[b : b + chunk]
            enc = self.tokenize(texts)
            if "attention_mask" not in enc or any(k.startswith("pixel") for k in enc):
                return b  # not a padded text tokenizer: collate tokenises per batch
            mask = enc["attention_mask"]
            lengths = mask.sum(1)
            if not bool((mask == (torch.arange(mask.shape[1]) < lengths[:, None])).all()):
                raise ValueError("pre-tokenisation needs right padding (attention_mask ones, then zeros)")
            for k, v in enc.items():
                pad = v[mask == 0]
                if len(pad) and k not in self.pad_values:
                    self.pad_values[k] = int(pad[0])
            for i, t in enumerate(texts):
                n = int(lengths[i])
                self.cache[t] = {k: v[i, :n].clone() for k, v in enc.items()}
        return len(todo)

    def tokens(self, inputs: Sequence[EncoderInput]) -> dict[str, torch.Tensor]:
        """Padded (B, L) token tensors of ``inputs``: from the cache when every input is in it."""
        assert self.tokenize is not None
        keys = [_key(x) for x in inputs]
        if not all(isinstance(k, str) and k in self.cache for k in keys):
            return self.tokenize(list(inputs))
        rows = [self.cache[k] for k in keys]
        return {
            name: pad_sequence([r[name] for r in rows], batch_first=True, padding_value=self.pad_values.get(name, 0))
            for name in rows[0]
        }

    def __call__(self, examples: Sequence[Example]) -> PreferenceBatch:
        node_row: dict[Any, int] = {}
        node_inputs: list[NodeInput] = []
        query_row: dict[str, int] = {}
        n, p = len(examples), max(max((len(e.pairs) for e in examples), default=1), 1)
        winner = torch.zeros(n, p, dtype=torch.long)
        loser = torch.zeros(n, p, dtype=torch.long)
        pair_kind = torch.full((n, p), PairKind.PADDING, dtype=torch.long)
        qidx = torch.empty(n, dtype=torch.long)
        late = any(e.nodes is not None for e in examples)
        if late and not all(e.nodes is not None for e in examples):
            raise ValueError("a batch mixes examples rendered for late pooling (with nodes) and per-node ones")
        for i, e in enumerate(examples):
            rows = []
            for j, x in enumerate(e.inputs):
                k = e.nodes[j] if late else _key(x)  # late: a node is its place in its item, not its text
                if k not in node_row:
                    node_row[k] = len(node_inputs)
                    node_inputs.append(x)
                rows.append(node_row[k])
            qidx[i] = query_row.setdefault(e.question, len(query_row))
            for k, ((a, b), kind) in enumerate(zip(e.pairs, e.kinds, strict=True)):
                if kind not in REAL_PAIR_KINDS:
                    raise ValueError(
                        f"example of question {e.question_id!r}, item {e.item_id!r}: pair {k} has kind "
                        f"{kind!r}, expected one of {sorted(x.name for x in REAL_PAIR_KINDS)}"
                    )
                winner[i, k], loser[i, k], pair_kind[i, k] = rows[a], rows[b], kind
        node_texts = [x.text for x in node_inputs]
        query_texts = list(query_row)
        node_keys = None
        late_nodes = None
        if late:
            node_keys = list(node_row)
            late_nodes = self.late_nodes(node_keys)
        elif any(x.frames for x in node_inputs):  # text-only batches: the texts are the keys
            # (path, t) tuples, not Frames: Lightning's batch transfer rejects frozen dataclasses.
            node_keys = [
                (x.text, tuple((f.path, f.t) for f in x.frames)) if x.frames else x.text for x in node_inputs
            ]
        node_tokens = query_tokens = None
        if self.tokenize is not None:
            if not late:  # late: nodes are pooled from their items' tokens
                node_tokens = self.tokens(node_texts if node_keys is None else node_inputs)
            query_tokens = self.tokens(query_texts)
        return PreferenceBatch(
            node_texts=node_texts,
            query_texts=query_texts,
            query_index=qidx,
            winner=winner,
            loser=loser,
            pair_kind=pair_kind,
            benchmark=torch.tensor([e.benchmark for e in examples], dtype=torch.long),
            depth=torch.tensor([e.depth for e in examples], dtype=torch.long),
            stop=torch.tensor([e.stop for e in examples], dtype=torch.bool),
            question_ids=[e.question_id for e in examples],
            item_ids=[e.item_id for e in examples],
            node_keys=node_keys,
            node_tokens=node_tokens,
            query_tokens=query_tokens,
            late=late_nodes,
        )


