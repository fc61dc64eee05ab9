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
out (counted by ``split_report``). A question without a fixed split whose group holds fixed
questions follows them (test before val before train), so mixing records with and without a
``split`` keeps the splits document-disjoint.

The split seed is a setting of the data, not of training (``datamodule.split_seed``, evaluation's
``data.seed``, both 0 by default): an adapter records the seed of the split it trained on
(``record_adapter_split``) and ``adapter_split_problem`` names an evaluation that would test it on
a split made with another seed, i.e. partly on its own training questions.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from canopy_lit.data.base import Benchmark
from canopy_lit.data.benchmark import load_benchmark
from canopy_lit.encoders.fingerprint import FINGERPRINT_FILE, read_fingerprint
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
    fixed_train = {group[q.id] for q in bench.questions if q.meta.get("split") == "train"}
    share_val = f_val / (f_train + f_val) if f_train + f_val > 0 else 0.0
    out: dict[str, str | None] = {}
    for q in bench.questions:
        g, fixed = group[q.id], q.meta.get("split")
        u = _unit(g, seed)
        if fixed == "test" or (fixed is None and g in fixed_test):
            # A question without a fixed split follows the fixed questions of its document group, or
            # its documents would span two splits.
            out[q.id] = "test"
        elif fixed is None and g in fixed_val:
            out[q.id] = "val"
        elif fixed in ("train", "val") or (fixed is None and g in fixed_train):
            if g in fixed_test:
                out[q.id] = None
            elif fixed_val:  # the data names its val questions: keep both splits as given
                out[q.id] = "val" if fixed == "val" else None if g in fixed_val else "train"
            else:
                out[q.id] = "val" if u < share_val else "train"
        else:
            out[q.id] = "train" if u < f_train else "val" if u < f_train + f_val else "test"
    return out


def carve_val(train: Sequence[Question], fraction: float, seed: int = 0) -> tuple[list[Question], list[Question]]:
    """(val, train): about ``fraction`` of the ``train`` questions held out for validation, by whole document
    groups (in hash order of the group ids), so no document spans the two; at least one question when
    ``fraction`` > 0. A single group cannot be split: it stays train, and val is empty."""
    want = max(1, int(round(len(train) * fraction))) if fraction > 0 else 0
    group = groups(train)
    sizes = Counter(group.values())
    held: set[str] = set()
    count = 0
    for g in sorted(sizes, key=lambda g: (_unit(g, seed), g)):
        if count >= want or len(held) + 1 >= len(sizes):  # keep one group for training
            break
        held.add(g)
        count += sizes[g]
    return [q for q in train if group[q.id] in held], [q for q in train if group[q.id] not in held]


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
    split: Literal["train", "val", "test", "all"] = "all",
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


# ----------------------------------------------------------------- the split an adapter trained on
SPLIT_KEY = "split"  # the key of encoder_fingerprint.json that holds the training split's record


def record_adapter_split(adapter: str | Path, record: Mapping[str, Any]) -> None:
    """Add the training split's record (``PreferenceDataModule.split_record``: split seed, benchmarks) to the
    ``encoder_fingerprint.json`` of adapter folder ``adapter``."""
    path = Path(adapter) / FINGERPRINT_FILE
    meta = read_fingerprint(adapter) or {}
    meta[SPLIT_KEY] = dict(record)
    path.write_text(json.dumps(meta, indent=2) + "\n")


def adapter_split(adapter: str | Path) -> dict[str, Any] | None:
    """The split record of an adapter folder (its ``encoder_fingerprint.json``'s); None when it has none."""
    recorded = (read_fingerprint(adapter) or {}).get(SPLIT_KEY)
    return recorded if isinstance(recorded, dict) and "split_seed" in recorded else None


def adapter_split_problem(adapter: str | Path | None, benchmark: str, split: str, seed: int) -> str | None:
    """Why evaluating ``adapter`` on ``split`` of ``benchmark`` split with ``seed`` would test it on questions
    it trained on (one line), or None: no adapter, ``split="all"``, a benchmark it never trained on, the same
    seed, or an adapter that records no split."""
    if adapter is None or str(adapter) in ("", "None", "null") or split == "all":
        return None
    record = adapter_split(adapter)
    if record is None or benchmark not in list(record.get("benchmarks") or []):
        return None
    trained = int(record["split_seed"])
    if trained == int(seed):
        return None
    return (
        f"encoder.adapter {adapter} was trained on {benchmark}'s split made with split seed {trained} "
        f"(datamodule.split_seed), but data.seed={seed} makes another {split} split, which holds questions the "
        f"adapter trained on: evaluate with data.seed={trained}"
    )


def eval_split_problem(cfg: Any) -> str | None:
    """``adapter_split_problem`` for an evaluation config (``encoder.adapter``, ``data.name / split / seed``;
    a relative adapter path as given, else under ``paths.root_dir``); None in retrieval mode, which reads
    no ``data`` split."""
    from omegaconf import OmegaConf

    adapter = OmegaConf.select(cfg, "encoder.adapter", default=None)
    data = OmegaConf.select(cfg, "data", default=None)
    if not adapter or data is None or OmegaConf.select(cfg, "mode", default="qa") == "retrieval":
        return None
    path = Path(str(adapter))
    root = OmegaConf.select(cfg, "paths.root_dir", default=None)
    if not path.exists() and not path.is_absolute() and root:
        path = Path(str(root)) / path
    return adapter_split_problem(
        path, str(data.get("name")), str(data.get("split", "test")), int(data.get("seed", 0) or 0)
    )
