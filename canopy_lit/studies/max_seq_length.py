"""Truncation at a given encoder ``max_seq_length``: gold roots cut off, parent/child pairs made identical.

    python -m canopy_lit.studies.max_seq_length --data ottqa tatqa --lengths 256 512 [--split test] [--limit N]

For every located gold item of the split's questions (each item once), every node text is tokenised
with MiniLM's own tokenizer (special tokens included, as the encoder sees it). A node is truncated
when it has more tokens than ``max_seq_length``; a parent/child pair is a forced tie when both
inputs are identical after truncation (the encoder then gives both the same embedding, so the
parent-relative comparison s(child) >= s(parent) always refines, whatever the question).
"""

from __future__ import annotations

import argparse
import json

from canopy_lit.data import load_split
from canopy_lit.encoders.text import resolve_text_backbone
from canopy_lit.hierarchy import Hierarchy

DATA = {name: f"configs/data/{name}.yaml" for name in ("hotpotqa", "nq", "ottqa", "tatqa")}


def data_kwargs(name: str, split: str) -> dict:
    """``configs/data/<name>.yaml`` resolved with ``paths.data_dir`` = data/."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"paths": {"data_dir": "data"}, "data": OmegaConf.load(DATA[name])})
    out = OmegaConf.to_container(cfg.data, resolve=True)
    out["split"] = split
    return out


def truncation_stats(name: str, split: str, lengths: list[int], limit: int | None, branching: int = 2) -> dict:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(resolve_text_backbone("minilm")))
    bench, questions = load_split(**data_kwargs(name, split))
    if limit:
        questions = questions[:limit]
    h = Hierarchy(branching)
    items = sorted({iid for q in questions for iid, g in q.gold.items() if g and iid in bench.items})
    out: dict = {"benchmark": name, "split": split, "questions": len(questions), "gold_items": len(items)}
    ids_per_tree = []
    for iid in items:
        tree = h.build(bench.items[iid])
        texts = [h.node_text(tree, v) for v in range(len(tree))]
        ids_per_tree.append((tree, tok(texts, truncation=False)["input_ids"]))
    out["gold_tables"] = sum(t.item.modality.value == "table" for t, _ in ids_per_tree)
    out["nodes"] = sum(len(t) for t, _ in ids_per_tree)
    out["pairs"] = sum(len(t.children[v]) for t, _ in ids_per_tree for v in range(len(t)))
    for L in lengths:
        roots = sum(len(ids[0]) > L for _, ids in ids_per_tree)
        table_roots = sum(len(ids[0]) > L for t, ids in ids_per_tree if t.item.modality.value == "table")
        nodes = sum(len(x) > L for _, ids in ids_per_tree for x in ids)
        ties = sum(
            ids[v][:L] == ids[c][:L] for t, ids in ids_per_tree for v in range(len(t)) for c in t.children[v]
        )
        items_with_tie = sum(
            any(ids[v][:L] == ids[c][:L] for v in range(len(t)) for c in t.children[v]) for t, ids in ids_per_tree
        )
        tokens = sum(min(len(x), L) for _, ids in ids_per_tree for x in ids)
        out[str(L)] = {
            "encoded_tokens": tokens,
            "truncated_roots": roots,
            "truncated_table_roots": table_roots,
            "truncated_nodes": nodes,
            "identical_parent_child_pairs": ties,
            "items_with_identical_pair": items_with_tie,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=["ottqa", "tatqa"], choices=sorted(DATA))
    ap.add_argument("--lengths", nargs="+", type=int, default=[256, 512])
    ap.add_argument("--split", default="test")
    ap.add_argument("--limit", type=int, default=None, help="first N questions of the split (as evaluate.py limit=N)")
    args = ap.parse_args()
    for name in args.data:
        print(json.dumps(truncation_stats(name, args.split, args.lengths, args.limit)))


if __name__ == "__main__":
    main()
