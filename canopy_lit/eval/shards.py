"""Which run folders of ``shard=I/N`` evaluations (``canopy_lit.data.shards``) make one run, for a merge.

A shard's run folder names its shard in run.json (``"shard": "I/N"``; an unsharded run's has no such key).
``shard`` is no setting (settings.json leaves it out, as it does ``limit``), so the shards of one run hold
equal settings.json files and equal run.json files but for that key. ``check_shards`` refuses, one line
each: a folder that is not a shard, a shard given twice, a missing shard, and shards made with other settings
or another ``limit``; ``canopy_lit.evaluate.merge_shards`` checks their questions and records and merges them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from canopy_lit.data.shards import Shard
from canopy_lit.eval.harness import read_question_ids
from canopy_lit.eval.records import RUN_FILE, SETTINGS_FILE, read_predictions, read_run_axes
from canopy_lit.io import atomic_write_text, naming

SHARD_AXIS = "shard"  # the run.json key naming a shard folder's shard
MERGED_FILE = "merged_shards.json"  # in a merged run folder: the shard folders it was merged from


class ShardMergeError(ValueError):
    """Shard folders that cannot be merged into one run; the message (one line) says which and why."""


@dataclass(frozen=True)
class ShardFolder:
    """A shard's run folder as recorded: ``axes`` is its run.json without ``shard``, ``settings`` its
    settings.json."""

    path: Path
    shard: Shard
    axes: dict[str, Any]
    settings: dict[str, Any]


def recorded_shard(run_dir: str | Path) -> str | None:
    """The shard run.json names (None: an unsharded run, or no run.json yet)."""
    try:
        axes = read_run_axes(run_dir)
    except ValueError:
        return None  # a garbled run.json is rewritten by the run that claims the folder
    shard = (axes or {}).get(SHARD_AXIS)
    return None if shard is None else str(shard)


def write_shard_axis(run_dir: str | Path, shard: Shard | None) -> None:
    """Add ``"shard": "I/N"`` to ``run_dir``'s run.json (just written by ``write_run_axes``); nothing for None."""
    if shard is None:
        return
    path = Path(run_dir) / RUN_FILE
    axes = read_run_axes(run_dir) or {}
    with naming(path):
        atomic_write_text(path, json.dumps({**axes, SHARD_AXIS: str(shard)}, indent=2, ensure_ascii=False) + "\n")


def _json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ShardMergeError(f"{path.parent}: not an evaluation run folder (no {path.name})") from None
    except (OSError, ValueError) as err:
        raise ShardMergeError(f"{path}: unreadable ({err})") from None
    if not isinstance(doc, dict):
        raise ShardMergeError(f"{path}: expected a JSON object")
    return doc


def read_shard_folder(run_dir: str | Path) -> ShardFolder:
    """The shard folder at ``run_dir``.

    Raises:
        ShardMergeError: no such folder, no run.json / settings.json, or a run.json without a shard.
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise ShardMergeError(f"{path}: no such run folder")
    axes = _json(path / RUN_FILE)
    spec = axes.pop(SHARD_AXIS, None)
    if spec is None:
        raise ShardMergeError(f"{path}: not a shard (its run.json names no shard; shards run with shard=I/N)")
    try:
        shard = Shard.parse(spec)
    except ValueError as err:
        raise ShardMergeError(f"{path / RUN_FILE}: {err}") from None
    assert shard is not None
    return ShardFolder(path, shard, axes, _json(path / SETTINGS_FILE))


def _flat(tree: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 48 else text[:45] + "..."


def _difference(a: ShardFolder, b: ShardFolder) -> str | None:
    """The first setting (settings.json) or axis (run.json: ``limit``, labels) in which ``a`` and ``b`` differ."""
    absent = "<absent>"
    for what_a, what_b in (
        ({k: v for k, v in a.settings.items() if k != "fingerprint"}, {k: v for k, v in b.settings.items() if k != "fingerprint"}),
        (a.axes, b.axes),
    ):  # fmt: skip
        flat_a, flat_b = dict(_flat(what_a)), dict(_flat(what_b))
        for key in sorted(flat_a.keys() | flat_b.keys()):
            va, vb = flat_a.get(key, absent), flat_b.get(key, absent)
            if va != vb:
                key = key.removeprefix("settings.")
                return f"{key} {_shown(va) if va is not absent else va} vs {_shown(vb) if vb is not absent else vb}"
    return None


def check_shards(folders: Sequence[ShardFolder]) -> list[ShardFolder]:
    """``folders`` as the complete shards of one run, in shard order.

    Raises:
        ShardMergeError: no folder; shards of different counts N; a shard given twice (or one folder twice);
            a missing shard; two shards made with other settings or another ``limit`` (the first key named).
    """
    if not folders:
        raise ShardMergeError("no shard folders given")
    first = folders[0]
    by_index: dict[int, ShardFolder] = {}
    for f in folders:
        if f.shard.count != first.shard.count:
            raise ShardMergeError(f"{first.path} is shard {first.shard} but {f.path} is shard {f.shard}: "
                                  "the shards of one run share N")  # fmt: skip
        seen = by_index.get(f.shard.index)
        if seen is not None:
            raise ShardMergeError(f"shard {f.shard} given twice: {seen.path} and {f.path}")
        by_index[f.shard.index] = f
    n = first.shard.count
    missing = [f"{i}/{n}" for i in range(n) if i not in by_index]
    if missing:
        given = ", ".join(f"{f.shard} ({f.path})" for f in sorted(folders, key=lambda f: f.shard.index))
        raise ShardMergeError(f"shard {', '.join(missing)} missing: merging needs all {n} shards (given: {given})")
    ordered = [by_index[i] for i in range(n)]
    for f in ordered[1:]:
        diff = _difference(ordered[0], f)
        if diff is not None:
            raise ShardMergeError(f"{ordered[0].path} and {f.path} were run with other settings: {diff}; the shards "
                                  "of one run share every setting and limit")  # fmt: skip
    return ordered


def shard_records(folders: Sequence[ShardFolder], ids: Sequence[str]) -> list[dict[str, Any]]:
    """The records of the questions ``ids`` (the unsharded run's, in its order) from the shards that ran them.

    Raises:
        ShardMergeError: a shard ran other questions than its part of ``ids`` (the data or its reading changed
            since), or has no record of one of its questions (it has not finished).
    """
    by_id: dict[str, dict[str, Any]] = {}
    for f in folders:
        mine = f.shard.select(ids)
        ran = read_question_ids(f.path)
        if ran is not None and ran != mine:
            raise ShardMergeError(
                f"{f.path}: shard {f.shard} ran other questions ({len(ran)}) than shard {f.shard} of the run's "
                f"{len(ids)} questions now ({len(mine)}): the data changed since; rerun that shard"
            )
        recs = {str(r["id"]): r for r in read_predictions(f.path / "predictions.jsonl")}
        missing = [i for i in mine if i not in recs]
        if missing:
            raise ShardMergeError(
                f"{f.path}: shard {f.shard} is unfinished: {len(missing)} of its {len(mine)} questions have no "
                f"record (first: {missing[0]!r}); rerun its command to finish it"
            )
        by_id.update((i, recs[i]) for i in mine)
    return [by_id[i] for i in ids]


def unsharded_overrides(overrides: Any) -> list[str]:
    """Hydra's task overrides but ``shard=`` (``+shard=``, ``++shard=`` ...)."""
    return [str(o) for o in overrides or [] if str(o).lstrip("+~").split("=", 1)[0] != SHARD_AXIS]


def _hydra_files(first: Path, out: Path) -> dict[str, str]:
    """The shard's ``.hydra/`` files as the unsharded run's: ``shard: null``, no ``shard=`` override, the
    merged folder as the output folder (Hydra's YAML writer, as Hydra writes them)."""
    files: dict[str, str] = {}
    for name in ("config.yaml", "overrides.yaml", "hydra.yaml"):
        path = first / ".hydra" / name
        if not path.is_file():
            continue
        doc = OmegaConf.load(path)
        if name == "config.yaml" and isinstance(doc, DictConfig):
            doc[SHARD_AXIS] = None
        elif name == "overrides.yaml":
            doc = OmegaConf.create(unsharded_overrides(OmegaConf.to_container(doc)))
        elif isinstance(doc, DictConfig):
            task = OmegaConf.select(doc, "hydra.overrides.task", throw_on_resolution_failure=False)
            if task is not None:
                doc.hydra.overrides.task = unsharded_overrides(OmegaConf.to_container(task))
            for key in ("hydra.runtime.output_dir", "hydra.run.dir"):
                if OmegaConf.select(doc, key, throw_on_resolution_failure=False) is not None:
                    OmegaConf.update(doc, key, str(out.resolve()))
        files[f".hydra/{name}"] = OmegaConf.to_yaml(doc)
    return files


def write_merged_folder(out: Path, folders: Sequence[ShardFolder], records: Sequence[dict[str, Any]]) -> None:
    """What the unsharded run records before its metrics, from the shards: predictions.jsonl (``records``, in
    question order), settings.json, run.json without ``shard``, ``.hydra/`` (``_hydra_files``), the shards'
    cached judge verdicts (judgements.jsonl), and ``MERGED_FILE`` naming the shards."""
    first = folders[0]
    files = {
        "predictions.jsonl": "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
        SETTINGS_FILE: (first.path / SETTINGS_FILE).read_text(encoding="utf-8"),
        RUN_FILE: json.dumps(first.axes, indent=2, ensure_ascii=False) + "\n",
        MERGED_FILE: json.dumps({"shards": [{"shard": str(f.shard), "run_dir": str(f.path)} for f in folders],
                                 "questions": len(records)}, indent=1) + "\n",  # fmt: skip
        **_hydra_files(first.path, out),
    }
    verdicts = [p.read_text(encoding="utf-8") for f in folders if (p := f.path / "judgements.jsonl").is_file()]
    whole = "".join(v[: v.rfind("\n") + 1] for v in verdicts)  # a torn last line is no verdict
    if whole:
        files["judgements.jsonl"] = whole
    for name, text in files.items():
        path = out / name
        with naming(path):
            atomic_write_text(path, text)
