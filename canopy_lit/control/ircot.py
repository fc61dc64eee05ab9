"""``controller=ircot``: IRCoT's reasoning steps as the loop's controller, and its few-shot demonstrations,
built from the benchmark's *training* split only.

The original IRCoT prompts its reader with worked chains of thought over gold paragraphs. Here
each demonstration is a training question whose gold leaves were located: its gold items are the
paragraphs, its gold leaves (HotpotQA supporting sentences, TAT-QA/OTT-QA rows) the reasoning
steps in order, and its first answer closes the chain. The split machinery is document-disjoint,
and ``load_demos`` checks that no demonstration shares a question or an item with the test split.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from canopy_lit.control.base import Decision
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.llm import prompts
from canopy_lit.llm.base import LLM
from canopy_lit.llm.context import fit_evidence
from canopy_lit.llm.parsing import PARSE_STATS, ParseStats, parse_ircot_step
from canopy_lit.llm.prompts import IRCoTDemo
from canopy_lit.refine import leaf_ids
from canopy_lit.types import Item, Question


def demo_from(question: Question, items: Mapping[str, Item], hierarchy: Hierarchy) -> IRCoTDemo | None:
    """The worked example of one question, or None when a gold item is missing or not located."""
    if not question.gold or not question.answers or not all(g and i in items for i, g in question.gold.items()):
        return None
    paragraphs, steps = [], []
    for iid, gold in question.gold.items():
        tree = hierarchy.build(items[iid])
        paragraphs.append(hierarchy.evidence_text(tree, [0]))
        ids = leaf_ids(tree)
        for leaf in sorted(set(gold)):
            text = tree.leaves[leaf].text or hierarchy.node_text(tree, int(ids[leaf]))
            steps.append(" ".join(text.split()))
    return IRCoTDemo(question.text, tuple(paragraphs), tuple(steps), str(question.answers[0]))


def select_demos(
    questions: Sequence[Question], items: Mapping[str, Item], hierarchy: Hierarchy, n: int, max_words: int
) -> list[tuple[Question, IRCoTDemo]]:
    """The first ``n`` questions (file order) with located gold whose paragraphs fit ``max_words`` words,
    no two sharing a gold item (TAT-QA asks several questions of one table: one example per table)."""
    out: list[tuple[Question, IRCoTDemo]] = []
    seen: set[str] = set()
    for q in questions:
        if len(out) >= n:
            break
        if seen & set(q.gold):
            continue
        d = demo_from(q, items, hierarchy)
        if d is not None and sum(len(p.split()) for p in d.paragraphs) <= max_words:
            out.append((q, d))
            seen |= set(q.gold)
    return out


def load_demos(data: Mapping[str, Any], n: int, hierarchy: Hierarchy, max_words: int = 250,
               split: str = "train") -> list[IRCoTDemo]:  # fmt: skip
    """``n`` demonstrations from ``split`` of the benchmark that ``data`` (a resolved ``cfg.data``) reads.

    Args:
        data: the run's data config (name, path, seed, options); its own ``split`` is ignored.
        n: number of demonstrations (0 = zero-shot).
        hierarchy: renders paragraphs and steps as the reader sees evidence.
        max_words: per-demonstration cap on paragraph words, so that the prompt fits the LLM context.
        split: ``train`` (or ``val``); never ``test``.

    Raises:
        ValueError: ``split`` is test, or a demonstration shares a question or item with the test split.
    """
    from canopy_lit.data import load_split
    from canopy_lit.data.splits import split_questions

    if n <= 0:
        return []
    if split not in ("train", "val"):
        raise ValueError(f"controller.demo_split must be train or val (never the evaluated test split), got {split!r}")
    kwargs = {k: v for k, v in dict(data).items() if k in ("name", "path", "seed", "options", "reader")}
    bench, pool = load_split(**kwargs, split=split)
    chosen = select_demos(pool, bench.items, hierarchy, n, max_words)
    test = split_questions(bench, "test", int(kwargs.get("seed", 0)))
    test_ids = {q.id for q in test}
    test_items = {i for q in test for i in [*q.gold, *bench.candidates.get(q.id, ())]}
    for q, _ in chosen:  # the splits are document-disjoint; this guards a changed reader or split rule
        if q.id in test_ids or set(q.gold) & test_items:
            raise ValueError(f"IRCoT demonstration {q.id!r} ({data.get('name')}) overlaps the test split")
    demos = [d for _, d in chosen]
    if len(demos) < n:
        raise ValueError(
            f"only {len(demos)} of controller.demos={n} {split} questions of {data.get('name')} have located gold "
            f"paragraphs within controller.demo_max_words={max_words}; lower controller.demos or raise the cap"
        )
    return demos


@dataclass
class IRCoTStep:
    """One reasoning step: its first sentence (the next retrieval query) and the answer once it states one."""

    sentence: str
    answer: str | None = None


class IRCoTController:
    """IRCoT: each step writes the next reasoning sentence (also the next retrieval query); the loop stops once
    the reasoning states the answer.

    As in the original IRCoT, only the first generated sentence is kept: a model that writes a whole
    chain at once ("Fact. Fact. So the answer is: X") takes one step (its first fact) and retrieves
    again; it stops only when its first sentence states the answer.

    Args:
        llm: any backend.
        demos: worked examples from training questions (``load_demos``).
        max_tokens: generation budget per step.
    """

    def __init__(self, llm: LLM, *, demos: Sequence[prompts.IRCoTDemo] = (), max_tokens: int = 64,
                 stats: ParseStats | None = None) -> None:  # fmt: skip
        self.llm, self.demos, self.max_tokens = llm, tuple(demos), max_tokens
        self.stats = stats or PARSE_STATS

    def step(self, question: Question, evidence: list[str], round: int, history: list[dict[str, Any]]) -> Decision:
        """The loop's verdict for this round (``Controller``): the next sentence, and stop once it answers."""
        thoughts = [h["thought"] for h in history if h.get("thought")]
        s = self.next_step(question.text, evidence, thoughts)
        return Decision(stop=s.answer is not None, followup=s.sentence or question.text,
                        raw={"thought": s.sentence, "answer": s.answer})  # fmt: skip

    def next_step(self, question: str, paragraphs: Sequence[str], thoughts: Sequence[str]) -> IRCoTStep:
        """One reasoning step over ``paragraphs`` after ``thoughts``."""
        msgs = fit_evidence(
            self.llm, lambda ev: prompts.ircot_step(question, ev, thoughts, self.demos), paragraphs,
            self.max_tokens, "ircot",
        )  # fmt: skip
        resp = self.llm.chat(
            msgs,
            max_tokens=self.max_tokens,
            role="ircot",
            stop=["\n\n"],
        )
        text = " ".join((resp.text or "").split())
        first = _FIRST_SENTENCE.split(text, maxsplit=1)[0]
        if _ANSWER_MARK.search(first):
            sentence, answer = parse_ircot_step(text, self.stats)  # the answer span may hold a '.' (1.5 m)
        else:
            sentence, answer = parse_ircot_step(first, self.stats)
        return IRCoTStep(sentence=sentence, answer=answer)


_FIRST_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_ANSWER_MARK = re.compile(r"so\s+the\s+answer\s+is", re.I)


def ircot_controller(
    llm: Any,
    hierarchy: Hierarchy,
    data: Mapping[str, Any] | DictConfig,
    demos: int = 0,
    demo_split: str = "train",
    demo_max_words: int = 250,
) -> IRCoTController:
    """``controller=ircot``: few-shot chains from ``demos`` questions of the benchmark's ``demo_split``
    (never test), their paragraphs cut to ``demo_max_words``; 0 = zero-shot."""
    data = OmegaConf.to_container(data, resolve=True) if isinstance(data, DictConfig) else dict(data)
    chains = load_demos(data, int(demos), hierarchy, int(demo_max_words), str(demo_split))
    return IRCoTController(llm, demos=chains)
