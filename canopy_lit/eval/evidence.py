"""Evidence evaluation without an LLM (``python evaluate.py experiment=evidence``).

Per question: retrieve top-k (the ``retriever`` group), build trees (B), score (the ``scorer`` group),
refine with the ``refine`` group (canopy, keep-whole, flat, extractive, flat at canopy's token count),
one round, no critic, no reader call (``canopy_lit.pipeline.build.build_evidence_loop``); then measure
the evidence the reader would get, after the reader cap (``loop.reader_max_tokens``), every measure alike:

- ``evidence/answer_recall``: share of questions whose evidence contains a gold answer
  (``canopy_lit.eval.answers``: SQuAD-normalised tokens, bare numbers compared as numbers). TAT-QA
  multi-span answers need every span, arithmetic answers every derivation operand, count answers every
  counted cell; yes/no answers are left out (``evidence/answer_recall_n`` counts the questions measured);
- ``evidence/answer_recall_content``: the same questions, the answer looked up in the items' regions
  only: titles, table captions and column headers left out. They reach the reader with any region of an
  item, and CANOPY keeps a region of every retrieved item (flat and extractive may keep none), so the
  gap between the two is the recall that titles and headers carry;
- ``evidence/gold_recall``: gold leaves the reader gets / gold leaves of the retrieved gold items
  (micro over questions, as ``probe/gold_recall``); a leaf cut at a token boundary is not got;
- ``evidence/item_recall``: gold items retrieved at k / gold items (mean over questions with gold);
- ``evidence/tokens``: evidence tokens per question in the reader's tokenizer;
  ``evidence/kept_ratio``: those / whole-item tokens of the retrieved items (micro);
- the cap's effect: ``evidence/tokens_before_cap`` (the refiner's evidence, uncapped),
  ``evidence/truncated_items`` (items cut or dropped per question) and
  ``evidence/truncated_questions`` (share of questions the cap cut).

Records go to ``predictions.jsonl`` through the resumable harness; 95% bootstrap CIs over
questions sit beside each metric (``*_ci_low`` / ``*_ci_high``, ``canopy_lit.eval.evidence_stats``).

Two runs compared on the same questions (paired answer-recall difference, token ratio)::

    python -m canopy_lit.eval.evidence RUN_A RUN_B
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from canopy_lit.eval.answers import answer_found, answer_needles, content_text, gold_leaf_counts
from canopy_lit.eval.evidence_stats import EVIDENCE_COLUMNS, compare_runs, score_evidence, summarize_evidence
from canopy_lit.eval.harness import notify, run_questions, write_run_outputs
from canopy_lit.eval.summary import markdown_table, run_setting
from canopy_lit.pipeline.build import build_evidence_loop, load_questions
from canopy_lit.pipeline.loop import EvidenceLoop
from canopy_lit.pipeline.trace import QuestionRecord
from canopy_lit.types import Question

# The setting line under an evidence run's table (``run_axes`` names).
EVIDENCE_SETTING = ("benchmark", "split", "scope", "k", "B", "refine", "scorer", "encoder", "node_pooling", "adapter", "tokenizer")


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
        loop: an ``EvidenceLoop`` (``build_evidence_loop``); its reader's answer is not used.
    """

    def __init__(self, loop: EvidenceLoop) -> None:
        self.loop = loop

    def __call__(self, question: Question) -> EvidenceRecord:
        rec, capped = self.loop.run_with_evidence(question)
        items = [k for rd in rec.rounds for k in rd.kept]
        # Every measure is of what the reader gets, after the reader cap.
        delivered = {k.item_id: k.delivered_ranges for k in items}
        retrieved = [i for rd in rec.rounds for i in rd.retrieved]
        hit, total = gold_leaf_counts(question.gold, delivered)
        if getattr(self.loop.refiner, "compresses_text", False):
            hit = total = 0  # token-level compression delivers no leaf whole: gold leaf recall is not measured
        needles = answer_needles(question)
        content = "\n\n".join(c for c in (content_text(self.loop.hierarchy, b) for b in capped.items) if c)
        budget = getattr(self.loop.refiner, "last_budget", None)  # a matched-budget refiner's reference count
        ev = {
            "answer_found": answer_found(needles, "\n\n".join(capped.blocks)),
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


def run_evidence(cfg: DictConfig, out_dir: Path) -> dict[str, float]:
    """``mode: evidence``: every question of the split, durably, then metrics.json and table.md."""
    bench, questions = load_questions(cfg, notify)
    runner = EvidenceRunner(build_evidence_loop(cfg, bench))
    records = run_questions(
        questions,
        runner,
        out_dir,
        retry_failed=bool(cfg.get("retry_failed", False)),
        progress=bool(cfg.get("progress", True)),
        score=score_evidence,
    )
    return evidence_outputs(cfg, out_dir, records)


def evidence_outputs(cfg: DictConfig, out_dir: Path, records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """metrics.json and table.md of an evidence run from its records (also what a merge of shards writes)."""
    metrics = summarize_evidence(records)
    refine = str(cfg.refine._target_).rsplit(".", 1)[-1]
    row = {"refine": refine, "benchmark": cfg.data.name, **{c: metrics.get(c) for c in EVIDENCE_COLUMNS}}
    table = markdown_table([row], ["refine", "benchmark", *EVIDENCE_COLUMNS], run_setting(cfg, EVIDENCE_SETTING))
    write_run_outputs(out_dir, metrics, table)
    return metrics


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m canopy_lit.eval.evidence RUN_A RUN_B``: paired answer-recall difference and token ratio."""
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
