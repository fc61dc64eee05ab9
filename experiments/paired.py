"""The paired end-to-end table from the run folders of ``scripts/paired.sh``: ``python experiments/paired.py``.

Reads ``experiments/runs/paired/<benchmark>/<system>/predictions.jsonl`` (unpacked from
``experiments/runs/paired.zip`` first), keeps the questions that every
system of a benchmark answered (status ok: a paired comparison), and reports per system the mean EM,
F1, evidence tokens and LLM calls, then each difference canopy - other in EM, F1 and evidence tokens
with a paired bootstrap 95% CI (``canopy_lit.eval.metrics.paired_bootstrap_ci``, BCa). Writes
``experiments/tables/paired.md`` and rewrites the ``<!-- BEGIN table:paired -->`` block of README.md
and experiments/README.md. Nothing in the table is typed by hand.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable from a source checkout without installing
    sys.path.insert(0, str(ROOT))

from canopy_lit.eval.metrics import paired_bootstrap_ci  # noqa: E402
from canopy_lit.eval.records import read_predictions  # noqa: E402
from canopy_lit.report.archive import ensure_unpacked  # noqa: E402

SYSTEMS = {
    "canopy": "canopy",
    "no_projection": "canopy w/o projection (`refine=keep_whole`)",
    "no_iteration": "canopy w/o iteration (`loop.max_rounds=1`)",
    "vanilla": "vanilla (k = 5, whole items, one round)",
}
BENCH_NAMES = {"hotpotqa": "HotpotQA", "nq": "NQ", "ottqa": "OTT-QA", "tatqa": "TAT-QA"}


def load(root: Path) -> dict[str, dict[str, dict[str, dict]]]:
    """benchmark -> system -> question id -> record (ok records only)."""
    out: dict[str, dict[str, dict[str, dict]]] = {}
    for pred in sorted(root.glob("*/*/predictions.jsonl")):
        bench, system = pred.parent.parent.name, pred.parent.name
        recs = {r["id"]: r for r in read_predictions(pred) if r.get("status", "ok") == "ok"}
        out.setdefault(bench, {})[system] = recs
    return out


def _fmt_ci(diff: float, lo: float, hi: float, scale: float = 100.0, digits: int = 1) -> str:
    star = "" if lo <= 0 <= hi else " *"
    return f"{scale * diff:+.{digits}f} [{scale * lo:+.{digits}f}, {scale * hi:+.{digits}f}]{star}"


def paired_rows(runs: dict[str, dict[str, dict]], n_boot: int = 2000) -> tuple[int, list[list[str]], list[list[str]]]:
    """(n, per-system rows, difference rows) of one benchmark over the questions every system answered."""
    systems = [s for s in SYSTEMS if s in runs]
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
         f"{col(s, 'tokens').mean():.0f}", f"{col(s, 'calls').mean():.2f}", f"{col(s, 'prefill').mean():.0f}",
         f"{col(s, 'latency').mean():.0f}"]
        for s in systems
    ] if n else []  # fmt: skip
    diffs = []
    if n and "canopy" in systems:
        for other in systems:
            if other == "canopy":
                continue
            row = [f"canopy - {SYSTEMS[other].split(' (')[0]}"]
            for key, scale, digits in (("em", 100.0, 1), ("f1", 100.0, 1), ("tokens", 1.0, 0)):
                a, b = col("canopy", key), col(other, key)
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
        lines += ["| system | n | EM | F1 | evidence tokens | LLM calls | prefilled tokens | s / question |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join(r) + " |" for r in per]
        if diffs:
            lines += ["", "| paired difference (95% CI) | EM (points) | F1 (points) | evidence tokens |", "|---|---|---|---|"]
            lines += ["| " + " | ".join(r) + " |" for r in diffs]
        lines.append("")
    lines.append("`*`: the paired bootstrap CI (BCa, 2,000 resamples) excludes 0.")
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
    ensure_unpacked([runs])
    body = render(runs, n_boot)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(body, encoding="utf-8")
    written = {"table:paired": out}
    for doc in docs:
        if doc.is_file() and replace_block(doc, "paired", body):
            written[f"block:paired:{doc.name}"] = doc
            if echo:
                print(f"updated {doc}", file=sys.stderr)
    if echo:
        print(body)
    return written


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=ROOT / "experiments" / "runs" / "paired")
    ap.add_argument("--out", type=Path, default=ROOT / "experiments" / "tables" / "paired.md")
    ap.add_argument("--docs", type=Path, nargs="*", default=[ROOT / "README.md", ROOT / "experiments" / "README.md"])
    ap.add_argument("--n-boot", type=int, default=2000)
    args = ap.parse_args(argv)
    generate(ROOT, args.runs, args.out, args.docs, args.n_boot, echo=True)


if __name__ == "__main__":
    main()
