"""Realistic evaluation run folders for the report tests, made by the real pipeline code.

Records come from the real ``EvidenceLoop`` + ``run_questions`` + ``summarize`` on real
bundled questions and items; only the model-backed stages are stand-ins, named so:

- ``WordOverlapScorer``: stands in for the MiniLM scorer (cosine of word sets), so that
  trees get real, question-dependent refinement without loading a model;
- ``AnswerInEvidenceReader``: answers a gold answer when the evidence contains it, else
  "unknown" (so EM depends on what refinement kept);
- ``OneFollowupCritic``: asks one follow-up round, then stops.

The ``.hydra/config.yaml`` written here mirrors the keys and the unresolved interpolations
that Hydra saves for ``python evaluate.py``.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from canopy_lit.control import Decision
from canopy_lit.data import load_benchmark
from canopy_lit.eval.harness import run_questions, write_run_outputs
from canopy_lit.eval.probe import RefinementProbe
from canopy_lit.eval.summary import markdown_table, summarize
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.pipeline.loop import EvidenceLoop, LoopSettings
from canopy_lit.refine import FlatTopMRefiner, KeepWholeRefiner, ParentRelativeRefiner
from canopy_lit.types import Item, Question, Tree

ROOT = Path(__file__).resolve().parents[2]
REFINERS = {
    "parent_relative": "canopy_lit.refine.ParentRelativeRefiner",
    "keep_whole": "canopy_lit.refine.KeepWholeRefiner",
    "flat_top_m": "canopy_lit.refine.FlatTopMRefiner",
}
STOP = {"the", "a", "an", "of", "in", "on", "is", "was", "what", "which", "who", "and", "to", "for", "by", "did"}


@cache
def bench(name: str):
    return load_benchmark(name)


def words(text: str, stop: bool = False) -> set[str]:
    ws = set(re.findall(r"\w+", text.lower()))
    return ws - STOP if stop else ws


class WordOverlapScorer:
    """Stand-in for ``NodeScorer`` in unit tests: s(q, v) = |Q ∩ V| / sqrt(|Q| |V|) over word sets."""

    def __init__(self, hierarchy: Hierarchy, drop_stopwords: bool = False) -> None:
        self.hierarchy = hierarchy
        self.stop = drop_stopwords

    def embed_query(self, query: str) -> frozenset[str]:
        return frozenset(words(query, self.stop))

    def score(
        self, query: str | frozenset[str], trees: list[Tree], nodes: list[list[int]] | None = None
    ) -> list[np.ndarray]:
        q = self.embed_query(query) if isinstance(query, str) else query
        out = []
        for j, t in enumerate(trees):
            s = []
            for i in range(len(t)) if nodes is None else nodes[j]:
                v = words(self.hierarchy.node_text(t, i), self.stop)
                s.append(len(q & v) / math.sqrt(max(1, len(q)) * max(1, len(v))))
            out.append(np.asarray(s, dtype=np.float32))
        return out


class OverlapRetriever:
    """The question's delivered items ranked by word overlap with the query (scope=candidates)."""

    def __init__(self, name: str) -> None:
        self.bench = bench(name)
        self.h = Hierarchy()
        self.words: dict[str, set[str]] = {}

    def _words(self, item_id: str) -> set[str]:
        if item_id not in self.words:
            self.words[item_id] = words(self.h.node_text(self.h.build(self.bench.items[item_id]), 0), True)
        return self.words[item_id]

    def retrieve(self, query: str, k: int, exclude: set[str], question: Question) -> list[Item]:
        q = words(query, True)
        ids = [i for i in self.bench.candidates.get(question.id, []) if i not in exclude]
        ids.sort(key=lambda i: -len(q & self._words(i)))
        return [self.bench.items[i] for i in ids[:k]]


class Calls:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()


class OneFollowupCritic:
    def __init__(self, calls: Calls) -> None:
        self.c = calls

    def step(self, question: Question, evidence: str | list[str], round: int, history: list[dict[str, Any]]) -> Decision:
        self.c.calls["critic"] += 1
        if round == 0:
            return Decision(False, f"{question.text} background", {"sufficient": False, "missing": "the bridge entity"})
        return Decision(True, None, {"sufficient": True})


class AnswerInEvidenceReader:
    def __init__(self, calls: Calls) -> None:
        self.c = calls

    def answer(self, question: Question, evidence: str | list[str]) -> str:
        self.c.calls["reader"] += 1
        text = evidence if isinstance(evidence, str) else "\n".join(evidence)
        return next((a for a in question.answers if a and a.lower() in text.lower()), "unknown")


def _config(method: str, name: str, refine: str, k: int, b: int, r: int, exclude_seen: bool, m: int | None,
            adapter: str | None, limit: int, study: str | None, mode: str = "qa") -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "task_name": "evaluate",
        "mode": mode,
        "limit": limit,
        "seed": 0,
        "loop": {"max_rounds": r, "reader_max_tokens": 16000, "aggregation_check": True},
        "paths": {"root_dir": "${oc.env:PROJECT_ROOT,${hydra:runtime.cwd}}", "data_dir": "${paths.root_dir}/data",
                  "output_dir": "${hydra:runtime.output_dir}"},
        "data": {"name": name, "path": "${paths.data_dir}/" + ("hotpotqa" if name == "hotpotqa" else f"{name}/x"),
                 "split": "test", "seed": 0, "options": {"strict": True}},
        "encoder": {"backbone": "minilm", "adapter": adapter},
        "tree": {"_target_": "canopy_lit.hierarchy.Hierarchy", "branching": b},
        "refine": {"_target_": REFINERS[refine], **({"m": m} if m is not None else {})},
        "retrieval": {"k": k, "exclude_seen": exclude_seen, "routing": False},
        "llm": {"model": "qwen2.5-1.5b"},
        "method": {"name": method, "controller": "critic" if r > 1 else "none"},
    }
    if name == "tatqa":
        cfg["data"]["path"] = "${paths.data_dir}/tatqa/tatqa_dataset_dev.json"
    if study:
        cfg["study"] = study
    return cfg


def _write_hydra(run_dir: Path, cfg: dict[str, Any], overrides: list[str]) -> None:
    hyd = run_dir / ".hydra"
    hyd.mkdir(parents=True, exist_ok=True)
    (hyd / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    (hyd / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    runtime = {"cwd": str(ROOT), "output_dir": str(run_dir)}
    (hyd / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"runtime": runtime}}))


def make_qa_run(
    run_dir: Path,
    name: str = "hotpotqa",
    n: int = 4,
    *,
    method: str = "canopy",
    refine: str = "parent_relative",
    k: int = 3,
    branching: int = 2,
    max_rounds: int = 2,
    exclude_seen: bool = False,
    m: int | None = None,
    adapter: str | None = "outputs/train/adapter",
    study: str | None = None,
    overrides: list[str] | None = None,
) -> Path:
    """An evaluation run folder over the first ``n`` test questions of a bundled benchmark."""
    b = bench(name)
    questions = [q for q in b.questions if q.meta.get("split", "test") == "test" and q.gold][:n]
    h = Hierarchy(branching)
    calls = Calls()
    refiner = {"parent_relative": ParentRelativeRefiner, "keep_whole": KeepWholeRefiner}.get(refine)
    loop = EvidenceLoop(
        OverlapRetriever(name),
        h,
        refiner() if refiner else FlatTopMRefiner(m or 5),
        AnswerInEvidenceReader(calls),
        lambda s: len(s.split()),
        scorer=WordOverlapScorer(h),
        controller=OneFollowupCritic(calls) if max_rounds > 1 else None,
        settings=LoopSettings(k=k, max_rounds=max_rounds, exclude_seen=exclude_seen),
    )

    def answer(q: Question):
        before = Counter(calls.calls)
        rec = loop.run(q)
        rec.llm_calls = dict(calls.calls - before)  # what the LLM call log attributes to this question
        return rec

    records = run_questions(questions, answer, run_dir, progress=False)
    metrics = summarize(records)
    write_run_outputs(run_dir, metrics, markdown_table([{"method": method, **metrics}], ["method", "eval/f1"]))
    cfg = _config(method, name, refine, k, branching, max_rounds, exclude_seen, m, adapter, n, study)
    _write_hydra(run_dir, cfg, overrides or [f"method={method}", f"data={name}"])
    return run_dir


def make_probe_run(run_dir: Path, name: str = "hotpotqa", n: int = 6, *, adapter: str | None = None,
                   study: str | None = None) -> Path:
    """A probe run folder: real ``RefinementProbe`` statistics with the word-overlap scorer
    (stopwords kept for ``adapter=None`` "f0", dropped for the "fθ" stand-in)."""
    b = bench(name)
    h = Hierarchy(2)
    probe = RefinementProbe(h, WordOverlapScorer(h, drop_stopwords=adapter is not None))
    for q in [q for q in b.questions if q.gold][:n]:
        probe.add(q, b.items, b.candidates.get(q.id, ()))
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "probe_nodes.jsonl").open("w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in probe.node_rows)
    write_run_outputs(run_dir, probe.metrics(), "probe\n")
    cfg = _config("canopy", name, "parent_relative", 10, 2, 3, False, None, adapter, n, study, mode="probe")
    _write_hydra(run_dir, cfg, [f"data={name}", f"encoder.adapter={adapter}"])
    return run_dir


HYDRA_KEYS = {
    "name": "data",
    "method": "method",
    "refine": "refine",
    "k": "retrieval.k",
    "max_rounds": "loop.max_rounds",
    "branching": "tree.branching",
    "exclude_seen": "retrieval.exclude_seen",
    "m": "refine.m",
    "adapter": "encoder.adapter",
}


def make_multirun(parent: Path, jobs: list[dict[str, Any]], study: str | None = None) -> Path:
    """A Hydra-multirun-like folder: ``multirun.yaml`` + one subdir per job, named by its overrides."""
    parent.mkdir(parents=True, exist_ok=True)
    (parent / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"mode": "MULTIRUN"}}))
    for job in jobs:
        job = dict(job)
        probe = job.pop("probe", False)
        ov = sorted(f"{HYDRA_KEYS[k]}={'null' if v is None else v}" for k, v in job.items() if k in HYDRA_KEYS)
        d = parent / ",".join(ov)
        if probe:
            make_probe_run(d, job.get("name", "hotpotqa"), job.get("n", 6), adapter=job.get("adapter"), study=study)
        else:
            make_qa_run(d, **job, study=study, overrides=ov)
    return parent
