"""Compare two output folders of ``scripts/same_outputs.sh``: every metric and per-question row equal.

Keys that measure wall time or name the machine or folder differ between any two runs and are left out.
Exits 1 and lists the differences when there are any.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

_VOLATILE = re.compile(r"second|time|latency|elapsed|duration|per_s|/s$|started|host|pid|path|dir|git|date|version")
_COMPARED = ("metrics.json", "predictions.jsonl", "probe_questions.jsonl", "evidence.jsonl", "records.jsonl")


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if not _VOLATILE.search(str(k))}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _load(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [_clean(json.loads(line)) for line in text.splitlines() if line.strip()]
    return _clean(json.loads(text))


def compare(a: Path, b: Path) -> list[str]:
    problems: list[str] = []
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.name in _COMPARED)
    if not files:
        return [f"{a}: no outputs to compare"]
    for rel in files:
        if not (b / rel).is_file():
            problems.append(f"{rel}: missing in {b}")
            continue
        left, right = _load(a / rel), _load(b / rel)
        if left != right:
            problems.append(f"{rel}: differs")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python scripts/same_outputs.py OUT_A OUT_B", file=sys.stderr)
        return 2
    a, b = Path(argv[0]), Path(argv[1])
    problems = compare(a, b)
    for line in problems:
        print(line)
    print(f"{len(problems)} difference(s) over the outputs of {a} and {b}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
