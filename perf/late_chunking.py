"""Node-encoding cost per item: late chunking (one forward per item) vs per-node encoding (one per node).

    python perf/late_chunking.py [--quick] [--threads N]

Real bundled HotpotQA and NQ items (the candidates of validation questions), B = 2 trees, MiniLM at the
configs' ``max_seq_length`` (512) and ``max_batch_tokens`` (2048). "ours" = ``encode_spans`` (every node of
every tree from its item's forward, ``encoder.node_pooling=late``), "reference" = ``encode_nodes`` over every
node's own rendering (today's default, as the node cache calls it), each on the same items in the same
process, interleaved chunk by chunk so that both see the same machine load. Ratio = ours / reference in
seconds per item (below 1: late chunking is cheaper); also the tokens each path encodes per item.
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def _trees(per_benchmark: int):
    from canopy_lit.data import load_benchmark, split_questions
    from canopy_lit.hierarchy import Hierarchy

    h = Hierarchy(2)
    trees = {}
    for name in ("hotpotqa", "nq"):
        bench = load_benchmark(name)
        ids: list[str] = []
        for q in split_questions(bench, "val"):
            ids += [i for i in bench.candidates.get(q.id, []) if i not in ids]
            if len(ids) >= per_benchmark:
                break
        trees[name] = [h.build(bench.items[i]) for i in ids[:per_benchmark]]
    return h, trees


def run(quick: bool = False, chunk: int = 16) -> dict:
    """Time both paths on the same items; returns the perf/run.py entry (``ratio`` = late / per-node)."""
    from canopy_lit.encoders import load_encoder

    h, trees = _trees(48 if quick else 160)
    node = load_encoder("minilm", max_batch_tokens=2048)
    late = load_encoder("minilm", max_batch_tokens=2048, node_pooling="late")
    out: dict = {"unit": "s/item", "target": None, "direction": "max", "per_benchmark": {}}
    t_late_all = t_node_all = 0.0
    n_all = 0
    for name, ts in trees.items():
        inputs = [[h.node_input(t, i) for i in range(len(t))] for t in ts]
        spans = [h.node_spans(t) for t in ts]
        node.encode_nodes(inputs[0])  # warm-up: threads, allocator
        late.encode_spans(spans[:1])
        t_late = t_node = 0.0
        for a in range(0, len(ts), chunk):
            t = time.perf_counter()
            late.encode_spans(spans[a : a + chunk])
            t_late += time.perf_counter() - t
            t = time.perf_counter()
            node.encode_nodes([x for xs in inputs[a : a + chunk] for x in xs])
            t_node += time.perf_counter() - t
        tok_node = sum(sum(node.token_lengths(xs)) for xs in inputs) / len(ts)
        tok_late = sum(len(late.tokenizer(text)["input_ids"]) for text, _ in spans) / len(ts)
        out["per_benchmark"][name] = {
            "items": len(ts),
            "nodes_per_item": sum(len(t) for t in ts) / len(ts),
            "late_s_per_item": t_late / len(ts),
            "node_s_per_item": t_node / len(ts),
            "ratio": t_late / t_node,
            "tokens_per_item_late": tok_late,
            "tokens_per_item_node": tok_node,
        }
        t_late_all, t_node_all, n_all = t_late_all + t_late, t_node_all + t_node, n_all + len(ts)
    out.update(ours=t_late_all / n_all, reference=t_node_all / n_all, ratio=t_late_all / t_node_all)
    out["threads"] = torch.get_num_threads()
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="48 items per benchmark instead of 160")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(json.dumps(run(args.quick), indent=2))
