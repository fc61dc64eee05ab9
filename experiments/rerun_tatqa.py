"""Rerun the committed TAT-QA probe runs under the current gold rule (resumable), then swap them into the archives.

    python experiments/rerun_tatqa.py run [--only probe,margin,selection_test,zeroshot_all]
    python experiments/rerun_tatqa.py swap    # once every rerun has its metrics.json

The TAT-QA gold rows changed with the one operand rule (issue 44, item 3): a derivation's formula constants
("/2", "*100") no longer mark rows gold. Every committed TAT-QA probe run counted against the old gold, and
``recipe.py`` pairs each TAT-QA test probe with ``probe/tatqa/f0`` over the same question set, so all eleven
test probes are rerun together (and the six whole-file zero-shot runs, which pair with their own f0).

``run`` reads each target run's recorded overrides from its archive and reruns it with the same overrides into
``experiments/runs/_rerun_tatqa/<study>/<run>`` (not committed). A run killed part way resumes there (evaluate.py
keeps each question's record and skips it on the next start); a finished one is left as it is. ``swap``
unpacks each archive, replaces the old run folders by the reruns and packs the archive again; then run
``python experiments/refresh.py`` for the tables.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "experiments" / "runs"
STAGE = RUNS / "_rerun_tatqa"
# study archive -> the prefix of its TAT-QA run folders (every run.json under it with data=tatqa is rerun)
TARGETS = {
    "probe": "tatqa/",
    "margin": "test/ftheta_base/",
    "selection_test": "",
    "zeroshot_all": "",
    # evidence runs: gold recall follows from the new gold, answer recall needs the evidence text again
    "frontier": "",
    "frontier_val": "",
    "evidence_ftheta": "",
}
# hydra keys of the original command that name its folder, not the run
DROPPED = ("hydra.", "progress=")


def targets(studies: list[str]) -> list[tuple[str, str, list[str]]]:
    """(study, run folder inside the archive, overrides) of every TAT-QA run the archives hold, in order."""
    out = []
    for study in studies:
        with zipfile.ZipFile(RUNS / f"{study}.zip") as zf:
            for name in sorted(zf.namelist()):
                if not (name.endswith("/run.json") and name.startswith(TARGETS[study])):
                    continue
                record = json.loads(zf.read(name))
                if record.get("benchmark") != "tatqa":
                    continue
                overrides = [o for o in record["overrides"] if not o.startswith(DROPPED)]
                out.append((study, name[: -len("/run.json")], overrides))
    return out


def cmd_run(studies: list[str]) -> int:
    todo = targets(studies)
    for i, (study, run, overrides) in enumerate(todo, 1):
        folder = STAGE / study / run
        if (folder / "metrics.json").is_file():
            print(f"[{i}/{len(todo)}] {study}/{run}: done", flush=True)
            continue
        # quoted: a sweep folder's name holds "," and "=", which Hydra's grammar would read as a sweep
        cmd = [sys.executable, "evaluate.py", *overrides, "progress=false", f"hydra.run.dir='{folder}'"]
        print(f"[{i}/{len(todo)}] {study}/{run}: {' '.join(cmd[1:])}", flush=True)
        start = time.monotonic()
        res = subprocess.run(cmd, cwd=ROOT)
        if res.returncode != 0:
            print(f"{study}/{run}: exit {res.returncode}; rerun this command to resume it", file=sys.stderr)
            return res.returncode
        print(f"[{i}/{len(todo)}] {study}/{run}: {time.monotonic() - start:.0f} s", flush=True)
    return 0


def cmd_swap(studies: list[str]) -> int:
    from canopy_lit.report.archive import pack, unpack

    todo = targets(studies)
    missing = [f"{s}/{r}" for s, r, _ in todo if not (STAGE / s / r / "metrics.json").is_file()]
    if missing:
        print(f"not finished yet ({len(missing)}): {', '.join(missing)}; run `run` first", file=sys.stderr)
        return 1
    for study in studies:
        folder = RUNS / study
        if not folder.is_dir():
            unpack(RUNS / f"{study}.zip")
        for s, run, _ in todo:
            if s != study:
                continue
            shutil.rmtree(folder / run, ignore_errors=True)
            shutil.copytree(STAGE / s / run, folder / run)
        pack(folder)
        print(f"{study}: {sum(s == study for s, _, _ in todo)} runs swapped, {study}.zip packed")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=("run", "swap"))
    ap.add_argument("--only", default=",".join(TARGETS), help="comma-separated studies (default: all)")
    args = ap.parse_args(argv)
    studies = [s for s in args.only.split(",") if s]
    unknown = sorted(set(studies) - set(TARGETS))
    if unknown:
        ap.error(f"unknown studies {unknown}; choose from {sorted(TARGETS)}")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return cmd_run(studies) if args.command == "run" else cmd_swap(studies)


if __name__ == "__main__":
    sys.exit(main())
