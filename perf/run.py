"""Run every performance benchmark side by side and write one JSON file of ratios.

    python perf/run.py [--quick] [--only NAME ...] --out FILE.json

Each entry is ``{"ours", "reference", "ratio", "target", "unit"}`` (ratio = ours / reference,
except throughput entries where it is ours / reference in items per second); the process exits
non-zero when a target is missed. ``scaling`` is descriptive (fitted growth slopes), no target.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # sibling benchmark modules
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # a source checkout without installing

import torch  # noqa: E402


def registry() -> dict[str, Callable[[bool], dict[str, Any]]]:
    import batched_loop
    import cross_scoring
    import late_chunking
    import memory
    import refine
    import retrieval
    import train_step

    return {
        "refine_vs_reader": lambda q: refine.refine_vs_reader(q),
        "lazy_vs_eager": lambda q: refine.lazy_vs_eager(q),
        "encode_vs_raw": lambda q: retrieval.encode_vs_raw(quick=q),
        "batch_tokens": lambda q: retrieval.batch_tokens(quick=q),
        "encoder_cost": lambda q: retrieval.encoder_cost(quick=q),
        "cache_speedup": lambda q: retrieval.cache_speedup(quick=q),
        "late_vs_node": lambda q: late_chunking.run(quick=q),
        "cross_vs_node": lambda q: cross_scoring.run(quick=q),
        "train_step_vs_raw": lambda q: train_step.run(quick=q),
        "train_step_gpu": lambda q: _on_cuda(lambda: train_step.run(quick=q, device="cuda", n_batches=10 if q else 30)),
        "faiss_vs_raw": lambda q: retrieval.faiss_vs_raw(quick=q),
        "scaling": lambda q: refine.scaling(q),
        "batched_vs_sequential": lambda q: batched_loop.batched_vs_sequential(q),
        "train_memory": lambda q: memory.entry(),  # peak RSS of the MiniLM smoke training vs its 3 GB budget
    }


def _on_cuda(bench: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run a GPU benchmark, or report it skipped (no target, so not a miss) where torch sees no GPU."""
    if not torch.cuda.is_available():
        return {"skipped": "no CUDA device", "target": None}
    return bench()


def target_met(entry: dict[str, Any]) -> bool | None:
    """None when the entry has no target; ``direction`` max means ratio must stay at or below it."""
    if entry.get("target") is None or entry.get("ratio") is None:
        return None
    if entry.get("direction", "min") == "max":
        return entry["ratio"] <= entry["target"]
    return entry["ratio"] >= entry["target"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller inputs; finishes within ~5 minutes on 2 cores")
    ap.add_argument("--only", nargs="*", help="run only these benchmarks")
    ap.add_argument("--out", required=True, help="JSON file to write")
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    benches = registry()
    names = args.only or list(benches)
    unknown = sorted(set(names) - set(benches))
    if unknown:
        ap.error(f"unknown benchmark(s) {unknown}; choose from {sorted(benches)}")
    results: dict[str, Any] = {
        "_meta": {
            "quick": args.quick,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "machine": platform.machine(),
            "cuda": torch.cuda.is_available(),
        }
    }
    failed: list[str] = []
    t_all = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        try:
            entry = benches[name](args.quick)
        except Exception as err:  # one broken benchmark must not hide the others' numbers
            traceback.print_exc()
            entry = {"error": f"{type(err).__name__}: {err}"}
            failed.append(name)
        entry["seconds"] = round(time.perf_counter() - t0, 2)
        met = target_met(entry)
        if met is False:
            failed.append(name)
        results[name] = entry
        shown = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in entry.items() if not isinstance(v, dict)}
        print(f"{name:18s} {'PASS' if met else 'MISS' if met is False else '    '} {json.dumps(shown)}", flush=True)
    results["_meta"]["total_seconds"] = round(time.perf_counter() - t_all, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    if failed:
        print(f"targets missed or errors: {sorted(set(failed))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
