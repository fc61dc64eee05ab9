"""The evidence loop (METHOD.md §1.1 steps 1-8): the only place in the pipeline with control flow.

Every method of the paper is this loop with different stages plugged in::

    method        retriever   refiner           controller   rounds
    no_retrieval  none        -                 none         0
    vanilla       top-k       keep_whole        none         1
    universalrag  routed      keep_whole        none         1   (modality routing only)
    ircot         top-k       keep_whole        IRCoT step   R   (few-shot chains from train questions)
    recomp        top-k       extractive (f0)   none         1   (own scorer, no aggregation check)
    flat          top-k       flat_top_m (fθ)   critic       R
    canopy        top-k       parent_relative   critic       R

so every ablation row is a config override, never a code path.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from canopy_lit.control import Controller
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.hierarchy.base import TokenCounter
from canopy_lit.pipeline.round import compress_round
from canopy_lit.pipeline.trace import KeptItem, QuestionRecord, RoundTrace, StageTimer
from canopy_lit.reader import CappedEvidence, EvidenceBudget, Reader
from canopy_lit.refine import AggregationCheck, Refiner
from canopy_lit.retrieval.base import Retriever
from canopy_lit.scoring.scorers import NodeScorer
from canopy_lit.types import Evidence, Item, Modality, Question


@dataclass
class LoopSettings:
    """Knobs of the loop. ``max_rounds=0`` = no retrieval; ``exclude_seen`` = follow-up rounds ask the
    index for k items not already held (False = paper behaviour: duplicates are fetched and skipped).

    The loop is the one owner of ``k`` and ``exclude_seen`` (config ``retrieval.k``,
    ``retrieval.exclude_seen``): it passes both to ``Retriever.retrieve`` every round."""

    k: int = 10
    max_rounds: int = 3
    exclude_seen: bool = False
    reader_max_tokens: int = 16000
    aggregation_check: bool = True


class EvidenceLoop:
    """Retrieve -> trees -> score -> refine -> accumulate -> control, then read.

    Args:
        retriever: top-k item source (None = no retrieval).
        hierarchy: tree builders (branching B).
        refiner: parent-relative, keep-whole or flat top-m.
        reader: answers from the accumulated evidence.
        count_tokens: the reader's tokenizer (evidence tokens are counted in reader tokens).
        scorer: node scorer; required when the refiner needs scores.
        controller: critic / IRCoT step; None = stop after the first round.
        aggregation: table aggregation classifier (question alone), used the first time a table appears.
        settings: loop knobs.
    """

    def __init__(
        self,
        retriever: Retriever | None,
        hierarchy: Hierarchy,
        refiner: Refiner,
        reader: Reader,
        count_tokens: TokenCounter,
        scorer: NodeScorer | None = None,
        controller: Controller | None = None,
        aggregation: AggregationCheck | None = None,
        settings: LoopSettings | None = None,
    ) -> None:
        self.retriever = retriever
        self.hierarchy = hierarchy
        self.refiner = refiner
        self.reader = reader
        self.count_tokens = count_tokens
        self.scorer = scorer
        self.controller = controller
        self.aggregation = aggregation
        self.settings = settings or LoopSettings()
        if refiner.needs_scores and scorer is None:
            raise ValueError(
                f"refiner {type(refiner).__name__} needs node scores but no scorer/encoder is configured"
            )

    @property
    def budget(self) -> EvidenceBudget:
        """The reader cap (``settings.reader_max_tokens`` in the reader's tokens), read at each use."""
        return EvidenceBudget(self.hierarchy, self.count_tokens, self.settings.reader_max_tokens)

    # -- one question --------------------------------------------------------------------------
    def run(self, question: Question) -> QuestionRecord:
        return self.run_with_evidence(question)[0]

    def run_with_evidence(self, question: Question) -> tuple[QuestionRecord, CappedEvidence]:
        """``run``, also returning what the reader was handed of each held item (for evidence metrics)."""
        s = self.settings
        timer = StageTimer()
        t0 = time.perf_counter()
        rec = QuestionRecord(question.id, question.text, list(question.answers), question.benchmark)
        evidence: list[Evidence] = []
        evidence_tokens: list[int] = []  # reader tokens of each whole block, in step with ``evidence``
        evidence_trace: list[KeptItem] = []  # the trace entry of each held block, in step with ``evidence``
        held: set[str] = set()
        history: list[dict[str, Any]] = []
        aggregation: bool | None = None
        query = question.text
        rounds = s.max_rounds if (self.retriever is not None and s.k > 0) else 0
        for r in range(rounds):
            with timer("retrieve"):
                items = list(self.retriever.retrieve(query, s.k, held if s.exclude_seen else set(), question))
            new = _unseen(items, held)
            trace = RoundTrace(r, query, [it.id for it in items], len(items) - len(new))
            with timer("trees"):
                trees = [self.hierarchy.build(it) for it in new]
            flags = [False] * len(trees)
            if (
                s.aggregation_check
                and self.aggregation is not None
                and any(t.item.modality == Modality.TABLE for t in trees)
            ):
                if aggregation is None:  # classified once per question, from the question alone
                    with timer("aggregation"):
                        aggregation = bool(self.aggregation.is_aggregation(question))
                flags = [aggregation and t.item.modality == Modality.TABLE for t in trees]
            round_evidence = compress_round(query, trees, self.refiner, self.hierarchy, self.scorer, flags, r, timer)
            for ev, flag in zip(round_evidence, flags, strict=True):
                tree, ids = ev.tree, ev.node_ids
                held.add(tree.item.id)  # retrieved and judged, even when no region of it was kept
                # A refiner may keep nothing of an item (flat top-m chose none of its leaves): the
                # reader and the critic then get no block for it, and it adds no evidence tokens.
                n_kept = self.count_tokens(self.budget.block(ev)) if ids else 0
                entry = KeptItem(
                    tree.item.id,
                    tree.item.modality.value,
                    ev.leaf_ranges(),
                    tree.n_leaves,
                    n_kept,
                    self.count_tokens(self.hierarchy.evidence_text(tree, [0])),
                    flag,
                )
                if ids:
                    evidence.append(ev)
                    evidence_tokens.append(n_kept)
                    evidence_trace.append(entry)
                trace.kept.append(entry)
            rec.rounds.append(trace)
            if self.controller is None or r == rounds - 1:
                break  # after round R the reader answers regardless: no critic call is wasted on it
            with timer("critic"):
                # the critic judges the evidence the reader would get: the same cap, the same cuts
                blocks = self.budget.cap(evidence, evidence_tokens).blocks
                decision = self.controller.step(question, blocks, r, history)
            trace.controller = {"stop": decision.stop, "followup": decision.followup, **decision.raw}
            history.append(trace.controller)
            if decision.stop or not decision.followup:
                break
            query = decision.followup
        # Token counts taken per round are reused (one tokenizer call per whole block).
        capped = self.budget.cap(evidence, evidence_tokens)
        for entry, got in zip(evidence_trace, capped.items, strict=True):
            entry.delivered_ranges = got.delivered_ranges()
            entry.delivered_tokens, entry.cap = got.tokens, got.cap
        rec.evidence_tokens, rec.truncated_items = capped.tokens, capped.not_whole
        with timer("reader"):
            rec.prediction = self.reader.answer(question, capped.blocks)
        rec.latency_s = time.perf_counter() - t0
        rec.time_s = dict(timer.seconds)
        return rec, capped


def _unseen(items: Sequence[Item], held: set[str]) -> list[Item]:
    """``items`` not held yet, each id once: an item retrieved twice in one round is one block, and the
    repeat counts as a duplicate (like an item held from an earlier round)."""
    seen = set(held)
    new = []
    for it in items:
        if it.id not in seen:
            seen.add(it.id)
            new.append(it)
    return new


class QuestionRunner:
    """Runs the loop for one question and attributes the LLM calls made meanwhile to it (thread-safe)."""

    def __init__(self, loop: EvidenceLoop, llm: Any) -> None:
        self.loop = loop
        self.llm = llm

    def __call__(self, question: Question) -> QuestionRecord:
        return self.run(question)

    def run(self, question: Question) -> QuestionRecord:
        log = getattr(self.llm, "log", None)
        if log is None:
            return self.loop.run(question)
        with log.scope(question.id):
            rec = self.loop.run(question)
        by_role = log.summary(scope=question.id)["by_role"]
        rec.llm_calls = {r: int(v["calls"]) for r, v in by_role.items()}
        rec.llm_tokens = {r: int(v["prompt_tokens"] + v["completion_tokens"]) for r, v in by_role.items()}
        rec.llm_prefill_tokens = {r: int(v["prompt_tokens"] - v["cached_tokens"]) for r, v in by_role.items()}
        return rec
