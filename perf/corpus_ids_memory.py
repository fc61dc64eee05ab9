"""Memory of an open ``CorpusStore`` against corpus size: packed ids against the list of str it replaced.

    python perf/corpus_ids_memory.py [--sizes 100000 1000000] [--work DIR] [--out FILE.json]

A corpus JSONL of N short text items is written (ids like ``bench:Title of a page 123456``, 30 characters,
the length of the bundled corpora's ids). Each measurement runs in its own process, after its imports:

- ``packed``: ``CorpusStore(path)`` as it is now (ids as one utf-8 buffer + int64 offsets, line offsets in an
  int64 array, the id map of sorted hashes);
- ``list``: the representation before (ids as a list of str, line offsets as a list of int, then the same
  arrays and id map), read with the same loop.

Reported per N and kind: resident memory held once the store is open (VmRSS after minus before, bytes per
item), peak RSS above the baseline, seconds to open; and the ratio list / packed of the held bytes. The
file's own lines are never held by either.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import gc, json, resource, sys, time
from array import array
import numpy as np
from canopy_lit.retrieval.corpus import CorpusStore
from canopy_lit.retrieval.ids import IdMap
from canopy_lit.types import Modality

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

kind, path = sys.argv[1], sys.argv[2]
gc.collect()
before = rss()
t0 = time.perf_counter()
if kind == "packed":
    held = CorpusStore(path)
else:  # the former reading loop: Python lists, then arrays
    ids, mods, offsets, pos = [], [], [], 0
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                ids.append(str(rec["id"]))
                mods.append(Modality(rec["modality"]).value)
                offsets.append(pos)
            pos += len(line)
    held = (ids, np.asarray(mods, dtype=object), np.asarray(offsets, dtype=np.int64), IdMap(ids))
    del offsets, mods
seconds = time.perf_counter() - t0
gc.collect()
after = rss()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"held": after - before, "peak": peak - before, "seconds": seconds}))
"""


def write_corpus(path: Path, n: int) -> None:
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            rid = f"bench:Title of a page {i:06d}"[:30]
            f.write(json.dumps({"id": rid, "modality": "text", "title": "t", "text": "A short sentence."}) + "\n")


def measure(kind: str, path: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, kind, str(path)], capture_output=True, text=True, check=True,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        for n in args.sizes:
            path = Path(tmp) / f"corpus-{n}.jsonl"
            write_corpus(path, n)
            got = {kind: measure(kind, path) for kind in ("list", "packed")}
            row = {"n": n, **{f"{k}_{m}": v[m] for k, v in got.items() for m in ("held", "peak", "seconds")}}
            row["held_ratio"] = got["list"]["held"] / max(got["packed"]["held"], 1)
            rows.append(row)
            print(f"N = {n:,}: held list {got['list']['held'] / n:.0f} B/item, packed {got['packed']['held'] / n:.0f} "
                  f"B/item (x{row['held_ratio']:.2f}); peak list {got['list']['peak'] / 2**20:.0f} MiB, packed "
                  f"{got['packed']['peak'] / 2**20:.0f} MiB; open {got['list']['seconds']:.1f} s vs "
                  f"{got['packed']['seconds']:.1f} s", flush=True)  # fmt: skip
            path.unlink()
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
