"""``probe/pruned_share`` counts a gold item as pruned only when refinement drops one of its leaves."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from canopy_lit.data import load_benchmark
from canopy_lit.eval.probe import RefinementProbe, pruned_counts
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.refine import parent_relative
from canopy_lit.report.archive import read_archive, write_archive
from canopy_lit.types import Tree


class ChildFirstScorer:
    """s(q, v) = depth(v): every child beats its parent, so δ = 0 splits every item down to its leaves and
    keeps all of them (an item split into parts, nothing removed)."""

    def embed_query(self, text: str) -> np.ndarray:
        return np.zeros(1, np.float32)

    def score(self, query, trees: Sequence[Tree], nodes: Sequence[Sequence[int]] | None = None) -> list[np.ndarray]:
        out = []
        for j, tree in enumerate(trees):
            s = tree.depth.astype(np.float32)
            out.append(s if nodes is None else s[list(nodes[j])])
        return out


class ItemSeededScorer(ChildFirstScorer):
    """Scores drawn from a generator seeded by the item id: some items lose leaves, some are split and kept whole."""

    def score(self, query, trees: Sequence[Tree], nodes: Sequence[Sequence[int]] | None = None) -> list[np.ndarray]:
        out = []
        for j, tree in enumerate(trees):
            s = np.random.default_rng(zlib.crc32(tree.item.id.encode())).random(len(tree)).astype(np.float32)
            out.append(s if nodes is None else s[list(nodes[j])])
        return out


def probe_of(scorer: ChildFirstScorer, delta: float, n: int = 40) -> tuple[RefinementProbe, list]:
    bench = load_benchmark("hotpotqa")
    probe = RefinementProbe(Hierarchy(2), scorer, descend_margin=delta)
    questions = list(bench.questions)[:n]
    for q in questions:
        probe.add(q, bench.items)
    return probe, [(q, bench) for q in questions]


def test_an_item_split_into_parts_that_keep_every_leaf_is_not_pruned() -> None:
    probe, _ = probe_of(ChildFirstScorer(), 0.0)
    m = probe.metrics()
    assert m["probe/n_items"] > 0 and m["probe/gold_recall"] == 1.0 and m["probe/kept_token_ratio"] == 1.0
    assert m["probe/pruned_share"] == 0.0  # the old count (kept != [root]) gave every multi-leaf item


def test_pruned_share_is_the_share_of_gold_items_that_lose_a_leaf() -> None:
    hierarchy, scorer, delta = Hierarchy(2), ItemSeededScorer(), 0.05
    probe, pairs = probe_of(scorer, delta)
    lost = split_whole = items = 0
    for q, bench in pairs:
        for iid, g in q.gold.items():
            if not g or iid not in bench.items:
                continue
            tree = hierarchy.build(bench.items[iid])
            kept = parent_relative(tree, scorer.score(None, [tree])[0], delta)
            covered = sum(int(tree.ends[v] - tree.starts[v]) for v in kept)  # kept nodes are disjoint
            items += 1
            lost += covered < tree.n_leaves
            split_whole += covered == tree.n_leaves and kept != [0]
    assert split_whole > 0 and lost > 0  # both kinds occur, so the two counts differ
    m = probe.metrics()
    assert m["probe/n_items"] == items
    assert m["probe/pruned_share"] == lost / items


ROOT = Path(__file__).resolve().parents[2]
RECOUNT = "canopy_lit.studies.recount_pruned_share"  # python -m, from the checkout


def test_recount_from_node_rows_gives_both_rules_of_the_probe() -> None:
    """The rows the probe writes give, under the old rule (kept != [root]), the count it used to record and,
    under the current rule, the pruned share it records now (seeded scores: both kinds of item occur)."""
    delta = 0.05
    probe, pairs = probe_of(ItemSeededScorer(), delta)
    hierarchy, scorer, not_root = Hierarchy(2), ItemSeededScorer(), 0
    for q, bench in pairs:
        for iid, g in q.gold.items():
            if g and iid in bench.items:
                tree = hierarchy.build(bench.items[iid])
                not_root += parent_relative(tree, scorer.score(None, [tree])[0], delta) != [0]
    counts = pruned_counts(probe.node_rows, 2, delta)
    assert counts["items"] == probe.metrics()["probe/n_items"]
    assert counts["pruned"] / counts["items"] == probe.metrics()["probe/pruned_share"]
    assert counts["not_root"] == not_root and counts["not_root"] > counts["pruned"]


def test_recount_of_a_hand_made_tree() -> None:
    """Four leaves, B = 2: children beat the root and every grandchild beats its parent, so all four leaves are
    kept (old rule: pruned; new: not); a second item keeps one child only (pruned under both)."""
    depths = [0, 1, 1, 2, 2, 2, 2]
    whole = [0.0, 0.1, 0.1, 0.2, 0.2, 0.2, 0.2]
    half = [0.0, 0.1, -0.1, 0.0, 0.0, 0.0, 0.0]
    rows = [{"question": "q", "item": item, "depth": d, "root_relative": s}
            for item, scores in (("a", whole), ("b", half)) for d, s in zip(depths, scores, strict=True)]  # fmt: skip
    assert pruned_counts(rows, 2, 0.0) == {"items": 2, "pruned": 1, "not_root": 2}
    with pytest.raises(ValueError, match="item a: its 6 node rows are not a tree"):
        pruned_counts(rows[:6], 2, 0.0)


def _probe_run(tmp_path: Path, name: str = "hotpotqa/f0") -> Path:
    """A copy of the committed probe archive holding only one run (the script unpacks and repacks it)."""
    entries = {k: v for k, v in read_archive(ROOT / "experiments" / "runs" / "probe.zip").items()
               if k.startswith(name + "/")}  # fmt: skip
    return write_archive(tmp_path / "probe.zip", entries)


def test_committed_run_recounts_to_its_recorded_value(tmp_path: Path) -> None:
    """The committed HotpotQA f0 probe run: its rows give its recorded (new-rule) pruned share; with the
    old-rule value put back, the script rewrites it to the new one and changes no other metric or file."""
    archive = _probe_run(tmp_path)
    entries = read_archive(archive)
    metrics = json.loads(entries["hotpotqa/f0/metrics.json"])
    rows = [json.loads(line) for line in entries["hotpotqa/f0/probe_nodes.jsonl"].decode().splitlines()]
    counts = pruned_counts(rows, 2, 0.0)
    assert counts["pruned"] / counts["items"] == metrics["probe/pruned_share"] == 0.61
    assert counts["not_root"] / counts["items"] == 0.69  # what the run recorded under the old rule

    old = {**metrics, "probe/pruned_share": 0.69}
    entries["hotpotqa/f0/metrics.json"] = (json.dumps(old, indent=2, sort_keys=True) + "\n").encode()
    write_archive(archive, entries)
    done = subprocess.run([sys.executable, "-m", RECOUNT, str(archive)], capture_output=True, text=True, check=True,
                          cwd=ROOT)
    assert "hotpotqa/f0: 69.0 -> 61.0" in done.stdout
    after = read_archive(archive)
    assert json.loads(after["hotpotqa/f0/metrics.json"]) == metrics
    assert {k: v for k, v in after.items() if not k.endswith("metrics.json")} == {
        k: v for k, v in entries.items() if not k.endswith("metrics.json")
    }


def test_a_value_the_rows_do_not_reproduce_is_refused(tmp_path: Path) -> None:
    archive = _probe_run(tmp_path)
    entries = read_archive(archive)
    metrics = {**json.loads(entries["hotpotqa/f0/metrics.json"]), "probe/pruned_share": 0.7}
    entries["hotpotqa/f0/metrics.json"] = (json.dumps(metrics, indent=2, sort_keys=True) + "\n").encode()
    write_archive(archive, entries)
    before = archive.read_bytes()
    done = subprocess.run([sys.executable, "-m", RECOUNT, str(archive)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 1 and "hotpotqa/f0: recorded probe/pruned_share = 0.7" in done.stderr
    assert archive.read_bytes() == before
