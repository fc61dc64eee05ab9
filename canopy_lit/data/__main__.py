"""``python -m canopy_lit.data stats [--json] [--benchmark NAME --path FILE] [--branching B]``.

Prints, per benchmark, the questions, how many have gold items and located gold
leaves, the items, the (q, v) training instances and preference pairs under
branching factor B (METHOD.md §1.2), the skip reasons and the split sizes. With
no ``--benchmark`` it covers all bundled data; ``--path`` runs the same on one
file of that benchmark's official format. Bad input exits with status 2 and a
one-line message naming the file and record.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from canopy_lit.data.base import BENCHMARKS, Benchmark, bundled_benchmarks
from canopy_lit.data.benchmark import load_benchmark
from canopy_lit.data.readers._io import DataFormatError
from canopy_lit.data.splits import split_report
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.supervision import training_instances


def benchmark_stats(bench: Benchmark, branching: int = 2, seed: int = 0) -> dict[str, Any]:
    """Counts of one loaded benchmark (the object ``stats --json`` prints per benchmark)."""
    questions = bench.questions
    with_gold = sum(1 for q in questions if q.gold)
    located = sum(1 for q in questions if any(q.gold.values()))
    gold_items = {i for q in questions for i in q.gold}
    instances = training_instances(bench.questions, bench.items, Hierarchy(branching))
    return {
        "questions": len(questions),
        "questions_with_gold": with_gold,
        "questions_with_located_gold": located,
        "located_gold_share": round(located / len(questions), 4) if questions else 0.0,
        "items": len(bench.items),
        "gold_items": len(gold_items),
        "gold_leaves": sum(len(v) for q in questions for v in q.gold.values()),
        "instances": len(instances),
        "pairs": sum(len(x.pairs) for x in instances),
        "questions_with_instances": len({x.question_id for x in instances}),
        "branching": branching,
        "skipped": dict(sorted(bench.skipped.items())),
        "splits": split_report(bench, seed),
        "path": bench.meta.get("path"),
    }


def _options(pairs: list[str]) -> dict[str, str]:
    out = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: --opt expects KEY=VALUE, got {p!r}")
        out[key.replace("-", "_")] = value
    return out


_COLUMNS = ("questions", "questions_with_gold", "located_gold_share", "items", "instances", "pairs")


def _table(result: dict[str, dict[str, Any]]) -> str:
    rows = [("benchmark", *_COLUMNS)]
    for name, s in result.items():
        rows.append((name, *(f"{s[c]:.1%}" if c == "located_gold_share" else str(s[c]) for c in _COLUMNS)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True)))
        for r in rows
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m canopy_lit.data", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser("stats", help="question / gold / instance / pair counts")
    st.add_argument("--json", action="store_true", help="print one JSON object keyed by benchmark name")
    st.add_argument("--benchmark", choices=sorted(BENCHMARKS), help="one benchmark (default: all bundled)")
    st.add_argument("--path", help="a file of that benchmark's official format (default: the bundled one)")
    st.add_argument("--branching", type=int, default=2, help="tree branching factor B (default 2)")
    st.add_argument("--seed", type=int, default=0, help="split seed")
    st.add_argument(
        "--opt", action="append", default=[], metavar="KEY=VALUE", help="reader option, e.g. tables=FILE"
    )
    args = parser.parse_args(argv)

    if args.path and not args.benchmark:
        parser.error("--path needs --benchmark")
    if args.branching < 2:
        parser.error("--branching must be >= 2")
    names = [args.benchmark] if args.benchmark else bundled_benchmarks()
    result: dict[str, dict[str, Any]] = {}
    try:
        for name in names:
            bench = load_benchmark(name, args.path, **_options(args.opt))
            result[name] = benchmark_stats(bench, args.branching, args.seed)
    except (DataFormatError, FileNotFoundError, ValueError) as err:  # DataFormatError names file + record
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else _table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
