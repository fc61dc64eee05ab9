"""Evidence evaluation without an LLM (``python evaluate.py experiment=evidence``).

Per question: retrieve top-k (the ``retriever`` group), build trees (B), score, refine with the
``refine`` group (canopy, keep-whole, flat, extractive, flat at canopy's token count), one
round, no critic, no reader call; then measure the evidence the reader would get, after the
reader cap (``loop.reader_max_tokens``), every measure alike:

- ``evidence/answer_recall``: share of questions whose evidence contains a gold answer
  (SQuAD-normalised tokens; bare numbers compared as numbers, so "1,234.5" = "1234.5",
  "(5.3)" = "-5.3", "12.5%" = "12.5"). TAT-QA multi-span answers need every span, arithmetic
  answers every derivation operand, count answers every counted cell; yes/no answers are
  left out (``evidence/answer_recall_n`` counts the questions measured);
- ``evidence/answer_recall_content``: the same questions, the answer looked up in the items'
  regions only: titles, table captions and column headers left out. They reach the reader with any
  region of an item, and CANOPY keeps a region of every retrieved item (flat and extractive may
  keep none), so the gap between the two is the recall that titles and headers carry;
- ``evidence/gold_recall``: gold leaves the reader gets / gold leaves of the retrieved gold items
  (micro over questions, as ``probe/gold_recall``); a leaf cut at a token boundary is not got;
- ``evidence/item_recall``: gold items retrieved at k / gold items (mean over questions with gold);
- ``evidence/tokens``: evidence tokens per question in the reader's tokenizer;
  ``evidence/kept_ratio``: those / whole-item tokens of the retrieved items (micro);
- the cap's effect: ``evidence/tokens_before_cap`` (the refiner's evidence, uncapped),
  ``evidence/truncated_items`` (items cut or dropped per question) and
  ``evidence/truncated_questions`` (share of questions the cap cut).

Records go to ``predictions.jsonl`` through the resumable harness; 95% bootstrap CIs over
questions sit beside each metric (``*_ci_low`` / ``*_ci_high``).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from hydra.utils import instantiate
from omegaconf import DictConfig

from canopy_lit.data.readers._gold import numbers_in
from canopy_lit.eval.harness import notify, run_questions, write_run_outputs
from canopy_lit.eval.metrics import bootstrap_ci, normalize_answer
from canopy_lit.eval.records import read_predictions
from canopy_lit.eval.summary import markdown_table
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.pipeline.build import (
    adapter_scale_label,
    build_encoder,
    build_retriever,
    build_scorer,
    load_questions,
)
from canopy_lit.pipeline.loop import EvidenceLoop, LoopSettings, ReaderBlock
from canopy_lit.pipeline.retrievers import CandidateRetriever
from canopy_lit.pipeline.trace import STAGES, QuestionRecord
from canopy_lit.refine import ParentRelativeRefiner, Refiner, leaf_ids
from canopy_lit.retrieval.node_cache import NodeEmbeddingCache
from canopy_lit.types import Question, Tree

TokenCounter = Callable[[str], int]

# --- answer matching ------------------------------------------------------------------------------

# A bare number as TAT-QA writes answers and cells: "$1,496.5", "(5.3)", "-12", "12.5%", "3.2 million".
_BARE_NUMBER = re.compile(
    r"^[\s$€£¥(+\-–]*(\d[\d,]*(?:\.\d+)?|\.\d+)\s*%?\)?\s*(?:thousand|million|billion|percent)?s?\s*$", re.I
)
_OPERAND = re.compile(r"\d[\d,]*(?:\.\d+)?")
_YES_NO = {"yes", "no"}


def as_number(text: str) -> float | None:
    """|value| of a bare number ("$1,496.5" -> 1496.5, "(5.3)" -> 5.3, "12.5%" -> 12.5), else None.

    Signs are dropped because tables write negatives as "(5.3)" and answers as "-5.3".
    """
    m = _BARE_NUMBER.match(str(text))
    if not m:
        return None
    try:
        return abs(float(m.group(1).replace(",", "")))
    except ValueError:
        return None


def _formula_constant(operand: str) -> bool:
    """A constant of the formula, not a value read from the evidence: "/ 2" (averages), "- 1" (growth),
    "* 100" (percentages). Bare small integers and powers of ten only; "2,019" or "1.5" are values."""
    return operand.isdigit() and (int(operand) <= 10 or int(operand) in (100, 1000))


def answer_needles(question: Question) -> list[list[str]] | None:
    """What the evidence must contain: alternatives, each a list of strings that must all occur.

    Returns None when the answer cannot be looked up in text (yes/no, no answer, an arithmetic
    answer without operands).
    """
    answers = [a for a in question.answers if str(a).strip()]
    if not answers:
        return None
    kind = str(question.meta.get("answer_type") or "")
    derivation = str(question.meta.get("derivation") or "")
    if kind == "arithmetic":  # the computed value is not in the evidence; its operands are
        operands = [x for x in dict.fromkeys(_OPERAND.findall(derivation)) if not _formula_constant(x)]
        return [operands] if operands else None
    if kind == "count":  # the counted cells, "a##b##c" (or the one cell)
        cells = [c.strip() for c in derivation.split("##") if c.strip()]
        return [cells] if cells else None
    if kind == "multi-span":
        return [answers]
    if all(normalize_answer(a) in _YES_NO for a in answers):
        return None
    return [[a] for a in answers]


@dataclass
class EvidenceText:
    """Evidence prepared once for many look-ups: normalised tokens and the numbers written in it."""

    tokens: list[str]
    numbers: list[float]

    @classmethod
    def of(cls, text: str) -> EvidenceText:
        return cls(normalize_answer(text).split(), numbers_in(text))

    def contains(self, needle: str) -> bool:
        """Bare numbers by value (isclose), anything else as a contiguous run of normalised tokens."""
        value = as_number(needle)
        if value is not None:
            return any(math.isclose(value, x, rel_tol=1e-9, abs_tol=1e-9) for x in self.numbers)
        want = normalize_answer(needle).split()
        n = len(want)
        if not n:
            return False
        toks = self.tokens
        first = want[0]
        return any(toks[i] == first and toks[i : i + n] == want for i in range(len(toks) - n + 1))


def answer_found(needles: list[list[str]] | None, text: str | EvidenceText) -> bool | None:
    """Does ``text`` hold every string of at least one alternative? None when not measurable."""
    if needles is None:
        return None
    ev = text if isinstance(text, EvidenceText) else EvidenceText.of(text)
    return any(all(ev.contains(s) for s in alt) for alt in needles if alt)


# --- gold leaves and items ------------------------------------------------------------------------


def kept_leaves(leaf_ranges: Sequence[Sequence[int]]) -> set[int]:
    """Leaf indices covered by ``[start, end)`` ranges."""
    return {leaf for s, e in leaf_ranges for leaf in range(int(s), int(e))}


def gold_leaf_counts(
    gold: Mapping[str, Sequence[int]], kept: Mapping[str, Sequence[Sequence[int]]]
) -> tuple[int, int]:
    """(gold leaves kept, gold leaves) over the retrieved gold items with located gold.

    Args:
        gold: item id -> gold leaf indices (``Question.gold``; [] = not located, skipped).
        kept: retrieved item id -> kept leaf ranges.
    """
    hit = total = 0
    for iid, ranges in kept.items():
        leaves = set(gold.get(iid) or ())
        if leaves:
            total += len(leaves)
            hit += len(leaves & kept_leaves(ranges))
    return hit, total


def item_recall(gold_items: Sequence[str], retrieved: Sequence[str]) -> float | None:
    """Share of gold items among the retrieved ones; None without gold items."""
    if not gold_items:
        return None
    got = set(retrieved)
    return sum(i in got for i in gold_items) / len(gold_items)


# --- token counting -------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def token_counter(spec: str) -> TokenCounter:
    """``text -> tokens`` of the reader's tokenizer (asset name, GGUF file or tokenizer folder).

    GGUF tokenizers are read from the file's metadata (no weights, no LLM engine); one counter per
    spec and process, so the jobs of a multirun share it and its memo.
    """
    from canopy_lit.llm.tokenizers import load_tokenizer

    encode = load_tokenizer(spec)

    @functools.lru_cache(maxsize=200_000)
    def count(text: str) -> int:
        return len(encode(text)) if text else 0

    return count


# --- flat top leaves at a matched token budget ----------------------------------------------------


class FlatMatchedRefiner:
    """Flat baseline at a matched budget: the best-scoring leaves until the reference's token count.

    For each call (one question's round), the ``reference`` refiner (CANOPY with the δ of the run it
    is matched to) runs on the same scores; its evidence is counted in the reader's tokens; then
    leaves of all items are added in score order, each only if the total stays within that count (a
    leaf that does not fit is skipped, smaller ones may still fit). Flat evidence is thus never longer
    than CANOPY's. Both are charged what the reader is handed: an item of which nothing is kept gets
    no block from the loop, so it costs nothing (not even its title). Tables flagged for aggregation
    are kept whole by both and count against the budget.

    Args:
        tokenizer: the reader's tokenizer spec (``token_counter``), e.g. ``qwen2.5-1.5b``.
        reference: the refiner whose token count is matched (default: parent-relative with
            ``descend_margin``).
        hierarchy: renders evidence (rendering does not depend on B); default builders.
        descend_margin: δ of the CANOPY run this one is matched to (its ``refine.descend_margin``).
    """

    name = "flat_matched"
    needs_scores = True
    lazy = False  # every leaf is a candidate: score every node

    def __init__(
        self,
        tokenizer: str,
        reference: Refiner | None = None,
        hierarchy: Hierarchy | None = None,
        descend_margin: float = 0.0,
    ) -> None:
        if reference is not None and descend_margin:
            raise ValueError("refine.descend_margin sets the default reference's δ: set it on refine.reference")
        self.tokenizer = tokenizer
        self.reference = reference or ParentRelativeRefiner(lazy=False, descend_margin=descend_margin)
        self.hierarchy = hierarchy or Hierarchy()
        self.last_budget = 0  # tokens of the reference's evidence in the latest call (for records)

    @property
    def count(self) -> TokenCounter:
        return token_counter(self.tokenizer)

    def _tokens(self, tree: Tree, kept: Sequence[int]) -> int:
        """Reader tokens of the block the loop renders for ``kept`` (none when nothing is kept)."""
        if not kept:
            return 0
        return self.count(self.hierarchy.evidence_text(tree, sorted(kept, key=lambda i: int(tree.starts[i]))))

    def __call__(
        self, trees: Sequence[Tree], scores: Sequence[np.ndarray], aggregation: Sequence[bool] | None = None
    ) -> list[list[int]]:
        """Kept leaf ids per tree (leaf order); ``scores[j]``: (num_nodes_j,) s(q, v)."""
        agg = list(aggregation or [False] * len(trees))
        budget = sum(
            self._tokens(t, k) for t, k in zip(trees, self.reference(trees, scores, agg), strict=True)
        )
        self.last_budget = budget
        chosen: list[list[int]] = [[0] if a else [] for a in agg]
        cost = [self._tokens(t, c) for t, c in zip(trees, chosen, strict=True)]
        total = sum(cost)
        cand = [
            (float(np.asarray(s)[v]), j, int(v))
            for j, (t, s, a) in enumerate(zip(trees, scores, agg, strict=True))
            if not a
            for v in leaf_ids(t)
        ]
        cand.sort(key=lambda x: (-x[0], x[1], int(trees[x[1]].starts[x[2]])))
        for _, j, v in cand:  # on past a full budget too: a leaf that closes an elided gap may cost nothing
            # A leaf costs at least its own tokens less a few merged at the seams: skip hopeless ones
            # without re-rendering the item (the exact check below decides the rest).
            if self.count(self.hierarchy.evidence_text(trees[j], [v])) - 8 > budget - total + cost[j]:
                continue
            new = self._tokens(trees[j], [*chosen[j], v])
            if total - cost[j] + new <= budget:
                chosen[j].append(v)
                total += new - cost[j]
                cost[j] = new
        return [sorted(c, key=lambda i: int(t.starts[i])) for t, c in zip(trees, chosen, strict=True)]


# --- the run ----------------------------------------------------------------------------------------


class EvidenceCapture:
    """The reader's seat without a reader: keeps the evidence blocks it is handed, answers ""."""

    def __init__(self) -> None:
        self.blocks: dict[str, list[str]] = {}

    def answer(self, question: Question, evidence: list[str]) -> str:
        self.blocks[question.id] = list(evidence)
        return ""


class CachedCandidateRetriever(CandidateRetriever):
    """``CandidateRetriever`` whose item embeddings come from a disk cache shared by runs and jobs.

    The ranking is unchanged: items are still embedded by ``encoder.encode_queries`` of their root
    text (f0); the cache (``NodeEmbeddingCache`` over ``_QuerySideEncoder``) only stores them.
    """

    def __init__(self, base: CandidateRetriever, cache: Any) -> None:
        super().__init__(
            base.items,
            base.candidates,
            base.encoder,
            base.hierarchy,
            base.router,
            ranking=base.ranking,
            rrf_k=base.rrf_k,
            weights=base.weights,
        )
        self.cache = cache

    def _embed(self, ids: Sequence[str]) -> np.ndarray:
        missing = [i for i in ids if i not in self._emb]
        if missing:
            trees = [self.hierarchy.build(self.items[i]) for i in missing]
            for i, e in zip(missing, self.cache.embed_trees(trees, [[0]] * len(trees)), strict=True):
                self._emb[i] = e[0]
        return np.stack([self._emb[i] for i in ids])


class _QuerySideEncoder:
    """f0 query-side embeddings of node texts, seen as a node encoder (for the retrieval cache).

    Other attributes (``dim``, ``max_seq_length``, ...) are the wrapped encoder's, so the cache key
    holds every encoder setting the node cache keys on.
    """

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder

    def __getattr__(self, name: str) -> Any:
        return getattr(self.encoder, name)

    @property
    def fingerprint(self) -> str:
        return str(self.encoder.fingerprint).rsplit(":adapter=", 1)[0] + ":adapter=none|query-side"

    def encode_nodes(self, inputs: Sequence[Any], batch_size: int | None = None) -> Any:
        return self.encoder.encode_queries([getattr(x, "text", x) for x in inputs], batch_size)


@dataclass
class EvidenceRecord:
    """A ``QuestionRecord`` (one round, no prediction) plus what the evidence holds."""

    record: QuestionRecord
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**self.record.to_dict(), "evidence": self.evidence}


class EvidenceRunner:
    """One question through the loop's stages (one round, no LLM), then the evidence measured.

    Args:
        loop: an ``EvidenceLoop`` whose reader is an ``EvidenceCapture``.
        capture: that reader.
    """

    def __init__(self, loop: EvidenceLoop, capture: EvidenceCapture) -> None:
        self.loop = loop
        self.capture = capture

    def __call__(self, question: Question) -> EvidenceRecord:
        rec, capped = self.loop.run_with_evidence(question)
        blocks = self.capture.blocks.pop(question.id, [])
        items = [k for rd in rec.rounds for k in rd.kept]
        # Every measure is of what the reader gets, after the reader cap.
        delivered = {k.item_id: k.delivered_ranges for k in items}
        retrieved = [i for rd in rec.rounds for i in rd.retrieved]
        hit, total = gold_leaf_counts(question.gold, delivered)
        needles = answer_needles(question)
        content = "\n\n".join(c for c in (content_text(self.loop.hierarchy, b) for b in capped.items) if c)
        budget = getattr(self.loop.refiner, "last_budget", None)
        ev = {
            "answer_found": answer_found(needles, "\n\n".join(blocks)),
            "answer_found_content": answer_found(needles, content),
            "answer_needles": needles,
            "answer_type": question.meta.get("answer_type"),
            "gold_items": len(question.gold),
            "gold_items_retrieved": sum(i in set(retrieved) for i in question.gold),
            "gold_leaves": total,
            "gold_leaves_kept": hit,
            "tokens": rec.evidence_tokens,
            "item_tokens": sum(k.item_tokens for k in items),
            "kept_tokens": sum(k.delivered_tokens for k in items),
            "tokens_before_cap": sum(k.kept_tokens for k in items),
            "truncated_items": rec.truncated_items,
        }
        if budget is not None:
            ev["budget_tokens"] = budget
        return EvidenceRecord(rec, ev)


def content_text(hierarchy: Hierarchy, block: ReaderBlock) -> str:
    """What the reader gets of an item's regions: its block without the item's title, table caption and
    column header, which reach the reader with any region of the item (CANOPY keeps one of every
    retrieved item, flat and extractive may keep none)."""
    tree = block.evidence.tree
    item = tree.item
    if block.cap == "dropped" or (not block.node_ids and block.cut_leaf is None):
        return ""
    bare = copy.copy(tree)
    bare.item = dataclasses.replace(
        item, title="", table=dataclasses.replace(item.table, header=[], caption="") if item.table else None
    )
    if block.cut_leaf is None:
        return hierarchy.evidence_text(bare, block.node_ids)
    # Cut at a token boundary: the renderings with and without the header share the cut-off tail.
    tail = len(hierarchy.evidence_text(tree, [block.cut_leaf])) - block.cut_chars
    text = hierarchy.evidence_text(bare, [block.cut_leaf])
    return text[: max(0, len(text) - tail)]


def score_evidence(rec: Mapping[str, Any], question: Question) -> dict[str, float]:
    """Per-question scores of an evidence record (the harness stores them under ``scores``)."""
    ev = rec.get("evidence") or {}
    out: dict[str, float] = {"tokens": float(ev.get("tokens", 0))}
    if ev.get("answer_found") is not None:
        out["answer_recall"] = float(ev["answer_found"])
    if ev.get("answer_found_content") is not None:
        out["answer_recall_content"] = float(ev["answer_found_content"])
    if ev.get("gold_items"):
        out["item_recall"] = ev["gold_items_retrieved"] / ev["gold_items"]
    if ev.get("gold_leaves"):
        out["gold_recall"] = ev["gold_leaves_kept"] / ev["gold_leaves"]
    return out


def bootstrap_ratio_ci(
    num: Sequence[float], den: Sequence[float], n_boot: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """95% percentile bootstrap CI of sum(num) / sum(den), resampling questions."""
    x, y = np.asarray(num, float), np.asarray(den, float)
    if len(x) == 0 or y.sum() == 0:
        return float("nan"), float("nan")
    idx = np.random.default_rng(seed).integers(0, len(x), size=(n_boot, len(x)))
    d = y[idx].sum(axis=1)
    ratios = np.divide(x[idx].sum(axis=1), d, out=np.full(n_boot, np.nan), where=d > 0)
    return float(np.nanquantile(ratios, 0.025)), float(np.nanquantile(ratios, 0.975))


def summarize_evidence(records: Sequence[Mapping[str, Any]], prefix: str = "evidence") -> dict[str, float]:
    """Flat ``evidence/*`` metrics (+ 95% CIs) and ``time/*`` from the run's records.

    Failed questions count in ``evidence/failed`` and as evidence without the answer.
    """
    recs = list(records)
    ok = [r for r in recs if r.get("status") == "ok"]
    out: dict[str, float] = {f"{prefix}/n": float(len(recs)), f"{prefix}/failed": float(len(recs) - len(ok))}
    if not recs:
        return out
    evs = [r.get("evidence") or {} for r in ok]

    def put(name: str, vals: Sequence[float]) -> None:
        if vals:
            out[f"{prefix}/{name}"] = float(np.mean(vals))
            out[f"{prefix}/{name}_ci_low"], out[f"{prefix}/{name}_ci_high"] = bootstrap_ci(vals)

    found = [float(e["answer_found"]) for e in evs if e.get("answer_found") is not None]
    found += [0.0] * (len(recs) - len(ok))  # a failed question delivered no evidence
    put("answer_recall", found)
    out[f"{prefix}/answer_recall_n"] = float(len(found))
    # The same questions, the answer looked up in the items' regions only (titles and headers left out).
    content = [float(e["answer_found_content"]) for e in evs if e.get("answer_found_content") is not None]
    if content:
        put("answer_recall_content", content + [0.0] * (len(recs) - len(ok)))
    for kind in sorted({str(e["answer_type"]) for e in evs if e.get("answer_type")}):
        sub = [
            float(e["answer_found"])
            for e in evs
            if e.get("answer_type") == kind and e.get("answer_found") is not None
        ]
        if sub:
            out[f"{prefix}/answer_recall/{kind}"] = float(np.mean(sub))
    put("item_recall", [e["gold_items_retrieved"] / e["gold_items"] for e in evs if e.get("gold_items")])
    for name, num, den in (
        ("gold_recall", "gold_leaves_kept", "gold_leaves"),
        ("kept_ratio", "kept_tokens", "item_tokens"),
    ):
        n, d = [float(e.get(num, 0)) for e in evs], [float(e.get(den, 0)) for e in evs]
        if sum(d):
            out[f"{prefix}/{name}"] = sum(n) / sum(d)
            out[f"{prefix}/{name}_ci_low"], out[f"{prefix}/{name}_ci_high"] = bootstrap_ratio_ci(n, d)
    put("tokens", [float(e.get("tokens", 0)) for e in evs])
    if evs and all("truncated_items" in e for e in evs):
        # The reader cap's effect: items cut or dropped per question, the share of questions it cut.
        out[f"{prefix}/tokens_before_cap"] = float(np.mean([e["tokens_before_cap"] for e in evs]))
        out[f"{prefix}/truncated_items"] = float(np.mean([e["truncated_items"] for e in evs]))
        out[f"{prefix}/truncated_questions"] = float(np.mean([e["truncated_items"] > 0 for e in evs]))
    budgets = [float(e["budget_tokens"]) for e in evs if "budget_tokens" in e]
    if budgets:
        out[f"{prefix}/budget_tokens"] = float(np.mean(budgets))
    out[f"{prefix}/latency_s"] = float(np.mean([r.get("latency_s", 0.0) for r in ok])) if ok else 0.0
    for stage in STAGES:
        secs = [(r.get("time_s") or {}).get(stage, 0.0) for r in ok]
        if any(secs):
            out[f"time/{stage}_s"] = float(np.sum(secs))
    return out


def build_evidence_runner(cfg: DictConfig, bench: Any) -> EvidenceRunner:
    """The QA pipeline's stages from the config (the ``retriever`` group, tree, scorer, ``refine``
    group), one round, the reader's tokenizer for counting, and no LLM at all."""
    if cfg.retrieval.get("routing"):
        raise ValueError(
            "mode=evidence makes no LLM call: set retrieval.routing=false (the router is an LLM)"
        )
    if int(cfg.retrieval.k) < 1:
        raise ValueError(f"mode=evidence needs retrieval.k >= 1, got {cfg.retrieval.k}")
    hierarchy: Hierarchy = instantiate(cfg.tree)
    refiner = instantiate(cfg.refine)
    if isinstance(refiner, FlatMatchedRefiner):
        refiner.hierarchy = hierarchy  # render its budget exactly as the loop renders evidence
    count = token_counter(str(cfg.evidence.tokenizer))
    encoder = build_encoder(cfg)
    cache_dir = cfg.retrieval.get("node_cache_dir")
    cache_dir = Path(cache_dir) if cache_dir else None
    scorer = build_scorer(cfg, encoder, hierarchy, refiner)  # RECOMP's own f0 scorer, else the encoder (fθ)
    retriever = build_retriever(cfg, bench, encoder, hierarchy, None)
    if type(retriever) is CandidateRetriever:
        retriever = CachedCandidateRetriever(
            retriever, NodeEmbeddingCache(_QuerySideEncoder(encoder), hierarchy, cache_dir=cache_dir)
        )
    capture = EvidenceCapture()
    settings = LoopSettings(
        k=int(cfg.retrieval.k),
        max_rounds=1,
        exclude_seen=False,
        reader_max_tokens=int(cfg.loop.reader_max_tokens),
        aggregation_check=False,
    )
    loop = EvidenceLoop(retriever, hierarchy, refiner, capture, count, scorer=scorer, settings=settings)
    return EvidenceRunner(loop, capture)


EVIDENCE_COLUMNS = [
    "evidence/n",
    "evidence/answer_recall",
    "evidence/answer_recall_content",
    "evidence/gold_recall",
    "evidence/item_recall",
    "evidence/tokens",
    "evidence/kept_ratio",
]


def run_evidence(cfg: DictConfig, out_dir: Path) -> dict[str, float]:
    """``mode: evidence``: every question of the split, durably, then metrics.json and table.md."""
    bench, questions = load_questions(cfg, notify)
    runner = build_evidence_runner(cfg, bench)
    records = run_questions(
        questions,
        runner,
        out_dir,
        retry_failed=bool(cfg.get("retry_failed", False)),
        progress=bool(cfg.get("progress", True)),
        score=score_evidence,
    )
    metrics = summarize_evidence(records)
    refine = str(cfg.refine._target_).rsplit(".", 1)[-1]
    row = {"refine": refine, "benchmark": cfg.data.name, **{c: metrics.get(c) for c in EVIDENCE_COLUMNS}}
    setting = (
        f"benchmark={cfg.data.name} split={cfg.data.get('split')} scope={cfg.retriever.get('name')} "
        f"k={cfg.retrieval.k} B={cfg.tree.branching} refine={refine} encoder={cfg.encoder.get('backbone')} "
        f"adapter={cfg.encoder.get('adapter')}{adapter_scale_label(cfg)} tokenizer={cfg.evidence.tokenizer}"
    )
    write_run_outputs(
        out_dir, metrics, markdown_table([row], ["refine", "benchmark", *EVIDENCE_COLUMNS], setting)
    )
    return metrics


# --- paired comparison of two runs ---------------------------------------------------------------


def paired_difference(
    a: Sequence[float], b: Sequence[float], n_boot: int = 1000, seed: int = 0
) -> tuple[float, float, float]:
    """mean(a - b) over paired questions and its 95% percentile bootstrap CI."""
    d = np.asarray(a, float) - np.asarray(b, float)
    if len(d) == 0:
        return float("nan"), float("nan"), float("nan")
    lo, hi = bootstrap_ci(d, n_boot=n_boot, seed=seed)
    return float(d.mean()), lo, hi


def compare_runs(run_a: str | Path, run_b: str | Path) -> dict[str, float]:
    """Run A against run B on the questions both recorded (paired by id; failed = no answer).

    Returns:
        ``answer_recall_diff`` (A - B, in [−1, 1]) with ``_ci_low`` / ``_ci_high`` over the questions
        measurable in both; ``answer_recall_content_diff`` the same with the answer looked up in the
        items' regions only (titles and headers left out; runs that recorded it); ``token_ratio`` =
        tokens A / tokens B (sum over questions) with its CI; ``n`` paired questions, ``n_answer`` of
        them with a measurable answer.
    """
    recs = [{r["id"]: r for r in read_predictions(Path(p) / "predictions.jsonl")} for p in (run_a, run_b)]
    ids = [i for i in recs[0] if i in recs[1]]
    if not ids:
        raise ValueError(f"{run_a} and {run_b} share no recorded question")

    def ev(r: Mapping[str, Any]) -> Mapping[str, Any]:
        failed = {"answer_found": False, "answer_found_content": False, "tokens": 0}
        return r.get("evidence") or {} if r.get("status") == "ok" else failed

    pairs = [(ev(recs[0][i]), ev(recs[1][i])) for i in ids]
    both = [
        (x, y) for x, y in pairs if x.get("answer_found") is not None and y.get("answer_found") is not None
    ]
    diff, lo, hi = paired_difference(
        [float(x["answer_found"]) for x, _ in both], [float(y["answer_found"]) for _, y in both]
    )
    ta, tb = [float(x.get("tokens", 0)) for x, _ in pairs], [float(y.get("tokens", 0)) for _, y in pairs]
    rlo, rhi = bootstrap_ratio_ci(ta, tb)
    content: dict[str, float] = {}
    if all("answer_found_content" in e for pair in both for e in pair):
        cdiff, clo, chi = paired_difference(
            [float(x["answer_found_content"]) for x, _ in both], [float(y["answer_found_content"]) for _, y in both]
        )
        content = {
            "answer_recall_content_diff": cdiff,
            "answer_recall_content_diff_ci_low": clo,
            "answer_recall_content_diff_ci_high": chi,
        }
    return {
        "n": float(len(ids)),
        "n_answer": float(len(both)),
        "answer_recall_diff": diff,
        "answer_recall_diff_ci_low": lo,
        "answer_recall_diff_ci_high": hi,
        **content,
        "token_ratio": sum(ta) / sum(tb) if sum(tb) else float("nan"),
        "token_ratio_ci_low": rlo,
        "token_ratio_ci_high": rhi,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m canopy_lit.eval.evidence RUN_A RUN_B``: paired answer-recall difference and token ratio."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m canopy_lit.eval.evidence", description=main.__doc__)
    ap.add_argument("run_a", help="evidence run folder (e.g. canopy)")
    ap.add_argument("run_b", help="evidence run folder to compare against (e.g. keep-whole)")
    args = ap.parse_args(argv)
    try:
        c = compare_runs(args.run_a, args.run_b)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    def points(key: str) -> str:
        return f"{100 * c[key]:+.1f} points [{100 * c[key + '_ci_low']:+.1f}, {100 * c[key + '_ci_high']:+.1f}]"

    lines = [
        f"paired questions {c['n']:.0f} ({c['n_answer']:.0f} with a measurable answer)",
        f"answer recall A - B: {points('answer_recall_diff')}",
    ]
    if "answer_recall_content_diff" in c:
        lines.append(f"answer recall A - B, titles and headers left out: {points('answer_recall_content_diff')}")
    lines.append(
        f"tokens A / B: {c['token_ratio']:.3f} [{c['token_ratio_ci_low']:.3f}, {c['token_ratio_ci_high']:.3f}] "
        f"({abs(100 * (1 - c['token_ratio'])):.0f}% {'fewer' if c['token_ratio'] <= 1 else 'more'})"
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
