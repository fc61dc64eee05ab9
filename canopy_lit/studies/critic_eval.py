"""Critic sanity check on real HotpotQA: gold paragraphs vs distractor paragraphs.

For each question the critic sees either the 2 gold (supporting) paragraphs or 2 distractor
paragraphs of the same question. It should say "sufficient" for gold and "insufficient" for
distractors. Both critic modes run on the same prompts:

- ``json``: the JSON verdict ``{sufficient, missing, followup_query}`` (schema-constrained);
- ``logprob``: P(yes) from the first token's top log-probabilities, thresholded.

The log-prob threshold is fit on questions of the *train* file (maximum balanced accuracy) and
then applied unchanged to the *dev* questions.

Usage::

    python -m canopy_lit.studies.critic_eval --model qwen2.5-1.5b --n-train 30 --n-dev 40 \\
        --out outputs/critic_eval/qwen2.5-1.5b.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from canopy_lit.control import LLMCritic
from canopy_lit.data import load_benchmark
from canopy_lit.llm import ParseStats, load_llm
from canopy_lit.studies import PROJECT_ROOT as ROOT


def conditions(bench: Any, n: int) -> list[dict[str, Any]]:
    """First ``n`` questions with 2 gold paragraphs and >= 2 distractors: their evidence per condition."""
    out = []
    for q in bench.questions:
        gold = [i for i in bench.candidates[q.id] if i in q.gold]
        distract = [i for i in bench.candidates[q.id] if i not in q.gold]
        if len(gold) != 2 or len(distract) < 2:
            continue

        def text(item_id: str) -> str:
            it = bench.items[item_id]
            return f"{it.title}: {it.text}"

        out.append({"id": q.id, "question": q.text, "gold": [text(i) for i in gold],
                    "distractors": [text(i) for i in distract[:2]]})  # fmt: skip
        if len(out) == n:
            break
    return out


def fit_threshold(p_gold: list[float], p_dist: list[float]) -> tuple[float, float]:
    """Threshold maximising balanced accuracy (sufficient iff p >= t); midpoints between scores."""
    vals = sorted(set(p_gold) | set(p_dist))
    cands = [vals[0] - 1e-9] + [(a + b) / 2 for a, b in zip(vals, vals[1:])] + [vals[-1] + 1e-9]
    best = (0.5, -1.0)
    for t in cands:
        tpr = sum(p >= t for p in p_gold) / len(p_gold)
        tnr = sum(p < t for p in p_dist) / len(p_dist)
        if (tpr + tnr) / 2 > best[1]:
            best = (t, (tpr + tnr) / 2)
    return best


def auroc(pos: list[float], neg: list[float]) -> float:
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def confusion(pred_gold: list[bool], pred_dist: list[bool]) -> dict[str, int]:
    """Counts with 'positive' = critic says sufficient; gold evidence is the positive class."""
    return {
        "gold_sufficient": sum(pred_gold),
        "gold_insufficient": len(pred_gold) - sum(pred_gold),
        "distractor_sufficient": sum(pred_dist),
        "distractor_insufficient": len(pred_dist) - sum(pred_dist),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2.5-1.5b")
    ap.add_argument("--n-train", type=int, default=30)
    ap.add_argument("--n-dev", type=int, default=40)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--max-tokens", type=int, default=64, help="budget of the JSON critic call")
    ap.add_argument("--train-file", default=str(ROOT / "data/hotpotqa/hotpot_train_100.json"))
    ap.add_argument("--dev-file", default=str(ROOT / "data/hotpotqa/hotpot_dev_distractor_100.json"))
    ap.add_argument("--out", default=str(ROOT / "outputs/critic_eval/result.json"))
    args = ap.parse_args()

    llm = load_llm("llamacpp", model=args.model, n_ctx=2048, n_threads=args.threads)
    stats = ParseStats()
    logprob = LLMCritic(llm, mode="logprob", followup=False, stats=stats)
    jcritic = LLMCritic(llm, mode="json", max_tokens=args.max_tokens, stats=stats)
    print(f"{llm!r}", flush=True)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # one JSON line per finished question, so an interrupted run resumes where it stopped
    partial = out.with_suffix(".jsonl")
    done: dict[tuple[str, str], dict[str, Any]] = {}
    if partial.exists():
        for line in partial.read_text().splitlines():
            r = json.loads(line)
            done[(r["split"], r["id"])] = r

    def record(r: dict[str, Any]) -> None:
        done[(r["split"], r["id"])] = r
        with partial.open("a") as f:
            f.write(json.dumps(r) + "\n")

    t0 = time.perf_counter()
    train = conditions(load_benchmark("hotpotqa", args.train_file), args.n_train)
    dev = conditions(load_benchmark("hotpotqa", args.dev_file), args.n_dev)
    for i, ex in enumerate(train):
        if ("train", ex["id"]) in done:
            continue
        pg_, pd_ = (logprob.p_sufficient(ex["question"], ex[c]) for c in ("gold", "distractors"))
        record({"split": "train", "id": ex["id"], "p_gold": pg_, "p_dist": pd_})
        print(f"train {i + 1}/{len(train)} p_gold={pg_:.3f} p_dist={pd_:.3f}", flush=True)
    for i, ex in enumerate(dev):
        if ("dev", ex["id"]) in done:
            continue
        row: dict[str, Any] = {"split": "dev", "id": ex["id"], "question": ex["question"]}
        for cond in ("gold", "distractors"):
            # log-prob first: the JSON call then reuses the cached question+evidence prefix
            p = logprob.p_sufficient(ex["question"], ex[cond])
            v = jcritic.judge(ex["question"], ex[cond])
            row[cond] = {"p_yes": p, "json_sufficient": v.sufficient, "json_parsed": v.parsed,
                         "followup_query": v.followup_query, "missing": v.missing}  # fmt: skip
        record(row)
        print(f"dev {i + 1}/{len(dev)} gold p={row['gold']['p_yes']:.3f} json={row['gold']['json_sufficient']} | "
              f"dist p={row['distractors']['p_yes']:.3f} json={row['distractors']['json_sufficient']}", flush=True)  # fmt: skip

    tg = [done[("train", ex["id"])]["p_gold"] for ex in train]
    td = [done[("train", ex["id"])]["p_dist"] for ex in train]
    threshold, train_bacc = fit_threshold(tg, td)
    rows = [done[("dev", ex["id"])] for ex in dev]
    pg = [r["gold"]["p_yes"] for r in rows]
    pd = [r["distractors"]["p_yes"] for r in rows]
    result = {
        "model": args.model,
        "n_train": len(train),
        "n_dev": len(rows),
        "threshold": threshold,
        "train_balanced_accuracy": train_bacc,
        "train_auroc": auroc(tg, td),
        "dev_auroc": auroc(pg, pd),
        "logprob": confusion([p >= threshold for p in pg], [p >= threshold for p in pd]),
        "json": confusion([r["gold"]["json_sufficient"] for r in rows], [r["distractors"]["json_sufficient"] for r in rows]),
        "json_parse_failures": sum(not r[c]["json_parsed"] for r in rows for c in ("gold", "distractors")),
        "mean_p_yes": {"gold": sum(pg) / len(pg), "distractors": sum(pd) / len(pd)},
        "llm_calls": llm.log.summary(),
        "parse_stats": stats.as_dict(),
        "n_threads": llm.n_threads,
        "wall_seconds_this_session": time.perf_counter() - t0,
        "train_scores": {"gold": tg, "distractors": td},
        "dev": rows,
    }
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k not in ("dev", "train_scores")}, indent=1))


if __name__ == "__main__":
    main()
