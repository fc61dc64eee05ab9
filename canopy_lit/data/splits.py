"""Deterministic train / val / test splits, disjoint by source document.

Questions are grouped by the documents they depend on: their gold items and their
source document (``Question.meta["doc"]``: a Wikipedia page for NQ, the table for
OTT-QA / TAT-QA / MMQA, the video for LVBench). Questions sharing any such document
fall in one group (union-find), and a group's split is a hash of its smallest
document id and the seed, never a random state: the same file gives the same split
on every machine, and a gold table, paragraph or video never spans two splits.

A question whose reader fixed its split (``Question.meta["split"]``, HotpotQA: the
train file trains, the dev file tests) keeps it; without fixed ``val`` questions, ``val``
is carved from the train questions by the same group hash. A train or val group that
shares a document with a test question (a train group one with a val question) is left
out (counted by ``split_report``).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable

from canopy_lit.data.base import Benchmark
from canopy_lit.data.benchmark import load_benchmark
from canopy_lit.types import Question

SPLITS = ("train", "val", "test")
DEFAULT_FRACTIONS = (0.8, 0.1, 0.1)


def _docs(q: Question) -> list[str]:
    doc = q.meta.get("doc")
    docs = [doc] if isinstance(doc, str) else [str(d) for d in doc or []]
    return sorted(set(docs) | set(q.gold)) or [f"question:{q.id}"]


def groups(questions: Iterable[Question]) -> dict[str, str]:
    """Question id -> group id (the smallest document id of its connected component)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    docs = {q.id: _docs(q) for q in questions}
    for ds in docs.values():
        root = find(ds[0])
        for d in ds[1:]:
            other = find(d)
            if other != root:
                # Keep the smaller id as root so the representative is order-independent.
                lo, hi = sorted((root, other))
                parent[hi] = lo
                root = lo
    return {qid: find(ds[0]) for qid, ds in docs.items()}


def _unit(group: str, seed: int) -> float:
    """A uniform number in [0, 1) from the group id and seed (stable across runs and machines)."""
    digest = hashlib.sha1(f"{seed}:{group}".encode()).hexdigest()
    return int(digest[:15], 16) / 16**15


def assign_splits(
    bench: Benchmark, seed: int = 0, fractions: tuple[float, float, float] = DEFAULT_FRACTIONS
) -> dict[str, str | None]:
    """Question id -> "train" | "val" | "test" | None (None: left out to keep splits disjoint)."""
    if len(fractions) != 3 or min(fractions) < 0 or sum(fractions) <= 0:
        raise ValueError(f"fractions must be three non-negative shares, got {fractions}")
    total = sum(fractions)
    f_train, f_val = fractions[0] / total, fractions[1] / total
    group = groups(bench.questions)
    fixed_test = {group[q.id] for q in bench.questions if q.meta.get("split") == "test"}
    fixed_val = {group[q.id] for q in bench.questions if q.meta.get("split") == "val"}
    out: dict[str, str | None] = {}
    for q in bench.questions:
        g, fixed = group[q.id], q.meta.get("split")
        u = _unit(g, seed)
        if fixed == "test":
            out[q.id] = "test"
        elif fixed in ("train", "val"):
            if g in fixed_test:
                out[q.id] = None
            elif fixed_val:  # the data names its val questions: keep both splits as given
                out[q.id] = "val" if fixed == "val" else None if g in fixed_val else "train"
            else:
                share_val = f_val / (f_train + f_val) if f_train + f_val > 0 else 0.0
                out[q.id] = "val" if u < share_val else "train"
        else:
            out[q.id] = "train" if u < f_train else "val" if u < f_train + f_val else "test"
    return out


def split_questions(
    bench: Benchmark, split: str, seed: int = 0, fractions: tuple[float, float, float] = DEFAULT_FRACTIONS
) -> list[Question]:
    """The questions of one split ("train" | "val" | "test" | "all"), in file order.

    Args:
        bench: a loaded benchmark.
        split: which split; "all" returns every question.
        seed: changes the hash, hence the assignment, deterministically.
        fractions: train / val / test shares for benchmarks without fixed splits.
    """
    if split == "all":
        return list(bench.questions)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS + ('all',)}, got {split!r}")
    assigned = assign_splits(bench, seed, fractions)
    return [q for q in bench.questions if assigned[q.id] == split]


def split_report(
    bench: Benchmark, seed: int = 0, fractions: tuple[float, float, float] = DEFAULT_FRACTIONS
) -> dict[str, dict[str, int]]:
    """Per split: number of questions and of document groups (``excluded`` = left out for disjointness)."""
    assigned = assign_splits(bench, seed, fractions)
    group = groups(bench.questions)
    qs: Counter = Counter()
    gs: dict[str, set[str]] = {}
    for qid, s in assigned.items():
        name = s or "excluded"
        qs[name] += 1
        gs.setdefault(name, set()).add(group[qid])
    return {s: {"questions": qs[s], "groups": len(gs[s])} for s in (*SPLITS, "excluded") if qs[s]}


def load_split(
    name: str,
    path: str | None = None,
    split: str = "all",
    seed: int = 0,
    options: dict | None = None,
    reader: str | None = None,
) -> tuple[Benchmark, list[Question]]:
    """A benchmark and one split of its questions, from the keys of a ``configs/data/*.yaml``.

    ``reader``: a registered benchmark or dotted path that reads ``path`` (``load_benchmark``); None: the
    registry entry of ``name``.

    Example: ``bench, qs = load_split(**cfg.data)`` with ``cfg.data`` resolved to a dict.
    """
    bench = load_benchmark(name, path, reader=reader, **dict(options or {}))
    return bench, split_questions(bench, split, seed)
