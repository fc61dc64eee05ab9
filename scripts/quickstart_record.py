"""The quickstart's checks and record (called by scripts/quickstart.sh; no dependencies beyond the stdlib).

    python scripts/quickstart_record.py check-steps OUT/train/metrics.json STEPS   # exit 1 unless STEPS trained
    python scripts/quickstart_record.py summary OUT/train/metrics.json STEPS [OUT/train_f0/metrics.json]
                                                           # the decision-accuracy line (f0 from the second file)
    python scripts/quickstart_record.py skips OUT                                   # data skips, once, explained
    python scripts/quickstart_record.py write OUT                                   # OUT/record.json
    python scripts/quickstart_record.py table OUT/record.json                       # markdown for experiments/

The record names the sha256 of scripts/quickstart.sh and of its training config, so a test
(tests/unit/test_quickstart_record.py) can tell when the committed record no longer describes the script.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from canopy_lit.markdown import md_table

ROOT = Path(__file__).resolve().parents[1]
# What the quickstart's duration and adapter depend on: the script and its training recipe.
HASHED = ("scripts/quickstart.sh", "configs/experiment/quickstart.yaml")
# experiments/quickstart_record.json: the record of the run the README's duration line cites.
COMMITTED = ROOT / "experiments" / "quickstart_record.json"

SKIP_MEANING = {
    "gold_span_not_located": "the answer text was not found in a gold paragraph, so that paragraph has no gold "
    "sentence (the question stays, scored on the rest of its gold)",
    "gold_rows_not_located": "the answer and its operands were not found in the table, so the table has no gold "
    "rows (the question stays, scored on the rest of its gold)",
}
TRUNCATED = "is longer than the encoder reads"  # canopy_lit/scoring/node_cache.py, once per run
SKIP_LINE = re.compile(r"(?P<bench>\w+) \((?P<where>[^)]*)\): skipped (?P<n>\d+) x (?P<reason>\w+)")


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_hashes(root: Path = ROOT) -> dict[str, str]:
    """sha256 of each file the record is bound to, by its path in the repository."""
    return {rel: sha256_file(root / rel) for rel in HASHED}


def sha256_tree(folder: Path) -> str:
    """One sha256 over a folder's weight files (``*.safetensors``: relative path and bytes, sorted): the
    adapter's identity. adapter_config.json is left out: it names the base model by its absolute path, which
    differs from one checkout to the next."""
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*.safetensors") if p.is_file()):
        h.update(f.relative_to(folder).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def _fail(msg: str) -> None:
    print(f"quickstart: {msg}", file=sys.stderr)
    raise SystemExit(1)


def _metrics(path: Path) -> dict[str, float]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        _fail(f"{path}: cannot read the training metrics ({e})")
        raise  # unreachable


def steps_trained(metrics: dict[str, float]) -> int:
    return int(metrics.get("train/global_step", 0))


def check_steps(metrics_path: Path, steps: int) -> int:
    """Exit 1, saying what to do, unless training ran all ``steps``: a cut run gives a different adapter."""
    done = steps_trained(_metrics(metrics_path))
    if done != steps:
        _fail(
            f"training ran {done} of {steps} steps ({metrics_path}): the adapter and every number after it would "
            f"differ from a full run. Rerun `bash scripts/quickstart.sh` (it resumes from last.ckpt); to start "
            f"over, delete {metrics_path.parent}."
        )
    return done


def summary(metrics_path: Path, steps: int, f0_path: Path | None = None) -> None:
    """The steps trained and f0 -> fθ test decision accuracy; f0's from ``f0_path`` when given (the f0 test pass
    that ran beside training, ``train.py train=false model.test_scorers=[f0]``, on the same test subsets)."""
    m = _metrics(metrics_path)
    done = check_steps(metrics_path, steps)
    if f0_path is not None:
        m |= {k: v for k, v in _metrics(f0_path).items() if k.endswith("_f0")}

    def acc(part: str) -> str:
        f0, ft = m.get(f"test/{part}/decision_accuracy_f0"), m.get(f"test/{part}/decision_accuracy")
        if f0 is None or ft is None:
            return f"not tested (no test/{part}/decision_accuracy in {metrics_path})"
        return f"f0 {f0:.1%} -> fθ {ft:.1%}"

    print(
        f"training: {done} of {steps} steps. Test decision accuracy (does the encoder keep the region that holds "
        f"the answer?): in-domain {acc('in_domain')}; TAT-QA zero-shot {acc('zero_shot')}"
    )
    print(
        "  (training tests seeded subsets of the NQ, OTT-QA and TAT-QA test splits, configs/experiment/"
        "quickstart.yaml, to keep its test passes short; the evidence table above uses the whole splits, "
        "hence its larger n)"
    )


def _logs(paths: list[Path]) -> list[Path]:
    """The given log files, and every ``*.log`` under the given folders (each run's own Hydra log)."""
    out: list[Path] = []
    for p in paths:
        out += sorted(p.rglob("*.log")) if p.is_dir() else [p] if p.is_file() else []
    return out


def skips(paths: list[Path]) -> None:
    """Each benchmark's skip counts once (the readers log them at every load), with what they mean, and how
    many runs cut an over-long node (each run warns once)."""
    seen: dict[tuple[str, str], int] = {}
    cut_runs = 0
    for log in _logs(paths):
        text = log.read_text(errors="replace")
        for m in SKIP_LINE.finditer(text):
            seen[(m["bench"], m["reason"])] = int(m["n"])
        # lane_f0.log repeats its runs' own logs: counting it too would count them twice
        cut_runs += log.name != "lane_f0.log" and TRUNCATED in text
    if not seen and not cut_runs:
        return
    print("data notes (expected on the bundled benchmarks; nothing is wrong with the run):")
    for (bench, reason), n in sorted(seen.items()):
        print(f"  {bench}: {n} x {reason}: {SKIP_MEANING.get(reason, 'see the reader in canopy_lit/data/readers')}")
    if cut_runs:
        print(f"  {cut_runs} run(s) warned that a node longer than the encoder reads (max_seq_length) was cut to it: "
              "long tables and passages; each run counts them in its metrics ('truncated')")


def _commit(root: Path) -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *HASHED], cwd=root, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return sha.stdout.strip() + (" (quickstart files modified)" if dirty else "")


def _peak_rss_mb(out: Path) -> float | None:
    """Largest peak RSS of the steps run under /usr/bin/time (files OUT/rss/*.kb hold its %M, in KiB)."""
    values = []
    for f in sorted((out / "rss").glob("*.kb")):
        text = f.read_text().split()
        if text and text[-1].isdigit():
            values.append(int(text[-1]))
    return round(max(values) / 1024, 1) if values else None


def write(out: Path, root: Path = ROOT) -> Path:
    metrics = _metrics(out / "train" / "metrics.json")
    timings = []
    tsv = out / "timings.tsv"
    for line in tsv.read_text().splitlines() if tsv.is_file() else []:
        name, _, secs = line.partition("\t")
        if secs.strip().isdigit():
            timings.append({"step": name, "seconds": int(secs)})
    start = out / ".start"
    total = int(time.time()) - int(start.read_text()) if start.is_file() else None
    adapter = out / "train" / "adapter"
    record = {
        "commit": _commit(root),
        "sha256": source_hashes(root),
        "steps_trained": steps_trained(metrics),
        "wall_seconds_per_step": timings,
        "wall_seconds_total": total,
        "peak_rss_mb": _peak_rss_mb(out),
        "adapter_sha256": sha256_tree(adapter) if adapter.is_dir() else None,
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    path = out / "record.json"
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return path


def _minutes(s: int | None) -> str:
    return "?" if s is None else f"{s // 60} min {s % 60} s"


def table(record_path: Path) -> str:
    r = json.loads(record_path.read_text())
    lines = [
        f"Measured at commit {r['commit']} on {r.get('measured_at', '?')}: **{_minutes(r['wall_seconds_total'])}** "
        f"in all, {r['steps_trained']} training steps, peak RSS {r['peak_rss_mb']} MB, adapter sha256 "
        f"`{r['adapter_sha256']}`.",
        "",
        md_table(["step", "wall time"], [[t["step"], _minutes(t["seconds"])] for t in r["wall_seconds_per_step"]]).rstrip(),
        "",
        "Bound to " + ", ".join(f"`{p}` sha256 `{h[:12]}`" for p, h in r["sha256"].items()) + ".",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if not argv:
        _fail("usage: quickstart_record.py check-steps|summary|skips|write|table ARGS (see the module docstring)")
    cmd, args = argv[0], argv[1:]
    if cmd == "check-steps":
        check_steps(Path(args[0]), int(args[1]))
    elif cmd == "summary":
        summary(Path(args[0]), int(args[1]), Path(args[2]) if len(args) > 2 else None)
    elif cmd == "skips":
        skips([Path(a) for a in args])
    elif cmd == "write":
        print(f"record: {write(Path(args[0]))}")
    elif cmd == "table":
        print(table(Path(args[0])))
    else:
        _fail(f"unknown command {cmd!r} (check-steps, summary, skips, write, table)")


if __name__ == "__main__":
    main(sys.argv[1:])
