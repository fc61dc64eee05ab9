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
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.hierarchy.base import ELISION
from canopy_lit.pipeline.scoring import NodeScorer
from canopy_lit.pipeline.trace import KeptItem, QuestionRecord, RoundTrace, StageTimer
from canopy_lit.refine import LazyRefiner, Refiner
from canopy_lit.retrieval.base import Retriever
from canopy_lit.types import Evidence, Item, Modality, Question, Tree

TokenCounter = Callable[[str], int]


@dataclass
class Decision:
    """A controller's verdict after a round: stop, or go on with ``followup`` as the next query."""

    stop: bool
    followup: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass
class ReaderBlock:
    """What the reader cap left of one held item.

    Attributes:
        evidence: the held item and the regions its refiner kept.
        node_ids: the kept regions the reader gets whole.
        text: the block as the reader gets it ("" when dropped).
        tokens: its reader tokens.
        cap: ``whole``, ``regions`` (cut at a region boundary), ``tokens`` (cut inside ``cut_leaf``)
            or ``dropped`` (``trace.CAP_OUTCOMES``).
        cut_leaf: the leaf cut at a token boundary; ``cut_chars``: characters of
            ``evidence_text(tree, [cut_leaf])`` before the cut.
    """

    evidence: Evidence
    node_ids: list[int]
    text: str
    tokens: int
    cap: str
    cut_leaf: int | None = None
    cut_chars: int = 0

    def delivered_ranges(self) -> list[tuple[int, int]]:
        tree = self.evidence.tree
        return [(int(tree.starts[v]), int(tree.ends[v])) for v in self.node_ids]


@dataclass
class CappedEvidence:
    """The reader's evidence under the cap: one ``ReaderBlock`` per held item, oldest first."""

    items: list[ReaderBlock]

    @property
    def blocks(self) -> list[str]:
        """The blocks the reader is handed, oldest first."""
        return [b.text for b in self.items if b.text]

    @property
    def tokens(self) -> int:
        return sum(b.tokens for b in self.items)

    @property
    def not_whole(self) -> int:
        """Held items the reader does not get whole (cut or dropped)."""
        return sum(b.cap != "whole" for b in self.items)


class Controller(Protocol):
    """Decides after each round whether the evidence suffices (critic) or what to fetch next (IRCoT).

    ``evidence`` holds one rendered block per held item, oldest first (stable prompt prefix)."""

    def step(
        self, question: Question, evidence: list[str], round: int, history: list[dict[str, Any]]
    ) -> Decision: ...


class Reader(Protocol):
    def answer(self, question: Question, evidence: list[str]) -> str: ...


class AggregationCheck(Protocol):
    def is_aggregation(self, question: Question) -> bool: ...


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

    # -- evidence text -------------------------------------------------------------------------
    def _block(self, ev: Evidence) -> str:
        if ev.text is not None:  # a text-compressing refiner's block
            return ev.text
        return self.hierarchy.evidence_text(ev.tree, ev.node_ids)

    def head(self, ev: Evidence) -> str:
        """The title / caption / header ``ev``'s block starts with, as rendered before any region ("" when
        a compressed block does not start with it)."""
        head = self.hierarchy.evidence_text(ev.tree, []).removesuffix(ELISION)
        return head if ev.text is None or ev.text.startswith(head) else ""

    def _compress(
        self, query: str, trees: list[Tree], kept: list[list[int]], timer: StageTimer
    ) -> list[str | None]:
        """The block of each item after a text-compressing refiner (``compresses_text``; None = dropped
        whole); all None for a refiner that keeps regions as they are."""
        if not getattr(self.refiner, "compresses_text", False):
            return [None] * len(trees)
        with timer("refine"):
            return list(self.refiner.compress(query, trees, kept, self.hierarchy))  # type: ignore[attr-defined]

    def _refine(self, query: str, trees: list[Tree], flags: list[bool], timer: StageTimer) -> list[list[int]]:
        """Kept node ids per tree; encoder time goes to the ``encode`` stage, the rest to ``refine``."""
        if not self.refiner.needs_scores:
            with timer("refine"):
                return self.refiner(trees, None, flags)
        assert self.scorer is not None
        with timer("encode"):
            q = self.scorer.embed_query(query)
        if self.refiner.lazy:
            refiner: LazyRefiner = self.refiner  # type: ignore[assignment]  # ``lazy`` promises refine_lazily

            def score_nodes(requests: Sequence[Sequence[int]]) -> list[np.ndarray]:
                with timer("encode"):
                    return self.scorer.score(q, trees, requests)

            t0 = timer.seconds["encode"]
            start = time.perf_counter()
            kept = refiner.refine_lazily(trees, score_nodes, flags)
            timer.seconds["refine"] += time.perf_counter() - start - (timer.seconds["encode"] - t0)
            return kept
        with timer("encode"):
            scores = self.scorer.score(q, trees)
        with timer("refine"):
            return self.refiner(trees, scores, flags)

    def evidence_blocks(self, evidence: Sequence[Evidence]) -> list[str]:
        return [self._block(ev) for ev in evidence]

    def capped_evidence(
        self, evidence: Sequence[Evidence], tokens: Sequence[int] | None = None
    ) -> tuple[list[str], int, int]:
        """Reader evidence within the token cap (``cap_evidence``): (blocks oldest first, as the reader
        gets them; their reader tokens; number of held items the reader does not get whole)."""
        capped = self.cap_evidence(evidence, tokens)
        return capped.blocks, capped.tokens, capped.not_whole

    def cap_evidence(
        self, evidence: Sequence[Evidence], tokens: Sequence[int] | None = None
    ) -> CappedEvidence:
        """What the reader gets of each held item under the token cap (METHOD.md §1.1 step 8).

        Items are taken newest round first and, within a round, in rank order (the retriever's order):
        they are kept whole while they fit; the first one that does not is cut to the tokens left
        (``truncate_block``), and every item after it is dropped: an older round never survives a
        newer one, a lower rank never survives a higher one of its round.

        Args:
            evidence: the held items, oldest round first, each round in rank order.
            tokens: reader tokens of each whole block (None = count them here).
        """
        cap = self.settings.reader_max_tokens
        blocks = [self._block(ev) for ev in evidence]
        if tokens is None:  # the loop passes the counts it already took per round
            tokens = [self.count_tokens(b) for b in blocks]
        out: list[ReaderBlock | None] = [None] * len(evidence)
        total = 0
        full = False
        for i in sorted(range(len(evidence)), key=lambda j: (-evidence[j].round, j)):
            ev = evidence[i]
            if full:
                out[i] = ReaderBlock(ev, [], "", 0, "dropped")
            elif total + tokens[i] <= cap:
                # a compressed block delivers no region whole: its node ids stay with the evidence only
                out[i] = ReaderBlock(ev, [] if ev.text is not None else list(ev.node_ids), blocks[i], tokens[i], "whole")
                total += tokens[i]
            else:
                cut = (self._cut_text(ev, ev.text, len(self.head(ev)), cap - total) if ev.text is not None
                       else self.truncate_block(ev, cap - total)) or ReaderBlock(ev, [], "", 0, "dropped")  # fmt: skip
                out[i] = cut
                total += cut.tokens
                full = True
        return CappedEvidence([b for b in out if b is not None])

    def truncate_block(self, ev: Evidence, budget: int) -> ReaderBlock | None:
        """The longest leading part of ``ev``'s regions whose rendering fits ``budget`` tokens.

        Regions are taken in leaf order; a region that does not fit is replaced by its children
        (finer regions of the same tree), so the cut falls on a region boundary and the dropped rest
        is marked with the renderer's elision. When not even the first leaf fits (one huge sentence
        or row), that leaf is cut at a token boundary instead (``_cut_at_tokens``). None when not
        even the item's title or header fits with a word of content.
        """
        if budget <= 0:
            return None
        tree = ev.tree
        queue = deque(sorted(ev.node_ids, key=lambda v: int(tree.starts[v])))
        chosen: list[int] = []
        best: ReaderBlock | None = None
        while queue:
            v = queue.popleft()
            text = self.hierarchy.evidence_text(tree, [*chosen, v])
            n = self.count_tokens(text)
            if n <= budget:
                chosen.append(v)
                best = ReaderBlock(ev, list(chosen), text, n, "regions")
            elif tree.children[v]:
                queue.extendleft(reversed(tree.children[v]))
            elif not chosen:
                return self._cut_at_tokens(ev, v, budget)
            else:
                break  # a leaf that does not fit: stop, so the kept part stays a contiguous prefix
        return best

    def _cut_at_tokens(self, ev: Evidence, leaf: int, budget: int) -> ReaderBlock | None:
        """``ev`` rendered with its first kept ``leaf`` only, cut to the longest prefix that fits
        ``budget`` tokens with an elision mark; cut at a word boundary where the prefix has one."""
        text = self.hierarchy.evidence_text(ev.tree, [leaf])
        # The title / header the renderer puts before any region: a cut inside it delivers nothing.
        head = len(self.hierarchy.evidence_text(ev.tree, []).removesuffix(ELISION))
        return self._cut_text(ev, text, head, budget, leaf)

    def _cut_text(self, ev: Evidence, text: str, head: int, budget: int, leaf: int | None = None) -> ReaderBlock | None:
        """The longest prefix of ``text`` (beyond its first ``head`` characters) that fits ``budget``
        tokens with an elision mark; ``leaf``: the leaf ``text`` renders (None: a compressed block)."""
        if head >= len(text):
            return None  # a renderer that ignores regions (an image): nothing to cut

        def render(n: int) -> str:
            return f"{text[:n].rstrip()} {ELISION}"

        def fits(n: int) -> bool:
            return self.count_tokens(render(n)) <= budget

        # Exponential then binary search for the longest fitting prefix: no tokenizer call ever reads
        # much more than the budget's worth of a huge leaf.
        lo, step = head, max(64, 8 * budget)
        hi = min(len(text), head + step)
        while hi < len(text) and fits(hi):
            lo, step = hi, 2 * step
            hi = min(len(text), head + step)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        if lo < len(text) and not text[lo].isspace():  # lo splits a word: end at the word before
            space = max(text.rfind(" ", head, lo), text.rfind("\n", head, lo))
            lo = space if space > head and fits(space) else lo
        if not text[head:lo].strip() or not fits(lo):
            return None
        block = render(lo)
        return ReaderBlock(ev, [], block, self.count_tokens(block), "tokens", cut_leaf=leaf, cut_chars=lo)

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
            kept = self._refine(query, trees, flags, timer) if trees else []
            texts = self._compress(query, trees, kept, timer) if trees else []
            for tree, ids, flag, text in zip(trees, kept, flags, texts, strict=True):
                compressed = getattr(self.refiner, "compresses_text", False)
                ev = Evidence(tree, [] if compressed and text is None else ids, r, text)
                ids = ev.node_ids
                held.add(tree.item.id)  # retrieved and judged, even when no region of it was kept
                # A refiner may keep nothing of an item (flat top-m chose none of its leaves): the
                # reader and the critic then get no block for it, and it adds no evidence tokens.
                n_kept = self.count_tokens(self._block(ev)) if ids else 0
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
                blocks = self.capped_evidence(evidence, evidence_tokens)[0]
                decision = self.controller.step(question, blocks, r, history)
            trace.controller = {"stop": decision.stop, "followup": decision.followup, **decision.raw}
            history.append(trace.controller)
            if decision.stop or not decision.followup:
                break
            query = decision.followup
        # Token counts taken per round are reused (one tokenizer call per whole block).
        capped = self.cap_evidence(evidence, evidence_tokens)
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
