"""Training throughput: instances/s of the real NodeEncoderModule step vs a bare forward+backward.

    python perf/train_step.py [--quick] [--device cuda] [--batches N]

"ours" = the whole training step on real HotpotQA + NQ instances: collate (render-once,
tokenise-once), cached f0 queries, length-sorted node chunks, pairwise loss, backward, AdamW.
"reference" = a bare forward+backward of the same backbone (same LoRA-wrapped MiniLM, mean
pooling) on the very same padded node-token batch, no loss or optimiser. Ratio = ours /
reference (target >= 0.8: the training machinery costs at most 20% over the raw model).
``--device cuda``: both paths on the GPU (model, token tensors and the step's batch moved there, the
clock read after ``torch.cuda.synchronize``); ``ours`` / ``reference`` are absolute instances/s.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from functools import partial

import torch

TARGET = 0.8


def _batches(n_batches: int, batch_size: int = 16):
    from canopy_lit.data import load_benchmark, split_questions
    from canopy_lit.data.datamodule import PreferenceDataModule
    from canopy_lit.hierarchy import Hierarchy
    from canopy_lit.supervision import training_instances

    insts = []
    for name, n_q in (("hotpotqa", 40), ("nq", 120)):
        bench = load_benchmark(name)
        insts += training_instances(split_questions(bench, "train")[:n_q], bench.items, Hierarchy(2))
    random.Random(0).shuffle(insts)
    dm = PreferenceDataModule.from_instances({"train": insts}, ["hotpotqa", "nq"], batch_size=batch_size)
    ex = dm.examples["train"]
    return dm, [ex[i * batch_size : (i + 1) * batch_size] for i in range(n_batches)]


def _to(batch, device: torch.device):
    """Tensors of a (nested) token dict moved to ``device`` (non-blocking: the host copies are fresh)."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to(v, device) for k, v in batch.items()}
    return batch


def run(quick: bool = False, device: str = "cpu", n_batches: int | None = None) -> dict:
    """Measure both paths on the same batches; returns {"ours","reference","ratio","target","unit",...}.

    Args:
        quick: 3 timed batches instead of 10.
        device: ``cpu`` or ``cuda`` (both paths run there).
        n_batches: timed batches (overrides ``quick``; more gives steadier GPU numbers).
    """
    from canopy_lit.encoders import load_encoder
    from canopy_lit.training import NodeEncoderModule, pairwise_ranking_loss

    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"--device {device}: torch sees no CUDA device")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    n = n_batches or (3 if quick else 10)
    dm, groups = _batches(n + 1)
    enc = load_encoder("minilm", max_seq_length=256)
    module = NodeEncoderModule(enc, optimizer=partial(torch.optim.AdamW, lr=1e-3, weight_decay=0.0), lora_target_modules=["query", "key", "value", "dense"], lora_layers=[3, 4, 5])
    module.to(dev)
    dm.set_tokenizer(enc.tokenize)
    module.train()
    opt = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=1e-3)

    def ours(examples) -> None:
        batch = dm.collate(examples).to(dev)
        win, lose = module.pair_scores(batch)
        loss = pairwise_ranking_loss(win, lose, batch.mask, module.hparams.scale)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def reference(tokens) -> None:
        out = enc.model(**tokens).last_hidden_state
        mask = tokens["attention_mask"].unsqueeze(-1).float()
        pooled = (out * mask).sum(1) / mask.sum(1)
        pooled.sum().backward()
        enc.model.zero_grad(set_to_none=True)

    def reference_sorted(tokens) -> None:
        enc.embed_sorted(tokens, module.hparams.chunk_size).sum().backward()
        enc.model.zero_grad(set_to_none=True)

    # The reference gets the same node tokens the real step encodes (queries excluded: f0 is cached).
    # (already on the device: the reference pays no host-to-device copy, ours does, as in training)
    token_batches = [_to(dm.collate(g).node_tokens, dev) for g in groups]
    ours(groups[0])  # warm-up: query cache, allocator, threads, CUDA kernels
    reference(token_batches[0])
    reference_sorted(token_batches[0])
    sync()
    t_ours = t_ref = t_sorted = 0.0
    for g, tok in zip(groups[1:], token_batches[1:], strict=True):  # interleaved: same machine load for all
        t = time.perf_counter()
        ours(g)
        sync()
        t_ours += time.perf_counter() - t
        t = time.perf_counter()
        reference(tok)
        sync()
        t_ref += time.perf_counter() - t
        t = time.perf_counter()
        reference_sorted(tok)
        sync()
        t_sorted += time.perf_counter() - t
    inst = sum(len(g) for g in groups[1:])
    res_ours, res_ref, res_sorted = inst / t_ours, inst / t_ref, inst / t_sorted
    return {
        "ours": res_ours,
        "reference": res_ref,
        "ratio": res_ours / res_ref,
        "target": TARGET,
        "unit": "instances/s",
        "reference_sorted": res_sorted,
        "ratio_sorted": res_ours / res_sorted,
        "device": str(dev) if dev.type != "cuda" else torch.cuda.get_device_name(dev),
        "timed_instances": inst,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (both paths run there)")
    ap.add_argument("--batches", type=int, default=None, help="timed batches (default 10, --quick 3)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(json.dumps(run(args.quick, args.device, args.batches), indent=2))
