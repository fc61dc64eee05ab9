"""A Lightning checkpoint's LoRA weights as an adapter folder ``evaluate.py encoder.adapter=`` can load.

A training run saves the adapter of its best validation checkpoint (``RUN/adapter``). To probe another
checkpoint (e.g. the last step of a longer run, whose small training validation stopped improving),
write its LoRA weights into a copy of that adapter's structure:

    python -m canopy_lit.training.export experiments/runs/recipe/RUN      # last.ckpt -> RUN/adapter_last
    python -m canopy_lit.training.export RUN --ckpt RUN/checkpoints/X.ckpt --out DIR
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import torch

from canopy_lit.data.splits import adapter_split, record_adapter_split
from canopy_lit.encoders import load_encoder
from canopy_lit.encoders.base import adapter_node_pooling
from canopy_lit.encoders.fingerprint import read_fingerprint

PREFIX = "encoder.model."  # NodeEncoderModule.encoder.model: the peft model in the module's state_dict


def export_adapter(template: Path, ckpt: Path, out: Path, backbone: str = "minilm") -> int:
    """Load ``template`` (a saved adapter of the same run), overwrite its LoRA weights with ``ckpt``'s and
    save the result to ``out``; returns the checkpoint's global step.

    Raises:
        ValueError: the checkpoint's LoRA weights do not match the template's (another placement or rank).
    """
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    lora = {k.removeprefix(PREFIX): v for k, v in state["state_dict"].items() if "lora_" in k}
    # the template's pooling, so the exported fingerprint says how it was trained (and loading it warns of nothing)
    pooling = adapter_node_pooling(read_fingerprint(template) or {})
    encoder = load_encoder(backbone, adapter=template, **({"node_pooling": pooling} if pooling != "node" else {}))
    params = dict(encoder.model.named_parameters())
    want = {n for n in params if "lora_" in n}
    if set(lora) != want:
        raise ValueError(
            f"{ckpt}: its LoRA weights do not match adapter {template} ({len(set(lora) - want)} extra, "
            f"{len(want - set(lora))} missing): export from a checkpoint of the run that saved the adapter"
        )
    for name, value in lora.items():
        if params[name].shape != value.shape:
            raise ValueError(f"{ckpt}: {name} has shape {list(value.shape)}, adapter {template} {list(params[name].shape)}")
    encoder.model.load_state_dict(lora, strict=False)
    encoder.save_adapter(out)
    split = adapter_split(template)  # same run, same training split: evaluate.py checks data.seed against it
    if split is not None:
        record_adapter_split(out, split)
    return int(state.get("global_step", -1))


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m canopy_lit.training.export", description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="training run folder (holds adapter/ and checkpoints/)")
    ap.add_argument("--ckpt", type=Path, help="default: RUN/checkpoints/last.ckpt")
    ap.add_argument("--out", type=Path, help="default: RUN/adapter_last")
    ap.add_argument("--backbone", default="minilm")
    args = ap.parse_args(argv)
    ckpt = args.ckpt or args.run / "checkpoints" / "last.ckpt"
    out = args.out or args.run / "adapter_last"
    step = export_adapter(args.run / "adapter", ckpt, out, args.backbone)
    print(f"{ckpt} (global step {step}) -> {out}")


if __name__ == "__main__":
    main()
