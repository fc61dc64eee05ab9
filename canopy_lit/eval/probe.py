"""Refinement probe (no LLM): how well a scorer's decisions match the gold, item by item (METHOD.md §1.3).

For every question, the gold items' trees are scored against the question and
refined; we measure

- ``probe/decision_accuracy``: share of nodes v in V_i whose every preference in P(v) holds, also by
  depth, modality and decision type (``.../stop``: v fully gold, keep it whole; ``.../descend``: v partly
  gold), with ``probe/n_nodes/<group>`` counts;
- ``probe/gold_recall``: share of gold leaves inside the retained nodes (with ``_ci95_low``/``_ci95_high``,
  a bootstrap over questions, as for ``probe/decision_accuracy``);
- ``probe/pruned_share``: share of gold items from which refinement drops at least one leaf (an item
  split into children that together cover every leaf counts as not pruned);
- ``probe/kept_token_ratio``: kept / whole-item tokens on gold items, and
  ``probe/distractor_kept_token_ratio`` the same on the question's non-gold candidates;
- ``probe/encoded_node_share``: nodes sent to the encoder / nodes in all trees (gold trees are
  scored in full, distractors only where the refinement reads).

Tokens here are whitespace tokens of the rendered evidence (no reader involved, so no reader cap:
gold recall and kept ratios are the refiner's own, before any cap), so ratios are comparable across
encoders. ``evidence/*`` (eval/evidence.py) measures the same quantities after the reader cap.

Every pooled ratio is also kept per question (``question_rows``: numerators and denominators), so two
scorers probed on the same questions can be compared with a paired bootstrap over questions
(``canopy_lit.metrics.paired_ratio_bootstrap_ci``): gold leaves cluster by question, so a binomial
error over leaves would understate the spread.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.metrics import ratio_bootstrap_ci
from canopy_lit.refine import parent_relative, parent_relative_lazily
from canopy_lit.scoring.scorers import NodeScorer
from canopy_lit.supervision import decision_correct, gold_counts, preference_pairs, visited_nodes
from canopy_lit.types import Item, Leaf, Modality, Question, Tree

# Per-question counts (``RefinementProbe.question_rows``, ``probe_questions.jsonl``): each pooled ratio is
# sum(numerator) / sum(denominator) over questions, e.g. gold recall = gold_leaves_kept / gold_leaves.
QUESTION_COUNTS = (
    "gold_leaves", "gold_leaves_kept", "kept_tokens", "whole_tokens", "distractor_kept_tokens",
    "distractor_whole_tokens", "decisions", "decisions_correct", "stops", "stops_correct",
)  # fmt: skip


def _words(text: str) -> int:
    return len(text.split())


def gold_questions(questions: Iterable[Question], items: Mapping[str, Item]) -> list[Question]:
    """The questions the probe can use: those with at least one located gold item in ``items``."""
    return [q for q in questions if any(g and iid in items for iid, g in q.gold.items())]


def drops_a_leaf(kept_leaves: int, n_leaves: int) -> bool:
    """Whether an item counts as pruned: refinement kept fewer of its leaves than it has (kept children
    that together cover every leaf remove nothing)."""
    return kept_leaves < n_leaves


def shape_of(depths: Sequence[int], branching: int, where: str) -> Tree:
    """The region tree whose breadth-first node depths are ``depths`` (the leaf count is not recorded):
    a ``Tree`` over placeholder leaves, so the layout is the one refinement walks."""
    n = (len(depths) + 1) // 2 if branching == 2 else 1  # a binary tree over n leaves has 2n - 1 nodes
    while True:
        tree = Tree(Item(id="probe", modality=Modality.TEXT, text=""), [Leaf(i) for i in range(n)], branching)
        if len(tree) >= len(depths):
            break
        n += 1
    if tree.depth.tolist() != list(depths):
        raise ValueError(f"{where}: its {len(depths)} node rows are not a tree of branching factor {branching}")
    return tree


def pruned_counts(
    node_rows: Iterable[Mapping[str, Any]], branching: int, descend_margin: float, where: str = "probe_nodes.jsonl"
) -> dict[str, int]:
    """Gold items and how many of them count as pruned, recounted from a probe run's per-node rows
    (``probe_nodes.jsonl``: one row per node of each gold item's tree, breadth-first, with its score minus
    the root's): ``{"items", "pruned", "not_root"}``. ``pruned`` is ``probe/pruned_share``'s count (a leaf
    dropped); ``not_root`` counts items whose kept set is anything but the root, the count before a split
    that keeps every leaf stopped counting as pruned.

    Refinement compares a child with its parent, and both scores here are shifted by the same root score,
    so the kept sets are recomputed from the rows alone (no encoder).
    """
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for n, row in enumerate(node_rows, 1):
        try:
            key = (str(row["question"]), str(row["item"]))
            groups.setdefault(key, []).append(row)
            float(row["root_relative"]), int(row["depth"])
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{where}: row {n} lacks a question, item, depth or root_relative ({err})") from err
    out = {"items": 0, "pruned": 0, "not_root": 0}
    for (qid, iid), rows in groups.items():
        shape = shape_of([int(r["depth"]) for r in rows], branching, f"{where}: question {qid}, item {iid}")
        kept = parent_relative(shape, [float(r["root_relative"]) for r in rows], descend_margin)
        out["items"] += 1
        out["pruned"] += drops_a_leaf(sum(int(shape.ends[v] - shape.starts[v]) for v in kept), shape.n_leaves)
        out["not_root"] += kept != [0]
    return out


class RefinementProbe:
    """Accumulates probe statistics question by question.

    Args:
        hierarchy: tree builders (B).
        scorer: node scorer (its encoder decides f0 vs fθ).
        count_tokens: token counter for kept-token ratios (default: whitespace tokens).
        descend_margin: δ of the refinement rule (``refine.descend_margin``); decisions are judged
            under the rule that is applied.
    """

    def __init__(
        self,
        hierarchy: Hierarchy,
        scorer: NodeScorer,
        count_tokens: Callable[[str], int] = _words,
        descend_margin: float = 0.0,
    ) -> None:
        self.hierarchy = hierarchy
        self.descend_margin = float(descend_margin)
        self.scorer = scorer
        self.count_tokens = count_tokens
        self.decisions: dict[int, list[bool]] = defaultdict(list)  # depth -> correct?
        self.decisions_by_modality: dict[str, list[bool]] = defaultdict(list)
        # "stop" (v fully gold: keep it whole) vs "descend" (v partly gold): training teaches mostly descend.
        self.decisions_by_kind: dict[str, list[bool]] = defaultdict(list)
        self.items = 0
        self.items_pruned = 0
        self.skipped_no_gold = 0  # questions without a located gold item (nothing to probe)
        self.node_rows: list[dict[str, Any]] = []  # per-node scores for plots
        self.question_rows: list[dict[str, Any]] = []  # per-question counts behind every pooled ratio
        self.nodes_encoded = 0  # nodes sent to the encoder (distractor trees are scored lazily)
        self.nodes_in_trees = 0

    def _kept_tokens(self, tree: Tree, kept: Sequence[int]) -> tuple[int, int]:
        return (
            self.count_tokens(self.hierarchy.evidence_text(tree, kept)),
            self.count_tokens(self.hierarchy.evidence_text(tree, [0])),
        )

    def add(self, question: Question, items: Mapping[str, Item], distractors: Iterable[str] = ()) -> None:
        """Probe one question: its located gold items, and optionally its non-gold candidate items."""
        q = self.scorer.embed_query(question.text)
        gold = {iid: g for iid, g in question.gold.items() if g and iid in items}
        if not gold:
            self.skipped_no_gold += 1
            return
        others = [i for i in dict.fromkeys(distractors) if i not in gold and i in items]
        trees = {i: self.hierarchy.build(items[i]) for i in [*gold, *others]}
        # Gold trees: every node (decisions, per-node score rows); one encoder call for all of them.
        all_scores = dict(zip(gold, self.scorer.score(q, [trees[i] for i in gold]), strict=True))
        # Distractors only need their refinement: encode just the nodes it reads.
        other_trees = [trees[i] for i in others]

        def score_others(requests: Sequence[Sequence[int]]) -> list[np.ndarray]:
            self.nodes_encoded += sum(len(r) for r in requests)
            return self.scorer.score(q, other_trees, requests)

        other_kept = parent_relative_lazily(other_trees, score_others, descend_margin=self.descend_margin)[0]
        self.nodes_encoded += sum(len(trees[i]) for i in gold)
        self.nodes_in_trees += sum(len(t) for t in trees.values())
        row = dict.fromkeys(QUESTION_COUNTS, 0)
        for iid, leaves in gold.items():
            tree, scores = trees[iid], all_scores[iid]
            counts = gold_counts(tree, leaves)
            for v in visited_nodes(tree, leaves):
                ok = decision_correct(tree, scores, preference_pairs(tree, v, counts), self.descend_margin)
                self.decisions[int(tree.depth[v])].append(ok)
                self.decisions_by_modality[tree.item.modality.value].append(ok)
                stop = bool(counts[v] == tree.ends[v] - tree.starts[v])
                self.decisions_by_kind["stop" if stop else "descend"].append(ok)
                row["decisions"] += 1
                row["decisions_correct"] += int(ok)
                row["stops"] += int(stop)
                row["stops_correct"] += int(stop and ok)
            kept = parent_relative(tree, scores, self.descend_margin)
            kept_leaves = {leaf for v in kept for leaf in tree.leaf_range(v)}
            self.items += 1
            self.items_pruned += drops_a_leaf(len(kept_leaves), tree.n_leaves)
            k, w = self._kept_tokens(tree, kept)
            row["gold_leaves"] += len(set(leaves))
            row["gold_leaves_kept"] += len(set(leaves) & kept_leaves)
            row["kept_tokens"] += int(k)
            row["whole_tokens"] += int(w)
            for v in range(len(tree)):
                self.node_rows.append(
                    {
                        "question": question.id,
                        "item": iid,
                        "depth": int(tree.depth[v]),
                        "gold": bool(counts[v] > 0),
                        "root_relative": float(scores[v] - scores[0]),
                    }
                )
        for tree, kept in zip(other_trees, other_kept, strict=True):
            k, w = self._kept_tokens(tree, kept)
            row["distractor_kept_tokens"] += int(k)
            row["distractor_whole_tokens"] += int(w)
        self.question_rows.append({"question": question.id, **row})

    @property
    def questions(self) -> int:
        """Questions probed (those with a located gold item)."""
        return len(self.question_rows)

    def totals(self) -> dict[str, int]:
        """Every per-question count summed over the probed questions: the pooled ratios' parts."""
        return {c: sum(r[c] for r in self.question_rows) for c in QUESTION_COUNTS}

    def metrics(self, prefix: str = "probe") -> dict[str, float]:
        t = self.totals()

        def ratio(num: str, den: str) -> float:
            return t[num] / t[den] if t[den] else float("nan")

        out = {
            f"{prefix}/n_questions": float(self.questions),
            f"{prefix}/skipped/no_located_gold": float(self.skipped_no_gold),
            f"{prefix}/n_items": float(self.items),
            f"{prefix}/n_nodes": float(t["decisions"]),
            f"{prefix}/decision_accuracy": ratio("decisions_correct", "decisions"),
            f"{prefix}/gold_recall": ratio("gold_leaves_kept", "gold_leaves"),
            f"{prefix}/pruned_share": self.items_pruned / self.items if self.items else float("nan"),
            f"{prefix}/kept_token_ratio": ratio("kept_tokens", "whole_tokens"),
        }
        # 95% intervals over questions (a question's gold leaves and decisions rise and fall together)
        for name, (num, den) in (("gold_recall", ("gold_leaves_kept", "gold_leaves")),
                                 ("decision_accuracy", ("decisions_correct", "decisions"))):  # fmt: skip
            lo, hi = ratio_bootstrap_ci([r[num] for r in self.question_rows], [r[den] for r in self.question_rows])
            out[f"{prefix}/{name}_ci95_low"], out[f"{prefix}/{name}_ci95_high"] = lo, hi
        if self.nodes_in_trees:
            out[f"{prefix}/encoded_node_share"] = self.nodes_encoded / self.nodes_in_trees
        if t["distractor_whole_tokens"]:
            out[f"{prefix}/distractor_kept_token_ratio"] = ratio("distractor_kept_tokens", "distractor_whole_tokens")
        for depth, ds in sorted(self.decisions.items()):
            out[f"{prefix}/decision_accuracy/depth_{depth}"] = float(np.mean(ds))
            out[f"{prefix}/n_nodes/depth_{depth}"] = float(len(ds))
        for mod, ds in sorted(self.decisions_by_modality.items()):
            out[f"{prefix}/decision_accuracy/{mod}"] = float(np.mean(ds))
        for kind, ds in sorted(self.decisions_by_kind.items()):
            out[f"{prefix}/decision_accuracy/{kind}"] = float(np.mean(ds))
            out[f"{prefix}/n_nodes/{kind}"] = float(len(ds))
        return out
