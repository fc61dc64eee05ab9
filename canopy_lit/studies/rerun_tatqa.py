"""Rerun the committed TAT-QA probe runs under the current gold rule (resumable), then swap them into the archives.

    python -m canopy_lit.studies.rerun_tatqa run [--only probe,margin,selection_test,zeroshot_all]
    python -m canopy_lit.studies.rerun_tatqa run --changed-only --only frontier,frontier_val,evidence_ftheta
    python -m canopy_lit.studies.rerun_tatqa swap    # once every rerun has its metrics.json

The TAT-QA gold rows changed with the one operand rule (issue 44, item 3): a derivation's formula constants
("/2", "*100") no longer mark rows gold. Every committed TAT-QA probe run counted against the old gold, and
``recipe.py`` pairs each TAT-QA test probe with ``probe/tatqa/f0`` over the same question set, so all eleven
test probes are rerun together (and the six whole-file zero-shot runs, which pair with their own f0).

``run`` reads each target run's recorded overrides from its archive and reruns it with the same overrides into
``experiments/runs/_rerun_tatqa/<study>/<run>`` (not committed). A run killed part way resumes there (evaluate.py
keeps each question's record and skips it on the next start); a finished one is left as it is. ``--changed-only`` (for the evidence runs, whose records hold what each question delivered) starts each rerun
from a copy of the committed run folder less the records the new rule changes (their answer needles, or the
gold leaves their delivered ranges cover, differ from what the record holds): evaluate.py resumes the folder
and answers only those questions again, under the same settings (it refuses a folder made with other
settings), then writes metrics.json over all records. ``swap``
unpacks each archive, replaces the old run folders by the reruns and packs the archive again; then run
``python -m canopy_lit.studies.refresh`` for the tables.
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

from omegaconf import OmegaConf

from canopy_lit.studies import PROJECT_ROOT as ROOT

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


ORIGINAL_AXES = ".run.json.orig"  # the committed run.json of a --changed-only rerun, for restore_axes


def restore_axes(folder: Path) -> None:
    """run.json of an in-process rerun keeps the committed run's Hydra choices, overrides and the axes read
    from them (``variant``): a config composed outside Hydra's CLI has no choices to record."""
    original = folder / ORIGINAL_AXES
    if not original.is_file():
        return
    old, new = json.loads(original.read_text()), json.loads((folder / "run.json").read_text())
    merged = {**new, **{k: v for k, v in old.items() if new.get(k) is None}}
    (folder / "run.json").write_text(json.dumps(merged, indent=2, ensure_ascii=False) + "\n")


def sort_records(folder: Path) -> None:
    """predictions.jsonl in the run's question order (question_ids.json): the re-answered records were
    appended last, and a committed run reads the same whichever order it was answered in."""
    position = {str(q): i for i, q in enumerate(json.loads((folder / "question_ids.json").read_text()))}
    preds = folder / "predictions.jsonl"
    lines = [line for line in preds.read_text(encoding="utf-8").splitlines() if line.strip()]
    lines.sort(key=lambda line: position.get(str(json.loads(line)["id"]), len(position)))
    preds.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def changed_records(records: list[dict], questions: dict) -> set[str]:
    """Ids of the evidence records the current TAT-QA reader changes: other answer needles, or other
    (gold leaves kept, gold leaves) over the ranges the record delivered."""
    from canopy_lit.eval.answers import answer_needles, gold_leaf_counts

    changed = set()
    for rec in records:
        q, ev = questions.get(str(rec["id"])), rec.get("evidence") or {}
        if q is None:  # no longer a question of the benchmark: its record is not counted either way
            continue
        delivered = {k["item_id"]: k["delivered_ranges"] for rd in rec.get("rounds", []) for k in rd.get("kept", [])}
        hit, total = gold_leaf_counts(q.gold, delivered)
        if answer_needles(q) != ev.get("answer_needles") or (hit, total) != (ev.get("gold_leaves_kept"), ev.get("gold_leaves")):
            changed.add(str(rec["id"]))
    return changed


def stage_changed_only(study: str, run: str, folder: Path, questions: dict) -> int:
    """``folder`` = the committed run folder less the records ``changed_records`` names; how many it dropped."""
    with zipfile.ZipFile(RUNS / f"{study}.zip") as zf:
        members = [n for n in zf.namelist() if n.startswith(run + "/") and not n.endswith("/")]
        shutil.rmtree(folder, ignore_errors=True)
        for name in members:
            target = folder / name[len(run) + 1 :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(name))
    shutil.copy(folder / "run.json", folder / ORIGINAL_AXES)
    preds = folder / "predictions.jsonl"
    records = [json.loads(line) for line in preds.read_text(encoding="utf-8").splitlines() if line.strip()]
    changed = changed_records(records, questions)
    kept = [line for line, rec in zip(preds.read_text(encoding="utf-8").splitlines(), records) if str(rec["id"]) not in changed]
    preds.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    (folder / "metrics.json").unlink()  # written again by the resumed run, over every record
    return len(changed)


def evaluate_in_process(overrides: list[str], folder: Path) -> None:
    """``python evaluate.py OVERRIDES hydra.run.dir=FOLDER progress=false`` in this process (as a Hydra
    multirun runs its jobs: the encoder and the reader's tokenizer load once for every run)."""
    from hydra import compose, initialize_config_dir

    from canopy_lit.evaluate import run
    from canopy_lit.schema import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("evaluate", overrides=[*overrides, "progress=false", "print_config=false"])
    cli_paths = {key: OmegaConf.to_container(cfg.paths, resolve=False)[key] for key in CLI_PATH_KEYS}
    cfg.paths.root_dir = str(ROOT)
    cfg.paths.output_dir = str(folder)
    run(cfg)
    restore_cli_paths(folder, cli_paths)


# Set to this machine's folders for an in-process run (Hydra's resolvers are not there to fill them); the
# recorded config gets the CLI's interpolations back, so no committed record names the machine.
CLI_PATH_KEYS = ("root_dir", "output_dir")


def restore_cli_paths(folder: Path, cli_paths: dict[str, str]) -> None:
    """``.hydra/config.yaml`` of an in-process rerun records ``paths.*`` as a CLI run does (``cli_paths``)."""
    recorded = folder / ".hydra" / "config.yaml"
    if not recorded.is_file():
        return
    cfg = OmegaConf.load(recorded)
    for key, value in cli_paths.items():
        cfg.paths[key] = value
    OmegaConf.save(cfg, recorded, resolve=False)


def cmd_run(studies: list[str], changed_only: bool = False) -> int:
    todo = targets(studies)
    questions = {}
    if changed_only:
        from canopy_lit.data import load_benchmark

        questions = {str(q.id): q for q in load_benchmark("tatqa").questions}
    for i, (study, run, overrides) in enumerate(todo, 1):
        folder = STAGE / study / run
        if (folder / "metrics.json").is_file():
            print(f"[{i}/{len(todo)}] {study}/{run}: done", flush=True)
            continue
        if changed_only and not (folder / ".changed_only").is_file():
            dropped = stage_changed_only(study, run, folder, questions)
            (folder / ".changed_only").write_text(f"{dropped}\n")
            print(f"[{i}/{len(todo)}] {study}/{run}: {dropped} records to answer again", flush=True)
        start = time.monotonic()
        if changed_only:  # a handful of questions a run: in this process, so the models load once
            print(f"[{i}/{len(todo)}] {study}/{run}: evaluate.py {' '.join(overrides)}", flush=True)
            evaluate_in_process(overrides, folder)
            restore_axes(folder)
            sort_records(folder)
        else:
            # quoted: a sweep folder's name holds "," and "=", which Hydra's grammar would read as a sweep
            cmd = [sys.executable, "evaluate.py", *overrides, "progress=false", f"hydra.run.dir='{folder}'"]
            print(f"[{i}/{len(todo)}] {study}/{run}: {' '.join(cmd[1:])}", flush=True)
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
            shutil.copytree(STAGE / s / run, folder / run, ignore=shutil.ignore_patterns(".changed_only", ORIGINAL_AXES))
        pack(folder)
        print(f"{study}: {sum(s == study for s, _, _ in todo)} runs swapped, {study}.zip packed")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=("run", "swap"))
    ap.add_argument("--only", default=",".join(TARGETS), help="comma-separated studies (default: all)")
    ap.add_argument("--changed-only", action="store_true", help="resume each committed run less its changed records")
    args = ap.parse_args(argv)
    studies = [s for s in args.only.split(",") if s]
    unknown = sorted(set(studies) - set(TARGETS))
    if unknown:
        ap.error(f"unknown studies {unknown}; choose from {sorted(TARGETS)}")
    return cmd_run(studies, args.changed_only) if args.command == "run" else cmd_swap(studies)


if __name__ == "__main__":
    sys.exit(main())
