"""Index build and search against corpus size: the streaming build from embedding shards on disk.

    python perf/index_scaling.py [--quick] [--sizes 100000 1000000 3000000] [--dim 384] [--queries 1000]
                                 [--old-max 1000000] [--work DIR] [--out FILE.json]

Vectors: random unit vectors (Gaussian, normalised; the encoder is not what this measures), D = ``--dim``,
written as ``encode_corpus`` writes them (``shard-r0-<seq>.npy`` + ``.ids.json``, 4,096 float32 vectors per
shard). Each step runs in its own process, so that its peak RSS (``getrusage`` ``ru_maxrss``) is its own; the
baseline is the process's RSS after its imports (``/proc/self/status`` VmRSS). FAISS runs on one thread.

Per size N:

- ``build``: ``FaissIndex.build_from_shards`` of the default kind (``flat_sq_fp16``, what ``build_retriever``
  builds): wall time (item-id list + id map + index + save) and peak RSS above the baseline, against the index
  bytes (the ``.faiss`` files);
- ``old``: today's-before path (``load_shards`` -> ``FaissIndex.build`` -> ``save``) for N <= ``--old-max``;
- ``sharded``: ``kind=flat`` split into 4 FAISS indexes (``shard_vectors`` = N/4 rounded up to 4,096) and
  searched through ``FaissIndex.search`` (exact merge), against one unsharded ``faiss.IndexFlatIP`` searched
  directly: top-10 ids of ``--queries`` random unit queries must be identical.

Fitted over the sizes: the build-time slope on log-log axes (goal <= 1.1) and the peak-RSS slope in bytes per
item (goal: the index's bytes per item plus a small id overhead, i.e. no second copy of the vectors). In
``perf/run.py`` the entry ``index_scaling`` has ratio = build-time slope, target <= 1.1.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # a source checkout without installing
SHARD = 4096  # encode_corpus's default shard_size
QUICK_SIZES = (20_000, 60_000, 200_000)
FULL_SIZES = (100_000, 1_000_000, 3_000_000)


def _rss_now() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _ids(n: int) -> list[str]:
    return [f"r{i:08d}" for i in range(n)]


def _bytes(folder: Path, pattern: str) -> int:
    return sum(p.stat().st_size for p in folder.glob(pattern))


# ---------------------------------------------------------------------- steps (each its own process)
def step_write(work: Path, n: int, dim: int, seed: int = 0) -> dict[str, Any]:
    emb = work / "emb"
    emb.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    ids = _ids(n)
    for s, lo in enumerate(range(0, n, SHARD)):
        x = rng.standard_normal((min(SHARD, n - lo), dim), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        (emb / f"shard-r0-{s:06d}.ids.json").write_text(json.dumps(ids[lo : lo + SHARD]))
        np.save(emb / f"shard-r0-{s:06d}.npy", x)
    return {"shards": math.ceil(n / SHARD), "shard_bytes": _bytes(emb, "*.npy")}


def _imports() -> Any:
    import faiss

    import canopy_lit.retrieval.encode  # noqa: F401  (same imports on both paths: same baseline)

    faiss.omp_set_num_threads(1)
    return faiss


def step_build(work: Path, n: int, kind: str, out: str, shard_vectors: int | None) -> dict[str, Any]:
    _imports()
    from canopy_lit.retrieval.index import FaissIndex

    base = _rss_now()
    t0 = time.perf_counter()
    ids = _ids(n)
    index = FaissIndex.build_from_shards(work / "emb", ids, work / out, kind=kind, shard_vectors=shard_vectors)
    seconds = time.perf_counter() - t0
    assert len(index) == n
    return {"seconds": seconds, "baseline_rss": base, "peak_rss": _peak(), "index_bytes": _bytes(work / out, "*.faiss"),
            "id_bytes": _bytes(work / out, "*.ids.*")}  # fmt: skip


def step_old(work: Path, n: int, kind: str, out: str) -> dict[str, Any]:
    _imports()
    from canopy_lit.retrieval.encode import load_shards
    from canopy_lit.retrieval.index import FaissIndex

    base = _rss_now()
    t0 = time.perf_counter()
    ids = _ids(n)
    got, x = load_shards(work / "emb", order=ids)
    FaissIndex.build(got, x, kind=kind).save(work / out)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "baseline_rss": base, "peak_rss": _peak(), "index_bytes": _bytes(work / out, "*.faiss")}


def _queries(nq: int, dim: int) -> np.ndarray:
    q = np.random.default_rng(1).standard_normal((nq, dim), dtype=np.float32)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def step_search(work: Path, dim: int, nq: int, out: str, raw: bool) -> dict[str, Any]:
    faiss = _imports()
    from canopy_lit.retrieval.ids import IdArray
    from canopy_lit.retrieval.index import FaissIndex, normalize

    q = _queries(nq, dim)
    if raw:  # one plain FAISS flat index, searched directly
        index = faiss.read_index(str(work / out / "all.faiss"))
        ids = IdArray(work / out / "all")
        t0 = time.perf_counter()
        scores, labels = index.search(normalize(q), 10)
        seconds = time.perf_counter() - t0
        top, top_s = ids[labels].tolist(), scores.tolist()
        kind = type(index).__name__
    else:
        index = FaissIndex.load(work / out)
        t0 = time.perf_counter()
        res = index.search(q, 10)
        seconds = time.perf_counter() - t0
        top, top_s = res.ids, res.scores
        kind = f"FaissIndex over {len(index.parts['all'].indexes)} shards"
    (work / f"{out}.top.json").write_text(json.dumps({"ids": top, "scores": top_s}))
    return {"seconds": seconds, "ms_per_query": 1e3 * seconds / nq, "index": kind, "peak_rss": _peak()}


def _child(step: str, **kw: Any) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", step, "--kw", json.dumps(kw)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode:
        raise RuntimeError(f"{step} {kw}: exit {out.returncode}\n{out.stderr[-3000:]}")
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


STEPS = {"write": step_write, "build": step_build, "old": step_old, "search": step_search}


# ---------------------------------------------------------------------- the run
def _fit(x: list[float], y: list[float]) -> tuple[float, float]:
    slope, intercept = np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)
    return float(slope), float(intercept)


def run(
    quick: bool = False,
    sizes: tuple[int, ...] | None = None,
    dim: int = 384,
    queries: int = 1000,
    old_max: int = 1_000_000,
    work: str | None = None,
) -> dict[str, Any]:
    sizes = tuple(sizes or (QUICK_SIZES if quick else FULL_SIZES))
    rows: dict[str, Any] = {}
    base = Path(work or tempfile.mkdtemp(prefix="index-scaling-"))
    for n in sizes:
        folder = base / f"n{n}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        kw = {"work": str(folder), "n": n}
        row: dict[str, Any] = {"write": _child("write", dim=dim, **kw)}
        row["build"] = _child("build", kind="flat_sq_fp16", out="sq", shard_vectors=None, **kw)
        sv = math.ceil(n / 4 / SHARD) * SHARD
        row["build_flat_sharded"] = _child("build", kind="flat", out="flat4", shard_vectors=sv, **kw)
        row["build_flat_single"] = _child("build", kind="flat", out="flat1", shard_vectors=None, **kw)
        a = _child("search", work=str(folder), dim=dim, nq=queries, out="flat4", raw=False)
        b = _child("search", work=str(folder), dim=dim, nq=queries, out="flat1", raw=True)
        top_a = json.loads((folder / "flat4.top.json").read_text())
        top_b = json.loads((folder / "flat1.top.json").read_text())
        same = sum(x == y for x, y in zip(top_a["ids"], top_b["ids"], strict=True))
        diff = float(np.max(np.abs(np.asarray(top_a["scores"]) - np.asarray(top_b["scores"]))))
        row["search"] = {"sharded": a, "single": b, "queries": queries, "identical_top10": same, "max_score_diff": diff}
        for sub in ("flat4", "flat1"):
            shutil.rmtree(folder / sub)
        if n <= old_max:
            row["old"] = _child("old", kind="flat_sq_fp16", out="old", **kw)
        b_ = row["build"]
        over = b_["peak_rss"] - b_["baseline_rss"]
        row["summary"] = {
            "build_s": round(b_["seconds"], 2),
            "index_MB": round(b_["index_bytes"] / 2**20, 1),
            "peak_above_baseline_MB": round(over / 2**20, 1),
            "peak_over_index": round(over / b_["index_bytes"], 3),
            "old_peak_above_baseline_MB": round((row["old"]["peak_rss"] - row["old"]["baseline_rss"]) / 2**20, 1)
            if "old" in row else None,
            "old_build_s": round(row["old"]["seconds"], 2) if "old" in row else None,
            "sharded_identical": f"{same}/{queries}",
        }  # fmt: skip
        print(f"  n={n:>9,d} {json.dumps(row['summary'])}", file=sys.stderr, flush=True)
        shutil.rmtree(folder)
        rows[str(n)] = row
    ns = [float(n) for n in sizes]
    t = [rows[str(n)]["build"]["seconds"] for n in sizes]
    over = [rows[str(n)]["build"]["peak_rss"] - rows[str(n)]["build"]["baseline_rss"] for n in sizes]
    index_per_item = rows[str(sizes[-1])]["build"]["index_bytes"] / sizes[-1]
    rss_slope, rss_intercept = _fit(ns, over)
    time_slope = float(np.polyfit(np.log(ns), np.log(t), 1)[0])
    identical = all(rows[str(n)]["search"]["identical_top10"] == queries for n in sizes)
    if not work:
        shutil.rmtree(base, ignore_errors=True)
    return {
        "ours": time_slope,
        "reference": 1.0,
        "ratio": time_slope,
        "target": 1.1,
        "direction": "max",
        "unit": "log-log slope of build seconds vs N",
        "vectors": f"random unit vectors, D={dim}, float32 shards of {SHARD}",
        "sizes": list(sizes),
        "build_time_loglog_slope": time_slope,
        "peak_rss_bytes_per_item": rss_slope,
        "peak_rss_constant_MB": rss_intercept / 2**20,
        "index_bytes_per_item": index_per_item,
        "peak_rss_per_item_over_index_per_item": rss_slope / index_per_item,
        "sharded_top10_identical_all_sizes": identical,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}: about a minute")
    ap.add_argument("--sizes", type=int, nargs="+", default=None)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--old-max", type=int, default=1_000_000, help="largest N the in-memory path is run at")
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    ap.add_argument("--out", default=None, help="JSON file to write")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--kw", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        kw = json.loads(args.kw)
        kw["work"] = Path(kw["work"])
        print("RESULT " + json.dumps(STEPS[args.child](**kw)), flush=True)
        return 0
    entry = run(args.quick, tuple(args.sizes) if args.sizes else None, args.dim, args.queries, args.old_max, args.work)
    text = json.dumps(entry, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(json.dumps({k: v for k, v in entry.items() if k != "rows"}, indent=1))
    return 0 if entry["ratio"] <= entry["target"] and entry["sharded_top10_identical_all_sizes"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
