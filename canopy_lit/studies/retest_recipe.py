"""Test the recipe study's committed adapters again under today's gold (resumable), then swap the test keys in.

    python -m canopy_lit.studies.retest_recipe run [--only base,cosine]   # one test pass per row, resumable
    python -m canopy_lit.studies.retest_recipe run --reverse               # a second process beside the first
    python -m canopy_lit.studies.retest_recipe swap                        # once every row has its metrics.json

The one operand rule (issue 44, item 3) changed the gold of 3 TAT-QA test questions, one of them inside the
seeded 126 that every recipe row tested zero-shot, so the recipe table's TAT-QA columns (and the pooled stop /
descend columns, which count TAT-QA's decisions) were measured against the old gold. Each row's adapter is
committed (``experiments/runs/recipe/<row>/adapter``), so no row is trained again: ``run`` composes the row's
recorded overrides with its recorded data (``datamodule`` of its ``.hydra/config.yaml`` in recipe.zip: the
benchmarks, the seeded test subsets, the split seed) and runs ``train.py``'s test pass alone (``train=false``)
with the adapter loaded as fθ, into ``experiments/runs/_retest_recipe/<row>`` (not committed). A killed row is
run again from the start (a test pass is minutes). The in-domain test keys must come out equal to the committed
ones (their gold did not change): ``swap`` refuses a row where they do not, then replaces every ``test/*`` key
of the row's metrics.json in the archive and packs it; ``python -m canopy_lit.studies.refresh`` regenerates the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
import zipfile
from pathlib import Path

from omegaconf import OmegaConf

from canopy_lit.studies import PROJECT_ROOT as ROOT

RUNS = ROOT / "experiments" / "runs"
ARCHIVE = RUNS / "recipe.zip"
STAGE = RUNS / "_retest_recipe"
# the recorded data of a row: what its test split was
DATA_KEYS = ("benchmarks", "zero_shot", "options", "batch_size", "group_by_item", "val_fraction", "hard_negatives")
DROPPED = ("hydra.", "trainer.max_time", "logger=", "threads=")
IN_DOMAIN = ("hotpotqa", "nq", "ottqa")


def rows() -> list[tuple[str, list[str], dict]]:
    """(row, recorded overrides, recorded datamodule) of every archived recipe run with a committed adapter."""
    out = []
    with zipfile.ZipFile(ARCHIVE) as zf:
        for name in sorted(zf.namelist()):
            if name.count("/") != 1 or not name.endswith("/run.json"):
                continue
            row = name.split("/")[0]
            if not (RUNS / "recipe" / row / "adapter" / "adapter_model.safetensors").is_file():
                continue
            record = json.loads(zf.read(name))
            recorded = OmegaConf.create(zf.read(f"{row}/.hydra/config.yaml").decode("utf-8"))
            data = {k: OmegaConf.to_container(recorded.datamodule[k]) if OmegaConf.is_config(recorded.datamodule[k])
                    else recorded.datamodule[k] for k in DATA_KEYS if k in recorded.datamodule}  # fmt: skip
            data["split_seed"] = int(recorded.datamodule.get("split_seed", recorded.seed))
            out.append((row, [o for o in record["overrides"] if not o.startswith(DROPPED)], data))
    return out


def test_in_process(row: str, overrides: list[str], data: dict, folder: Path) -> None:
    """``train.py OVERRIDES train=false encoder.adapter=<row adapter>`` with the row's recorded data, here."""
    from hydra import compose, initialize_config_dir

    from canopy_lit.schema import CONFIG_DIR
    from canopy_lit.train import run

    adapter = RUNS / "recipe" / row / "adapter"
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=[*overrides, "train=false", f"encoder.adapter={adapter}", "~logger",
                                          "print_config=false", "threads=1", "callbacks=none"])  # fmt: skip
    for key, value in data.items():
        OmegaConf.update(cfg, f"datamodule.{key}", value, merge=False, force_add=True)
    cfg.paths.root_dir = str(ROOT)
    cfg.paths.output_dir = str(folder)
    run(cfg)


def _taken(folder: Path) -> bool:
    """Whether another live process is testing this row (its pid in ``.running``)."""
    try:
        os.kill(int((folder / ".running").read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def cmd_run(only: list[str], reverse: bool = False) -> int:
    todo = [r for r in rows() if not only or r[0] in only]
    for i, (row, overrides, data) in enumerate(reversed(todo) if reverse else todo, 1):
        folder = STAGE / row
        if (folder / "metrics.json").is_file() or _taken(folder):  # two processes may share the list
            print(f"[{i}/{len(todo)}] {row}: done or being tested", flush=True)
            continue
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        (folder / ".running").write_text(str(os.getpid()))
        start = time.monotonic()
        print(f"[{i}/{len(todo)}] {row}: train.py {' '.join(overrides)} train=false (test pass)", flush=True)
        test_in_process(row, overrides, data, folder)
        (folder / ".running").unlink()
        print(f"[{i}/{len(todo)}] {row}: {time.monotonic() - start:.0f} s", flush=True)
    return 0


def merged(old: dict, new: dict) -> dict:
    """``old`` with every ``test/*`` key of ``new`` (the test pass measures them all); training keys stay."""
    return dict(sorted({**{k: v for k, v in old.items() if not k.startswith("test/")},
                        **{k: v for k, v in new.items() if k.startswith("test/")}}.items()))  # fmt: skip


def in_domain_mismatches(old: dict, new: dict) -> list[str]:
    """In-domain test keys whose value moved: their gold did not change, so a faithful test pass repeats them."""
    return [k for k in old if k.startswith(tuple(f"test/{b}/" for b in IN_DOMAIN)) and k in new
            and not math.isclose(float(old[k]), float(new[k]), rel_tol=0, abs_tol=1e-6)]  # fmt: skip


def cmd_swap() -> int:
    from canopy_lit.report.archive import pack, unpack

    todo = rows()
    missing = [r for r, _, _ in todo if not (STAGE / r / "metrics.json").is_file()]
    if missing:
        print(f"not finished yet ({len(missing)}): {', '.join(missing)}; run `run` first", file=sys.stderr)
        return 1
    folder = RUNS / "recipe"
    unpack(ARCHIVE, folder)
    moved = {}
    for row, _, _ in todo:
        old = json.loads((folder / row / "metrics.json").read_text())
        new = json.loads((STAGE / row / "metrics.json").read_text())
        bad = in_domain_mismatches(old, new)
        if bad:
            print(f"{row}: in-domain test keys moved ({', '.join(bad[:5])}): not the row's test pass", file=sys.stderr)
            return 1
        moved[row] = {k: (old.get(k), new[k]) for k in ("test/tatqa/decision_accuracy", "test/tatqa/decision_accuracy_f0")}
        (folder / row / "metrics.json").write_text(json.dumps(merged(old, new), indent=2) + "\n")
    pack(folder)
    for row, keys in moved.items():
        print(row, "  ".join(f"{k.split('/', 2)[-1]} {100 * a:.1f} -> {100 * b:.1f}" for k, (a, b) in keys.items()))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=("run", "swap"))
    ap.add_argument("--only", default="", help="comma-separated rows (default: every row with an adapter)")
    ap.add_argument("--reverse", action="store_true", help="last row first (a second process beside a first)")
    args = ap.parse_args(argv)
    if args.command == "swap":
        return cmd_swap()
    return cmd_run([r for r in args.only.split(",") if r], args.reverse)


if __name__ == "__main__":
    sys.exit(main())
