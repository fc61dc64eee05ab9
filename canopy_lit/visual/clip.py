"""A CLIP-style node encoder: any local or hub CLIP checkpoint (transformers ``CLIPModel``).

Queries and text nodes go through the text tower; image and video nodes through the frozen vision
tower, one vector per node = the mean of its frames' L2-normalised embeddings (a video node's
frames are the tree's: 1 per 10 s, at most 32). LoRA sits on the text tower's attention (q, v)
and on ``visual_projection``, the linear map after the frozen vision tower: without it the
adapter could never move a visual node's embedding, because queries use f0 (adapter disabled).

Weights are never fetched here unless the spec is a hub id and downloads are allowed
(``canopy_lit.assets.resolve``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from canopy_lit.encoders.base import EncoderInput, NodeEncoder
from canopy_lit.encoders.fingerprint import backbone_hash
from canopy_lit.hierarchy.base import NodeInput
from canopy_lit.visual.frames import load_frames

# Text-tower attention projections + the projection after the (frozen) vision tower.
DEFAULT_LORA_TARGETS = r".*text_model\.encoder\.layers\.\d+\.self_attn\.(q_proj|v_proj)|.*visual_projection"


def _thin(frames: list, cap: int) -> list:
    if len(frames) <= cap:
        return frames
    step = len(frames) / cap
    return [frames[int((j + 0.5) * step)] for j in range(cap)]


def _features(out: Any) -> torch.Tensor:
    # transformers >= 5 returns an output object whose pooler_output is the projected feature
    return out.pooler_output if hasattr(out, "pooler_output") else out


class CLIPNodeEncoder(NodeEncoder):
    """CLIP backbone as a ``NodeEncoder``: text -> text tower, frames -> frozen vision tower (mean-pooled).

    Args:
        model: a ``transformers.CLIPModel``.
        tokenizer: its tokenizer (any tokenizer whose ids fit the text tower).
        image_processor: its image processor (resize / crop / normalise).
        name: backbone identifier used in the fingerprint.
        max_length: text truncation (CLIP: 77).
        max_frames: frames per node cap (evenly thinned past it).
        model_dir: folder of the weights, hashed into the fingerprint.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        image_processor: Any,
        name: str = "clip",
        max_length: int = 77,
        max_frames: int = 32,
        model_dir: Path | None = None,
        batch_size: int = 16,
    ) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.name = name
        self.max_length = max_length
        self.max_frames = max_frames
        self.batch_size = batch_size
        self.dim = int(model.config.projection_dim)
        self._backbone_hash = backbone_hash(model_dir, name)
        for p in self.vision_tower.parameters():
            p.requires_grad_(False)

    @classmethod
    def from_pretrained(
        cls, name_or_path: str, allow_downloads: bool | None = None, **kwargs: Any
    ) -> CLIPNodeEncoder:
        """Load a CLIP checkpoint from a local folder, or a hub id when downloads are allowed."""
        from transformers import AutoTokenizer, CLIPImageProcessor, CLIPModel

        from canopy_lit.assets import resolve

        path = resolve(name_or_path, allow_downloads=allow_downloads)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path}: not a transformers model folder (no config.json)")
        model = CLIPModel.from_pretrained(str(path))
        return cls(
            model,
            AutoTokenizer.from_pretrained(str(path)),
            CLIPImageProcessor.from_pretrained(str(path)),
            name=name_or_path,
            model_dir=path,
            **kwargs,
        )

    @property
    def clip(self) -> nn.Module:
        """The underlying ``CLIPModel`` (under the peft wrapper once an adapter exists)."""
        return self.model.get_base_model() if self.has_adapter else self.model

    @property
    def vision_tower(self) -> nn.Module:
        return self.clip.vision_model

    def lora_config(
        self, r: int, alpha: int, dropout: float, target_modules: Sequence[str] | None, layers: Sequence[int] | None = None
    ) -> Any:
        from peft import LoraConfig

        targets: Any = list(target_modules) if target_modules else DEFAULT_LORA_TARGETS
        return LoraConfig(
            r=r,
            lora_alpha=alpha,
            lora_dropout=dropout,
            target_modules=targets,
            layers_to_transform=list(layers) if layers else None,
            layers_pattern="layers" if layers else None,
        )

    def add_adapter(self, *args: Any, **kwargs: Any) -> None:
        super().add_adapter(*args, **kwargs)
        for n, p in self.vision_tower.named_parameters():  # defensive: a custom target list must not thaw it
            if p.requires_grad:
                raise ValueError(
                    f"LoRA target reached the frozen vision tower ({n}); exclude vision_model modules"
                )

    def input_length(self, x: EncoderInput) -> int:
        if isinstance(x, NodeInput) and x.frames:
            return 10_000 + len(x.frames)  # visual inputs batch together
        return len(x.text if isinstance(x, NodeInput) else x)

    def tokenize(self, inputs: Sequence[EncoderInput]) -> dict[str, torch.Tensor]:
        """Text inputs -> token ids; visual inputs -> all their frames' pixels + frame-to-input owners."""
        text_idx, texts, vis_idx, owners, frames = [], [], [], [], []
        for i, x in enumerate(inputs):
            if isinstance(x, NodeInput) and x.frames:
                fr = _thin(list(x.frames), self.max_frames)
                vis_idx.append(i)
                owners.extend([len(vis_idx) - 1] * len(fr))
                frames.extend(fr)
            else:
                text_idx.append(i)
                texts.append(x.text if isinstance(x, NodeInput) else x)
        batch: dict[str, torch.Tensor] = {"n": torch.tensor(len(inputs))}
        if texts:
            tok = self.tokenizer(
                texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
            )
            batch.update(
                input_ids=tok["input_ids"],
                attention_mask=tok["attention_mask"],
                text_index=torch.tensor(text_idx),
            )
        if frames:
            pix = self.image_processor(images=load_frames(frames), return_tensors="pt")["pixel_values"]
            batch.update(
                pixel_values=pix, frame_owner=torch.tensor(owners), visual_index=torch.tensor(vis_idx)
            )
        return batch

    def embed(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """(N, D) L2-normalised: text rows from the text tower, visual rows = mean of normalised frame embeddings."""
        dev = self.device
        n = int(batch["n"])
        rows: list[torch.Tensor] = []
        index: list[torch.Tensor] = []
        if "input_ids" in batch:
            t = _features(
                self.model.get_text_features(
                    input_ids=batch["input_ids"].to(dev), attention_mask=batch["attention_mask"].to(dev)
                )
            )
            rows.append(F.normalize(t, dim=-1))
            index.append(batch["text_index"])
        if "pixel_values" in batch:
            f = F.normalize(
                _features(self.model.get_image_features(pixel_values=batch["pixel_values"].to(dev))), dim=-1
            )
            owner = batch["frame_owner"].to(dev)
            k = len(batch["visual_index"])
            summed = torch.zeros(k, f.shape[-1], device=dev, dtype=f.dtype).index_add(0, owner, f)
            counts = torch.bincount(owner, minlength=k).clamp(min=1).unsqueeze(-1).to(f.dtype)
            rows.append(F.normalize(summed / counts, dim=-1))
            index.append(batch["visual_index"])
        order = torch.cat(index).to(dev)
        out = torch.cat(rows)
        # scatter rows back to input order without in-place writes (keeps autograd simple)
        return out[torch.argsort(order)] if len(order) == n else out
