"""Recount ``probe/pruned_share`` of committed probe runs from their own per-node rows (no model rerun).

    python -m canopy_lit.studies.recount_pruned_share [experiments/runs/<study>.zip ...]   # default: every archive

``probe/pruned_share`` once counted every gold item whose kept set was not the root alone, so an item split
into children that together keep every leaf counted as pruned; it now counts an item only when a leaf is
dropped (``canopy_lit.eval.probe.drops_a_leaf``). For each probe run folder of each archive (unpacked into a
temporary folder) this recounts both rules from ``probe_nodes.jsonl`` with the run's branching factor and δ:

- recorded value == the old rule's count: the new value is written into ``metrics.json`` (and ``table.md``
  where the folder has one), nothing else;
- recorded value == the new rule's count: already recounted, left alone;
- anything else: refused (exit 1), the rows do not reproduce what the run recorded.

A run without ``probe_nodes.jsonl`` cannot be recounted and is listed, unchanged. An archive with a changed
run is repacked (``canopy_lit.report.archive.pack``, the same bytes for unchanged entries) in place.
Prints one line per run: ``archive run: pruned % before -> after``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import yaml

from canopy_lit.eval.probe import pruned_counts
from canopy_lit.eval.summary import markdown_table
from canopy_lit.report.archive import pack, run_folders, unpack
from canopy_lit.studies import PROJECT_ROOT as ROOT

KEY = "probe/pruned_share"


class RecountError(RuntimeError):
    """A run's rows do not reproduce its recorded pruned share (the message names the run)."""


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _run_settings(run: Path) -> tuple[int, float]:
    """(branching factor, δ) the run refined with, from its composed config."""
    cfg = yaml.safe_load((run / ".hydra" / "config.yaml").read_text(encoding="utf-8"))
    try:
        return int(cfg["tree"]["branching"]), float(cfg["refine"]["descend_margin"])
    except (KeyError, TypeError, ValueError) as err:
        raise RecountError(f"{run}/.hydra/config.yaml: no tree.branching / refine.descend_margin ({err})") from err


def _rewrite_table(path: Path, value: float) -> None:
    """Replace the pruned_share cell of a run's table.md (the probe writes one row under a header)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    for i, line in enumerate(lines[:-2]):
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if "pruned_share" in cols and lines[i + 1].startswith("|---"):
            cells = lines[i + 2].strip().strip("|").split("|")
            cells[cols.index("pruned_share")] = " " + markdown_table([{"v": value}], ["v"]).split("\n")[2][2:-2] + " "
            lines[i + 2] = "|" + "|".join(cells) + "|"
            path.write_text("\n".join(lines), encoding="utf-8")
            return
    raise RecountError(f"{path}: no pruned_share column")


def recount_run(run: Path) -> tuple[float, float] | None:
    """(recorded, new) pruned share of one probe run, with metrics.json (and table.md) rewritten when the
    recorded value is the old count; None when the run has no per-node rows to recount from."""
    metrics_path = run / "metrics.json"
    text = metrics_path.read_text(encoding="utf-8")
    metrics = json.loads(text)
    nodes = run / "probe_nodes.jsonl"
    if not nodes.is_file():
        return None
    branching, delta = _run_settings(run)
    counts = pruned_counts(_read_jsonl(nodes), branching, delta, where=str(nodes))
    recorded = metrics[KEY]
    if counts["items"] != metrics.get("probe/n_items"):
        raise RecountError(f"{run}: {counts['items']} gold items in probe_nodes.jsonl, "
                           f"metrics.json records probe/n_items = {metrics.get('probe/n_items')}")  # fmt: skip
    old, new = counts["not_root"] / counts["items"], counts["pruned"] / counts["items"]
    if recorded == new:
        return recorded, new
    if recorded != old:
        raise RecountError(f"{run}: recorded {KEY} = {recorded!r}, but its probe_nodes.jsonl gives {old!r} under "
                           f"the old rule ({new!r} under the new): the rows do not reproduce the run")  # fmt: skip
    if json.dumps(metrics, indent=2, sort_keys=True) + "\n" != text:
        raise RecountError(f"{metrics_path}: not in the form the probe writes; rewriting it would change more than {KEY}")
    metrics[KEY] = new
    metrics_path.write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if (run / "table.md").is_file():
        _rewrite_table(run / "table.md", new)
    return recorded, new


def recount_archive(archive: Path) -> list[tuple[str, float, float | None]]:
    """Recount every probe run of ``archive``; repack it in place when a value changed."""
    rows: list[tuple[str, float, float | None]] = []
    with tempfile.TemporaryDirectory(prefix="canopy-recount-") as tmp:
        folder = unpack(archive, Path(tmp) / archive.stem)
        changed = False
        for run in run_folders(folder):
            if KEY not in json.loads((run / "metrics.json").read_text(encoding="utf-8")):
                continue
            got = recount_run(run)
            rel = run.relative_to(folder).as_posix()
            if got is None:
                rows.append((rel, json.loads((run / "metrics.json").read_text(encoding="utf-8"))[KEY], None))
                continue
            rows.append((rel, *got))
            changed |= got[0] != got[1]
        if changed:
            shutil.copyfile(pack(folder).archive, archive)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("archives", nargs="*", type=Path, help="study archives (default: experiments/runs/*.zip)")
    args = ap.parse_args(argv)
    archives = args.archives or sorted((ROOT / "experiments" / "runs").glob("*.zip"))
    try:
        for archive in archives:
            for rel, before, after in recount_archive(archive):
                tail = "no probe_nodes.jsonl, left as recorded" if after is None else f"{100 * after:.1f}"
                print(f"{archive.name} {rel}: {100 * before:.1f} -> {tail}")
    except (RecountError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
