"""Bring the committed archives' run.json to what today's recorder writes for the same config (run once).

    python experiments/migrate_run_records.py [--check]

Runs recorded before ``descend_margin`` and ``adapter_scale`` were axes of ``run.json`` lack them, and older
recorders wrote an adapter as its folder's last name (``adapter``) where today's writes the path it was loaded
from. A table mixing such a run with a rerun one then shows a δ column (blank vs 0) and two adapter labels for
one set of weights. This fills the missing keys from the run's own ``.hydra/config.yaml``
(``canopy_lit.eval.records.run_axes``) and rewrites ``adapter`` to today's value where the recorded weights'
hash is the same; nothing else in a record changes, so every table that does not mix old and new runs
regenerates as before. ``--check`` lists what would change and exits 1 if anything would.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable from a source checkout without installing
    sys.path.insert(0, str(ROOT))

from canopy_lit.eval.records import run_axes  # noqa: E402
from canopy_lit.report.archive import pack, unpack  # noqa: E402

FILLED = ("descend_margin", "adapter_scale")
EVAL_MODES = ("qa", "probe", "evidence", "retrieval")


def migrated(record: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """``record`` with the keys today's recorder adds (``FILLED``) and today's adapter path."""
    now = run_axes(cfg, record.get("choices"))
    out = dict(record)
    for key in FILLED:
        if key not in out:
            out[key] = now[key]
    if out.get("adapter") != now["adapter"] and out.get("adapter_hash") == now["adapter_hash"]:
        out["adapter"] = now["adapter"]
    return out


def migrate_archive(archive: Path, write: bool) -> int:
    """Changed run.json files of one archive (rewritten and repacked when ``write``)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = unpack(archive, Path(tmp) / archive.stem)
        changed = 0
        for path in sorted(folder.rglob("run.json")):
            config = path.parent / ".hydra" / "config.yaml"
            if not config.is_file():
                continue
            record = json.loads(path.read_text())
            if record.get("mode") not in EVAL_MODES:  # a training run's record is another file's shape
                continue
            new = migrated(record, yaml.safe_load(config.read_text()))
            if new != record:
                changed += 1
                path.write_text(json.dumps(new, indent=2) + "\n")
        if write and changed:
            result = pack(folder)
            Path(result.archive).replace(archive)
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="only count what would change")
    args = ap.parse_args(argv)
    total = 0
    for archive in sorted((ROOT / "experiments" / "runs").glob("*.zip")):
        n = migrate_archive(archive, write=not args.check)
        total += n
        print(f"{archive.name}: {n} run.json {'to migrate' if args.check else 'migrated'}")
    return 1 if args.check and total else 0


if __name__ == "__main__":
    sys.exit(main())
