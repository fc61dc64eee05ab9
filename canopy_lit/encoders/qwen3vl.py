"""Qwen3-VL-Embedding backbone (the paper's encoder): last-token pooling, LoRA on the language tower only.

Loads ``Qwen/Qwen3-VL-Embedding-2B`` (or any Qwen3-VL checkpoint) through transformers from a
hub id or a local folder. Inputs follow the model's chat format: a system instruction, the user
content (text, plus images / video frames for visual nodes), the generation prompt; the
embedding is the final hidden state of the last token, L2-normalised. The vision tower is
frozen and carries no adapter, so visual features are identical under f0 and fθ.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import torch
import torch.nn.functional as F
from annotated_types import Ge

from canopy_lit.adapters import resolve_adapter
from canopy_lit.encoders.base import EncoderInput, NodeEncoder, adapter_scale_of, input_text
from canopy_lit.encoders.fingerprint import adapter_max_seq_length, backbone_hash
from canopy_lit.types import Frame, NodeInput

QWEN3VL_HUB_ID = "Qwen/Qwen3-VL-Embedding-2B"
QWEN3VL_ALIASES = frozenset({"qwen3vl", "qwen3-vl-embedding-2b", "qwen3vl_embedding_2b"})
DEFAULT_MAX_SEQ_LENGTH = 1024
DEFAULT_INSTRUCTION = "Represent the user's input."
# Full-name regex (peft `re.fullmatch`): attention projections of the language model, never `visual.*`.
LANGUAGE_LORA_TARGETS = r".*language_model.*\.(q_proj|v_proj)"
# Processor outputs with one row per vision patch, not per input: (patch tensor, grid tensor, pad-token id name).
PATCH_INPUTS = (
    ("pixel_values", "image_grid_thw", "image_token_id"),
    ("pixel_values_videos", "video_grid_thw", "video_token_id"),
)


def qwen3vl_backbone(name: str) -> str:
    """The hub id an alias (``qwen3vl``, ``qwen3vl_embedding_2b`` ...) stands for; any other name as given."""
    return QWEN3VL_HUB_ID if name.lower() in QWEN3VL_ALIASES else name


def is_qwen3vl(name: str) -> bool:
    """Whether a backbone name is a Qwen3-VL model: an alias, a local folder whose ``config.json`` says
    ``model_type: qwen3_vl...``, else a name containing ``qwen3-vl``."""
    if name.lower() in QWEN3VL_ALIASES:
        return True
    config = Path(name).expanduser() / "config.json"
    if config.is_file():
        return str(json.loads(config.read_text()).get("model_type", "")).startswith("qwen3_vl")
    return "qwen3-vl" in name.lower()


def thin_frames(frames: Sequence[Frame], cap: int | None) -> list[Frame]:
    """At most ``cap`` frames, evenly spaced over the node, first and last kept (``cap=1``: the middle one)."""
    frames = list(frames)
    n = len(frames)
    if cap is None or n <= cap:
        return frames
    if cap == 1:
        return [frames[(n - 1) // 2]]
    # step (n-1)/(cap-1) > 1 when n > cap, so the rounded indices are distinct and increasing.
    return [frames[round(i * (n - 1) / (cap - 1))] for i in range(cap)]


def _load_images(frames: Sequence[Any]) -> list[Any]:
    """PIL images of a node's frames (image files, or video frames decoded at their timestamp)."""
    from PIL import Image

    from canopy_lit.hierarchy.video import decode_frames

    out = []
    for f in frames:
        if f.t is None:
            out.append(Image.open(f.path).convert("RGB"))
        else:
            out.extend(decode_frames(f.path, [f.t]))
    return out


def _processor_max_pixels(processor: Any, default: int) -> int | None:
    """The pixel cap ``processor``'s image processor resizes to (``max_pixels``, else ``size.longest_edge``);
    ``default`` (the argument it was built with) when it names none; None without a processor."""
    if processor is None:
        return None
    images = getattr(processor, "image_processor", processor)
    value = getattr(images, "max_pixels", None)
    if value is None:
        size = getattr(images, "size", None)  # transformers 5 keeps the cap in size.longest_edge (a SizeDict)
        value = size.get("longest_edge") if isinstance(size, dict) else getattr(size, "longest_edge", None)
    return int(value) if value is not None else int(default)


class Qwen3VLEncoder(NodeEncoder):
    """Qwen3-VL-Embedding node encoder.

    The ``_target_`` of ``configs/encoder/qwen3vl_embedding_2b.yaml``: its arguments are that file's keys.

    Args:
        backbone: hub id (``Qwen/Qwen3-VL-Embedding-2B``; ``qwen3vl`` is an alias of it) or local folder.
        adapter: a folder written by ``NodeEncoder.save_adapter``, loaded onto the backbone (None = f0 everywhere).
        adapter_scale: fθ interpolated toward f0 in weight space, W0 + scale * ΔW (1 = as trained, 0 = f0).
            Only with an adapter.
        max_seq_length: token cap per text input; default: the adapter's own (its fingerprint), else 1024.
        torch_dtype: weights dtype (``"bfloat16"`` on GPUs; float32 on CPU).
        query_instruction: system prompt for queries.
        node_instruction: system prompt for nodes.
        batch_size: inference batch size.
        device: torch device.
        max_pixels: image resolution cap handed to the processor.
        max_frames_per_node: frames of one node that reach the model, evenly thinned (first and
            last kept) before any frame is decoded; ``None`` = no cap. Each frame is one image input,
            i.e. up to ``max_pixels / 32**2`` visual tokens (patch 16, 2x2 merge): a 640x360 frame
            is ~220 tokens, a 720p one ~880, so a 32-frame parent of a long video (the video
            builder's own cap) would be 7k-28k visual tokens in a single node input, far past
            ``max_seq_length`` and the memory of a batch. 8 bounds any parent to under three
            leaves' worth (a 30-s leaf has 3 frames at the builder's 1 frame / 10 s).
        model: a ready-made model (tests build a tiny random-weight one this way).
        tokenizer: the ready-made model's tokenizer.
        processor: the ready-made model's processor.
    """

    def __init__(
        self,
        backbone: str = QWEN3VL_HUB_ID,
        adapter: str | Path | None = None,
        adapter_scale: float = 1.0,
        max_seq_length: Annotated[int, Ge(1)] | None = None,
        torch_dtype: str | torch.dtype = "float32",
        query_instruction: str = DEFAULT_INSTRUCTION,
        node_instruction: str = DEFAULT_INSTRUCTION,
        batch_size: Annotated[int, Ge(1)] = 8,
        device: str | torch.device = "cpu",
        max_pixels: Annotated[int, Ge(1)] = 1280 * 28 * 28,
        max_frames_per_node: Annotated[int, Ge(1)] | None = 8,
        model: Any = None,
        tokenizer: Any = None,
        processor: Any = None,
    ) -> None:
        super().__init__()
        if max_frames_per_node is not None and max_frames_per_node < 1:
            raise ValueError(f"max_frames_per_node must be >= 1 or None, got {max_frames_per_node}")
        adapter = resolve_adapter(adapter)  # a shipped adapter's name ("quickstart") -> its package folder
        adapter_scale = adapter_scale_of(adapter, adapter_scale)
        max_seq_length = max_seq_length or adapter_max_seq_length(adapter) or DEFAULT_MAX_SEQ_LENGTH
        backbone = qwen3vl_backbone(str(backbone))
        self.max_frames_per_node = max_frames_per_node
        self.name = backbone
        dtype = getattr(torch, torch_dtype) if isinstance(torch_dtype, str) else torch_dtype
        local = Path(backbone).expanduser()
        if model is None:
            from transformers import AutoProcessor, Qwen3VLModel

            try:
                model = Qwen3VLModel.from_pretrained(str(backbone), dtype=dtype)
                processor = processor or AutoProcessor.from_pretrained(str(backbone), max_pixels=max_pixels)
            except OSError as err:
                raise OSError(
                    f"cannot load Qwen3-VL encoder {backbone!r}: give a local folder, or a hub id with network "
                    f"access (HF_HUB_OFFLINE unset). Cause: {err}"
                ) from err
            except (ImportError, AttributeError) as err:
                # transformers 5 builds Qwen3-VL's video processor (required by its processor) on torchvision.
                raise ImportError(
                    f"cannot build the Qwen3-VL processor for {backbone!r}: it needs torchvision "
                    f"(pip install 'canopy-lit[vl]', matching your torch build). Cause: {err}"
                ) from err
        self.model = model
        self.processor = processor
        self.tokenizer = tokenizer or getattr(processor, "tokenizer", None)
        if self.tokenizer is None:
            raise ValueError("Qwen3VLEncoder needs a tokenizer or a processor")
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.padding_side = "right"
        self.max_seq_length = max_seq_length
        self.query_instruction = query_instruction
        self.node_instruction = node_instruction
        self._role = "node"
        cfg = self.model.config
        self.dim = int(getattr(cfg, "text_config", cfg).hidden_size)
        # What select_inputs needs to find each input's patches: pad-token ids and the patch merge.
        self.patch_token_ids = {grid: getattr(cfg, name, None) for _, grid, name in PATCH_INPUTS}
        self.spatial_merge_size = int(getattr(getattr(cfg, "vision_config", None), "spatial_merge_size", 2))
        self.batch_size = batch_size
        # What the vectors depend on besides the weights: the weights' dtype and the image resolution the
        # processor resizes to (the processor's own setting when one is passed in).
        self.torch_dtype = str(next(self.model.parameters()).dtype).removeprefix("torch.")
        self.max_pixels = _processor_max_pixels(processor, max_pixels)
        self._backbone_hash = backbone_hash(
            local if local.is_dir() else None, f"{self.name}|{max_seq_length}"
        )
        self.freeze_vision()
        self.model.to(device)
        if adapter:
            self.load_adapter(adapter, scale=adapter_scale)

    @property
    def fingerprint(self) -> str:
        """Backbone + dtype + image resolution + adapter: the key of node and corpus embedding caches.

        dtype and ``max_pixels`` sit beside the backbone hash, not in it: an adapter trained at one of
        them still loads at another (``load_adapter`` compares backbone hashes)."""
        settings = f"dtype={self.torch_dtype},max_pixels={self.max_pixels}"
        return (
            f"{type(self).__name__}:{self.name}:{self._backbone_hash}|{settings}:adapter={self.adapter_hash()}"
        )

    def freeze_vision(self) -> None:
        visual = getattr(self.model, "visual", None)
        if visual is not None:
            for p in visual.parameters():
                p.requires_grad_(False)

    # ------------------------------------------------------------------ roles
    def encode_queries(self, texts: Sequence[str], batch_size: int | None = None) -> torch.Tensor:
        self._role = "query"
        try:
            return super().encode_queries(texts, batch_size)
        finally:
            self._role = "node"

    def lora_config(
        self,
        r: int,
        alpha: int,
        dropout: float,
        target_modules: Sequence[str] | str | None,
        layers: Sequence[int] | None = None,
    ) -> Any:
        from peft import LoraConfig

        targets: Any = target_modules
        if targets is None:
            targets = LANGUAGE_LORA_TARGETS
        elif not isinstance(targets, str):
            # Plain module names are restricted to the language tower: the vision tower stays frozen.
            targets = rf".*language_model.*\.({'|'.join(targets)})"
        return LoraConfig(
            r=r,
            lora_alpha=alpha,
            lora_dropout=dropout,
            target_modules=targets,
            layers_to_transform=list(layers) if layers is not None else None,
            layers_pattern="layers" if layers is not None else None,
        )

    def node_frames(self, x: EncoderInput) -> list[Frame]:
        """The frames of ``x`` that reach the model (``max_frames_per_node`` applied)."""
        return thin_frames(x.frames, self.max_frames_per_node) if isinstance(x, NodeInput) else []

    def input_length(self, x: EncoderInput) -> int:
        return len(input_text(x)) + 10_000 * len(self.node_frames(x))

    # ------------------------------------------------------------------ tokenisation
    def _prompt(self, x: EncoderInput, n_images: int) -> str:
        instruction = self.query_instruction if self._role == "query" else self.node_instruction
        user: list[dict[str, str]] = [{"type": "image"} for _ in range(n_images)]
        user.append({"type": "text", "text": input_text(x)})
        messages = [
            {"role": "system", "content": [{"type": "text", "text": instruction}]},
            {"role": "user", "content": user},
        ]
        templater = self.processor if self.processor is not None and n_images else self.tokenizer
        if getattr(templater, "chat_template", None):
            return templater.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if n_images:
            raise ValueError("visual node inputs need a Qwen3-VL processor with a chat template")
        return f"{instruction}\n{input_text(x)}"  # tokenizers without a chat template (tiny test models)

    def tokenize(self, inputs: Sequence[EncoderInput]) -> dict[str, torch.Tensor]:
        """Padded ``input_ids`` / ``attention_mask`` (right padding), plus pixel tensors for visual inputs."""
        images = [_load_images(self.node_frames(x)) for x in inputs]
        prompts = [self._prompt(x, len(im)) for x, im in zip(inputs, images, strict=True)]
        flat = [im for ims in images for im in ims]
        if flat:
            if self.processor is None:
                raise ValueError("visual node inputs need a Qwen3-VL processor")
            enc = self.processor(
                text=prompts, images=flat, padding=True, truncation=False, return_tensors="pt"
            )
        else:
            enc = self.tokenizer(
                prompts, padding=True, truncation=True, max_length=self.max_seq_length, return_tensors="pt"
            )
        return dict(enc)

    def patch_owners(self, batch: dict[str, torch.Tensor], grid_key: str) -> list[list[int]]:
        """Per input row, the indices of its images (rows of ``batch[grid_key]``), in order.

        The processor lays images out input by input, and an image of grid (t, h, w) expands to
        t*h*w / merge**2 pad tokens in its input's ``input_ids``, so counting pad tokens assigns them.
        """
        token_id = self.patch_token_ids.get(grid_key)
        if token_id is None:
            raise ValueError(f"{self.name}: the model config names no pad token for {grid_key!r}")
        tokens_per_grid = (batch[grid_key].prod(1) // self.spatial_merge_size**2).tolist()
        owners: list[list[int]] = []
        g = 0
        for count in (batch["input_ids"] == token_id).sum(1).tolist():
            mine = []
            while count > 0 and g < len(tokens_per_grid):
                mine.append(g)
                count -= tokens_per_grid[g]
                g += 1
            if count != 0:
                break
            owners.append(mine)
        if len(owners) != len(batch["input_ids"]) or g != len(tokens_per_grid):
            raise ValueError(
                f"{self.name}: {grid_key} does not match the pad tokens of input_ids "
                f"(spatial_merge_size {self.spatial_merge_size}): cannot split the batch by input"
            )
        return owners

    def select_inputs(self, batch: dict[str, torch.Tensor], rows: Sequence[int]) -> dict[str, torch.Tensor]:
        """Inputs ``rows`` of a tokenised batch, with their own images' grids and pixel patches."""
        rows = list(rows)
        patch_keys = {k for trio in PATCH_INPUTS for k in trio[:2]}
        out = {k: v[rows] for k, v in batch.items() if k not in patch_keys}
        for pixel_key, grid_key, _ in PATCH_INPUTS:
            if grid_key not in batch:
                continue
            grids = batch[grid_key]
            owners = self.patch_owners(batch, grid_key)
            picked = [g for r in rows for g in owners[r]]
            if not picked:
                continue  # text-only rows: the model takes its text path
            patches = grids.prod(1)  # pixel rows per image
            ends, sizes = patches.cumsum(0).tolist(), patches.tolist()
            pixels = batch[pixel_key]
            index = torch.cat([torch.arange(ends[g] - sizes[g], ends[g]) for g in picked])
            out[grid_key] = grids[picked]
            out[pixel_key] = pixels[index.to(pixels.device)]
        return out

    def embed(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B, D) normalised last-token hidden states."""
        dev = self.device
        batch = {k: v.to(dev, non_blocking=True) for k, v in batch.items()}
        hidden = self.model(**batch).last_hidden_state  # (B, L, D)
        mask = batch["attention_mask"]
        last = mask.shape[1] - 1 - mask.flip(1).float().argmax(1)  # right padding: last real token
        pooled = hidden[torch.arange(hidden.shape[0], device=dev), last]
        return F.normalize(pooled.float(), dim=-1)
