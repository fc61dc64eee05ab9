"""IRCoT's few-shot demonstrations, built from the benchmark's *training* split only.

The original IRCoT prompts its reader with worked chains of thought over gold paragraphs. Here
each demonstration is a training question whose gold leaves were located: its gold items are the
paragraphs, its gold leaves (HotpotQA supporting sentences, TAT-QA/OTT-QA rows) the reasoning
steps in order, and its first answer closes the chain. The split machinery is document-disjoint,
and ``load_demos`` checks that no demonstration shares a question or an item with the test split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from canopy_lit.hierarchy import Hierarchy
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
