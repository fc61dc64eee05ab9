"""The paired end-to-end table from the run folders of ``scripts/paired.sh``: ``python -m canopy_lit.studies.paired``.

Reads ``experiments/runs/paired/<benchmark>/<system>/predictions.jsonl`` (unpacked from
``experiments/runs/paired.zip`` first), keeps the questions that every
system of a benchmark answered (status ok: a paired comparison), and reports per system the mean EM,
F1, evidence tokens and LLM calls, then each difference canopy - other in EM, F1 and evidence tokens
with a paired bootstrap 95% CI (``canopy_lit.metrics.paired_bootstrap_ci``, BCa). Writes
``experiments/tables/paired.md`` and rewrites the ``<!-- BEGIN table:paired -->`` blocks (the full table,
experiments/README.md) and ``table:paired_summary`` (F1 and two differences per benchmark, README.md).

``tables/paired_tokens.md`` and the ``table:paired_tokens`` block split the operating point's loop tokens into
what the loop retrieved and the share refinement kept, beside the share the same δ keeps in the frontier's
single round (``experiments/runs/frontier``). Nothing in the tables is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from canopy_lit.eval.evidence_stats import scored_records
from canopy_lit.markdown import md_table
from canopy_lit.metrics import paired_bootstrap_ci
from canopy_lit.report.archive import ensure_unpacked
from canopy_lit.studies import PROJECT_ROOT as ROOT

SYSTEMS = {
    "canopy": "canopy (δ = 0)",
    "canopy_op": "canopy at the operating point (δ chosen on validation)",
    "no_projection": "canopy w/o projection (`refine=keep_whole`)",
    "no_iteration": "canopy w/o iteration (`loop.max_rounds=1`)",
    "vanilla": "vanilla (k = 5, whole items, one round)",
}
SHORT = {"canopy": "canopy δ = 0", "canopy_op": "canopy at the operating point"}
BENCH_NAMES = {"hotpotqa": "HotpotQA", "nq": "NQ", "ottqa": "OTT-QA", "tatqa": "TAT-QA"}


def answered(folder: Path) -> dict[str, dict]:
    """Question id -> record of the questions a run folder's latest run scored and answered (status ok)."""
    return {str(r["id"]): r for r in scored_records(folder) if r.get("status", "ok") == "ok"}


def load(root: Path) -> dict[str, dict[str, dict[str, dict]]]:
    """benchmark -> system -> question id -> record (the run's own questions, ok records only)."""
    out: dict[str, dict[str, dict[str, dict]]] = {}
    for pred in sorted(root.glob("*/*/predictions.jsonl")):
        bench, system = pred.parent.parent.name, pred.parent.name
        out.setdefault(bench, {})[system] = answered(pred.parent)
    return out


def _fmt_ci(diff: float, lo: float, hi: float, scale: float = 100.0, digits: int = 1) -> str:
    star = "" if lo <= 0 <= hi else " *"
    return f"{scale * diff:+.{digits}f} [{scale * lo:+.{digits}f}, {scale * hi:+.{digits}f}]{star}"


def paired_rows(runs: dict[str, dict[str, dict]], n_boot: int = 2000) -> tuple[int, list[list[str]], list[list[str]]]:
    """(n, per-system rows, difference rows) of one benchmark over the questions every system answered."""
    systems = [s for s in SYSTEMS if s in runs]
    if "canopy_op" in systems and len(runs["canopy_op"]) < min(len(runs[s]) for s in systems if s != "canopy_op"):
        systems.remove("canopy_op")  # not yet at the others' count: the rest stays paired at its n
    common = set.intersection(*(set(runs[s]) for s in systems)) if systems else set()
    ids = sorted(common)
    n = len(ids)

    def col(system: str, key: str) -> np.ndarray:
        recs = [runs[system][i] for i in ids]
        if key == "tokens":
            return np.array([r.get("evidence_tokens", 0) for r in recs], dtype=float)
        if key == "calls":
            return np.array([sum((r.get("llm_calls") or {}).values()) for r in recs], dtype=float)
        if key == "prefill":
            return np.array([sum((r.get("llm_prefill_tokens") or {}).values()) for r in recs], dtype=float)
        if key == "latency":
            return np.array([r.get("latency_s", 0.0) for r in recs], dtype=float)
        return np.array([float((r.get("scores") or {}).get(key, 0.0)) for r in recs], dtype=float)

    per = [
        [SYSTEMS[s], str(n), f"{100 * col(s, 'em').mean():.1f}", f"{100 * col(s, 'f1').mean():.1f}",
         f"{100 * col(s, 'match').mean():.1f}",
         f"{col(s, 'tokens').mean():.0f}", f"{col(s, 'calls').mean():.2f}", f"{col(s, 'prefill').mean():.0f}",
         f"{col(s, 'latency').mean():.0f}"]
        for s in systems
    ] if n else []  # fmt: skip
    diffs = []
    for mine in ("canopy", "canopy_op"):
        if not n or mine not in systems:
            continue
        for other in systems:
            if other in ("canopy", "canopy_op"):
                continue
            row = [f"{SHORT[mine]} - {SYSTEMS[other].split(' (')[0]}"]
            for key, scale, digits in (("em", 100.0, 1), ("f1", 100.0, 1), ("match", 100.0, 1), ("tokens", 1.0, 0)):
                a, b = col(mine, key), col(other, key)
                lo, hi = paired_bootstrap_ci(a, b, n_boot=n_boot)
                row.append(_fmt_ci(float((a - b).mean()), lo, hi, scale, digits))
            diffs.append(row)
    return n, per, diffs


def render(root: Path, n_boot: int = 2000) -> str:
    data = load(root)
    if not data:
        return f"_No paired runs under {Path(*root.parts[-3:]).as_posix()} yet: run `scripts/paired.sh`._\n"
    lines = []
    for bench in sorted(data, key=lambda b: list(BENCH_NAMES).index(b) if b in BENCH_NAMES else 99):
        n, per, diffs = paired_rows(data[bench], n_boot)
        lines += [f"**{BENCH_NAMES.get(bench, bench)}** (n = {n} test questions answered by every system)", ""]
        head = ["system", "n", "EM", "F1", "Match", "evidence tokens", "LLM calls", "prefilled tokens", "s / question"]
        lines.append(md_table(head, per).rstrip("\n"))
        if diffs:
            head = ["paired difference (95% CI)", "EM (points)", "F1 (points)", "Match (points)", "evidence tokens"]
            lines += ["", md_table(head, diffs).rstrip("\n")]
        lines.append("")
    lines.append("`*`: the paired bootstrap CI (BCa, 2,000 resamples) excludes 0.")
    return "\n".join(lines) + "\n"


def render_summary(root: Path, n_boot: int = 2000) -> str:
    """The README's short form: per benchmark, F1 of each system and canopy - vanilla / keep-whole in F1."""
    data = load(root)
    if not data:
        return f"_No paired runs under {Path(*root.parts[-3:]).as_posix()} yet: run `scripts/paired.sh`._\n"
    cols = [s for s in SYSTEMS if any(s in runs for runs in data.values())]
    head = ["benchmark", "n", *(f"F1 {SHORT.get(s, SYSTEMS[s].split(' (')[0])}" for s in cols),
            "canopy δ = 0 - vanilla: F1 (points)", "canopy δ = 0 - w/o projection: F1", "evidence tokens canopy / vanilla"]  # fmt: skip
    rows = []
    for bench in sorted(data, key=lambda b: list(BENCH_NAMES).index(b) if b in BENCH_NAMES else 99):
        runs = data[bench]
        n, per, diffs = paired_rows(runs, n_boot)
        if not n:
            continue
        shown = {row[0]: row for row in per}
        f1 = [shown[SYSTEMS[s]][3] if SYSTEMS[s] in shown else "-" for s in cols]
        diff = {row[0]: row for row in diffs}
        vs_van = diff.get(f"{SHORT['canopy']} - vanilla", ["", "", "-"])[2]
        vs_kw = diff.get(f"{SHORT['canopy']} - canopy w/o projection", ["", "", "-"])[2]
        tokens = f"{shown[SYSTEMS['canopy']][5]} / {shown[SYSTEMS['vanilla']][5]}" if {SYSTEMS["canopy"], SYSTEMS["vanilla"]} <= set(shown) else "-"
        rows.append([BENCH_NAMES.get(bench, bench), str(n), *f1, vs_van, vs_kw, tokens])
    lines = [md_table(head, rows).rstrip("\n")]
    lines += ["", "<sub>n = test questions answered by every system shown; paired bootstrap 95% CIs (BCa), `*`: excludes 0. "
              "Every system, EM, Match, LLM calls, prefilled tokens and seconds per question: "
              "[experiments/README.md](experiments/README.md#paired-end-to-end-comparison-the-readmes-main-table).</sub>"]
    return "\n".join(lines) + "\n"


# --- where the operating point's tokens go in the loop ---------------------------------------------


def _delivered(kept: dict) -> int:
    return int(kept.get("delivered_tokens", kept["kept_tokens"]))  # records before the delivered-tokens fix


def _frontier_records(frontier_runs: Path, bench: str, delta: float, adapter_hash: str | None) -> dict[str, dict]:
    """The frontier's fθ run of ``bench`` at ``delta`` (k = 5, the benchmark's own candidates, one round)."""
    for run_json in sorted(frontier_runs.glob("*/run.json")):
        run = json.loads(run_json.read_text(encoding="utf-8"))
        if (run.get("benchmark"), run.get("refine"), run.get("scorer"), run.get("k"), run.get("variant")) != (
            bench, "parent_relative", "fθ", 5, "full"
        ) or float(run.get("descend_margin", -1)) != delta or run.get("adapter_hash") != adapter_hash:
            continue
        if run.get("item_margin") is not None or run.get("node_pooling"):  # item drop, or another node encoder
            continue
        return answered(run_json.parent)
    return {}


def _total(
    recs: dict[str, dict], ids: Sequence[str], what: str, bench: str = "", first_round: bool = False,
    among: dict[str, set[str]] | None = None, inside: bool = True,
) -> float:
    """Summed over ``ids``' kept items: item tokens, delivered tokens, items, or items of ``bench``'s own
    corpus; with ``among`` (question id -> item ids), only the items in (``inside``) or outside that set."""
    n = 0.0
    for i in ids:
        for rnd in recs[i]["rounds"][: 1 if first_round else None]:
            for kept in rnd["kept"]:
                if among is not None and (kept["item_id"] in among[i]) != inside:
                    continue
                n += {"item": kept["item_tokens"], "kept": _delivered(kept),
                      "items": 1, "own": kept["item_id"].startswith(f"{bench}:")}[what]  # fmt: skip
    return n


def _mean(recs: dict[str, dict], ids: Sequence[str], key: str) -> float:
    return float(np.mean([len(recs[i]["rounds"]) if key == "rounds" else recs[i]["evidence_tokens"] for i in ids]))


def token_rows(root: Path, frontier_runs: Path) -> list[list[str]]:
    """Per benchmark: canopy at the operating point against the keep-whole loop on the same questions, its
    evidence tokens split into what the loop retrieved and what share of it refinement kept, beside the
    share the same δ keeps in the frontier's single round (same questions, the benchmark's own candidates)."""
    rows = []
    for bench in BENCH_NAMES:
        folder = root / bench / "canopy_op"
        if not (folder / "run.json").is_file() or not (root / bench / "no_projection").is_dir():
            continue
        run = json.loads((folder / "run.json").read_text(encoding="utf-8"))
        op, kw = (answered(root / bench / s) for s in ("canopy_op", "no_projection"))
        frontier = _frontier_records(frontier_runs, bench, float(run["descend_margin"]), run.get("adapter_hash"))
        ids = sorted(set(op) & set(kw) & set(frontier))
        if not ids:
            continue

        n = len(ids)
        item_op, item_kw = _total(op, ids, "item"), _total(kw, ids, "item")
        kept_op, first = _total(op, ids, "kept"), _total(op, ids, "kept", first_round=True) / _total(op, ids, "item", first_round=True)
        own = _total(op, ids, "own", bench) / _total(op, ids, "items")
        front = _total(frontier, ids, "kept") / _total(frontier, ids, "item")
        tok_op, tok_kw = _mean(op, ids, "tokens"), _mean(kw, ids, "tokens")
        top = {i: set(frontier[i]["rounds"][0]["retrieved"]) for i in ids}  # what the frontier retrieved for the question
        split = [
            _total(op, ids, "kept", among=top, inside=inside) / max(_total(op, ids, "item", among=top, inside=inside), 1.0)
            for inside in (True, False)
        ]
        n_top, n_items = _total(op, ids, "items", among=top), _total(op, ids, "items")
        rows.append([
            BENCH_NAMES[bench], str(n), f"{float(run['descend_margin']):g}",
            f"{_mean(op, ids, 'rounds'):.2f} / {_mean(kw, ids, 'rounds'):.2f}",
            f"{item_op / n:.0f} / {item_kw / n:.0f} ({item_op / item_kw:.2f})",
            f"{100 * own:.0f}%", f"{100 * first:.0f}% / {100 * kept_op / item_op:.0f}%",
            f"{100 * split[0]:.0f}% ({n_top:.0f}) / {100 * split[1]:.0f}% ({n_items - n_top:.0f})", f"{100 * front:.0f}%",
            f"{tok_op:.0f} / {tok_kw:.0f} ({tok_op / tok_kw:.2f})",
        ])  # fmt: skip
    return rows


def render_tokens(root: Path, frontier_runs: Path) -> str:
    rows = token_rows(root, frontier_runs)
    if not rows:
        return "_No operating-point runs with a keep-whole loop and a frontier run to compare yet._\n"
    head = ["benchmark", "n", "δ", "rounds (op / keep-whole)", "retrieved item tokens (op / keep-whole)",
            "loop items from the benchmark's own corpus", "share kept in the loop (round 1 / all rounds)",
            "share kept in the loop: items the frontier also retrieved / other items (items)",
            "share kept on the frontier (one round)", "evidence tokens (op / keep-whole)"]  # fmt: skip
    lines = [
        md_table(head, rows).rstrip("\n"),
        "",
        "<sub>op: canopy at the operating point; n: test questions in both loop runs and the frontier's run "
        "of the same δ and adapter. Shares are ratios of sums over those questions (delivered tokens / "
        "retrieved item tokens). Items the frontier also retrieved: the loop's items among the up to 5 "
        "that the frontier's run of that question took from the benchmark's own candidates (NQ has one per question). Evidence tokens (op / keep-whole) = retrieved ratio x share kept in the loop.</sub>",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def replace_block(path: Path, name: str, body: str) -> bool:
    """Rewrite ``<!-- BEGIN table:name --> ... <!-- END table:name -->`` in ``path``; False if absent."""
    text = path.read_text(encoding="utf-8")
    pat = re.compile(rf"(<!-- BEGIN table:{name} -->\n).*?(<!-- END table:{name} -->)", re.S)
    if not pat.search(text):
        return False
    path.write_text(pat.sub(lambda m: m.group(1) + body + m.group(2), text), encoding="utf-8")
    return True


def generate(
    root: Path = ROOT, runs: Path | None = None, out: Path | None = None, docs: Sequence[Path] | None = None,
    n_boot: int = 2000, echo: bool = False,
) -> dict[str, Path]:
    """tables/paired.md and the ``table:paired`` blocks of README.md and experiments/README.md under ``root``,
    from ``runs`` (default experiments/runs/paired, unpacked from its archive first). ``echo``: print the table."""
    runs = runs if runs is not None else root / "experiments" / "runs" / "paired"
    out = out if out is not None else root / "experiments" / "tables" / "paired.md"
    docs = docs if docs is not None else [root / "README.md", root / "experiments" / "README.md"]
    frontier_runs = runs.parent / "frontier"
    ensure_unpacked([runs, frontier_runs])
    body, summary, tokens = render(runs, n_boot), render_summary(runs, n_boot), render_tokens(runs, frontier_runs)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(body, encoding="utf-8")
    tokens_out = out.with_name(f"{out.stem}_tokens.md")
    tokens_out.write_text(tokens, encoding="utf-8")
    written = {"table:paired": out, "table:paired_tokens": tokens_out}
    for doc in docs:
        for name, text in (("paired", body), ("paired_summary", summary), ("paired_tokens", tokens)):
            if doc.is_file() and replace_block(doc, name, text):
                written[f"block:{name}:{doc.name}"] = doc
                if echo:
                    print(f"updated {doc} ({name})", file=sys.stderr)
    if echo:
        print(body)
    return written


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=ROOT / "experiments" / "runs" / "paired")
    ap.add_argument("--out", type=Path, default=ROOT / "experiments" / "tables" / "paired.md")
    ap.add_argument("--docs", type=Path, nargs="*", default=[ROOT / "README.md", ROOT / "experiments" / "README.md"])
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--answered", type=Path, metavar="RUN_DIR",
                    help="print how many of RUN_DIR's own questions were answered (scripts/paired.sh) and exit")
    args = ap.parse_args(argv)
    if args.answered is not None:
        print(len(answered(args.answered)))
        return
    generate(ROOT, args.runs, args.out, args.docs, args.n_boot, echo=True)


if __name__ == "__main__":
    main()
