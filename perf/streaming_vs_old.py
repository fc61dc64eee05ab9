"""Streaming vs the former in-memory path on a real slice of the bundled union corpus (MiniLM f0).

    python perf/streaming_vs_old.py [--items 2000] [--old-commit 97a87fe] [--per-benchmark 250] [--out FILE.json]

Encoding the whole union (24,837 items) takes about an hour on 2 CPU cores, and the comparison encodes it
twice, so this runs on a slice: every k-th item of the union corpus JSONL (``--items`` of them, passages and
tables alike). Each path runs in its own process (peak RSS = ``getrusage`` ``ru_maxrss``; baseline = VmRSS
after imports and the encoder load):

- ``streaming`` (this checkout): ``encode_corpus`` (items read and rendered one chunk at a time) ->
  ``FaissIndex.build_from_shards`` (vectors gathered from the shards on disk, ids on disk);
- ``old``: ``canopy_lit/retrieval/encode.py`` and ``index.py`` as of ``--old-commit`` (read from git):
  ``encode_corpus`` rendering every pending item first -> ``load_shards`` (all vectors in RAM) ->
  ``FaissIndex.build``.

Compared: the embeddings (max |difference| per id) and the top-10 of the test-split questions of the four
bundled benchmarks (``--per-benchmark`` of each), retrieved from each index (modality partitions as
``build_retriever`` makes them).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # a source checkout without installing
BENCHMARKS = ["nq", "hotpotqa", "ottqa", "tatqa"]


def _rss_now() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _old_module(commit: str, name: str, work: Path) -> Any:
    src = subprocess.run(["git", "show", f"{commit}:canopy_lit/retrieval/{name}.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    path = work / f"old_{name}_{commit}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"old_{name}", path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[f"old_{name}"] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _questions(per_benchmark: int) -> list[str]:
    from canopy_lit.data.splits import load_split

    out: list[str] = []
    for name in BENCHMARKS:
        _, qs = load_split(name, split="test")
        out += [q.text for q in qs[:per_benchmark]]
    return out


def step(path: str, corpus: str, work: str, commit: str, per_benchmark: int) -> dict[str, Any]:
    import faiss
    import torch

    torch.set_num_threads(2)
    faiss.omp_set_num_threads(1)
    from canopy_lit.encoders import load_encoder
    from canopy_lit.retrieval.corpus import CorpusStore

    store = CorpusStore(corpus)
    encoder = load_encoder("minilm")
    queries = _questions(per_benchmark)
    kw = {"batch_size": 64, "shard_size": 512, "trainer_kwargs": {"accelerator": "cpu", "devices": 1}, "progress": False}
    emb = Path(work) / f"emb-{path}"
    base = _rss_now()
    t0 = time.perf_counter()
    if path == "streaming":
        from canopy_lit.retrieval.encode import encode_corpus
        from canopy_lit.retrieval.index import FaissIndex

        encode_corpus(store, encoder, emb, **kw)
        t_enc = time.perf_counter() - t0
        index = FaissIndex.build_from_shards(emb, store.ids, Path(work) / "index-streaming", groups=store.modalities,
                                             id_rows=store.rows)  # fmt: skip
    else:
        old_index = _old_module(commit, "index", Path(work))
        old_encode = _old_module(commit, "encode", Path(work))
        old_encode.encode_corpus(store, encoder, emb, **kw)
        t_enc = time.perf_counter() - t0
        ids, vecs = old_encode.load_shards(emb, order=store.ids)
        index = old_index.FaissIndex.build(ids, vecs, groups=store.modalities.tolist())
        index.save(Path(work) / "index-old")
    seconds = time.perf_counter() - t0
    peak = _peak()
    qv = encoder.encode_queries(queries).numpy()
    res = index.search(qv, 10)
    (Path(work) / f"top-{path}.json").write_text(json.dumps({"ids": res.ids, "scores": res.scores}))
    return {"seconds": seconds, "encode_s": t_enc, "index_s": seconds - t_enc, "baseline_rss": base,
            "peak_rss": peak, "queries": len(queries)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--old-commit", default="97a87fe", help="the commit whose encode/index are 'old'")
    ap.add_argument("--per-benchmark", type=int, default=250, help="test questions per benchmark")
    ap.add_argument("--work", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--corpus", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        r = step(args.child, args.corpus, args.work, args.old_commit, args.per_benchmark)
        print("RESULT " + json.dumps(r), flush=True)
        return 0
    from canopy_lit.assets import default_cache_dir
    from canopy_lit.retrieval.corpus import CorpusStore

    work = Path(args.work or tempfile.mkdtemp(prefix="streaming-vs-old-"))
    work.mkdir(parents=True, exist_ok=True)
    union = CorpusStore.from_benchmarks(BENCHMARKS, default_cache_dir("retrieval"))
    k = max(1, len(union) // args.items)
    rows = list(range(0, len(union), k))[: args.items]
    sliced = CorpusStore.write((union.item_at(r) for r in rows), work / "corpus.jsonl")
    print(f"slice: {sliced!r} (every {k}th item of {union!r})", file=sys.stderr, flush=True)
    results: dict[str, Any] = {"slice": repr(sliced), "every": k, "union_items": len(union)}
    for path in ("streaming", "old"):
        cmd = [sys.executable, __file__, "--child", path, "--corpus", str(sliced.path), "--work", str(work),
               "--old-commit", args.old_commit, "--per-benchmark", str(args.per_benchmark)]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "2"})
        if out.returncode:
            print(out.stderr[-4000:], file=sys.stderr)
            return 1
        results[path] = json.loads([x for x in out.stdout.splitlines() if x.startswith("RESULT ")][-1][7:])
        print(f"  {path}: {results[path]}", file=sys.stderr, flush=True)
    from canopy_lit.retrieval.encode import load_shards

    ids, a = load_shards(work / "emb-streaming", order=sliced.ids)
    _, b = load_shards(work / "emb-old", order=sliced.ids)
    ta = json.loads((work / "top-streaming.json").read_text())
    tb = json.loads((work / "top-old.json").read_text())
    same = sum(x == y for x, y in zip(ta["ids"], tb["ids"], strict=True))
    results["embeddings_max_abs_diff"] = float(np.abs(a - b).max())
    results["embeddings_bitwise_identical"] = bool(np.array_equal(a, b))
    results["top10_identical"] = f"{same}/{len(ta['ids'])}"
    results["scores_max_abs_diff"] = float(np.abs(np.asarray(ta["scores"]) - np.asarray(tb["scores"])).max())
    for path in ("streaming", "old"):
        r = results[path]
        r["peak_above_baseline_MB"] = round((r["peak_rss"] - r["baseline_rss"]) / 2**20, 1)
    text = json.dumps(results, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0 if same == len(ta["ids"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
