"""Bring the committed archives' run folders to today's config shape once, so that no reader of old shapes remains.

    python experiments/migrate_run_records.py [--check]

What it rewrites in every ``experiments/runs/*.zip`` (run.json is not touched: every run has one, with choices):

- ``.hydra/config.yaml``: ``encoder._target_: canopy_lit.encoders.load_encoder`` becomes the class the factory
  built (``TextEncoder``; every such run used MiniLM or MPNet); ``_target_`` paths of moved classes become
  today's; the removed ``retrieval.scope`` key (null in every run) and ``datamodule.branching``
  (``${tree.branching}`` in every training run) are dropped; ``retrieval.candidate_ranking: bm25`` (a name, in
  runs of the corpus retriever, which never reads it) becomes today's ``BM25Ranking`` block; ``refine.scorer: f0``
  (the view before the ``scorer`` group) becomes that group's f0 node.
- ``metrics.json`` of a QA run recorded before ``eval/followup_duplicate_rate`` existed gains it, computed from
  its records as the report computed it (absent when no question had a round 2).
- the one adapter saved before the split record existed (``recipe/gold_sibling10_steps300/adapter_last``) gains
  its training run's split record (the same run as ``adapter/`` beside it).

``--check`` counts what would change and exits 1 if anything would.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from canopy_lit.eval.summary import duplicate_rates
from canopy_lit.report.archive import pack, unpack
from canopy_lit.report.runs import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
MOVED_TARGETS = {
    "canopy_lit.encoders.load_encoder": "canopy_lit.encoders.text.TextEncoder",
    "canopy_lit.pipeline.extractive.ExtractiveRefiner": "canopy_lit.refine.ExtractiveRefiner",
    "canopy_lit.eval.evidence.FlatMatchedRefiner": "canopy_lit.refine.FlatMatchedRefiner",
}
F0_SCORER = OmegaConf.load(ROOT / "configs" / "scorer" / "f0.yaml")
BM25_RANKING = {"_target_": "canopy_lit.pipeline.retrievers.BM25Ranking"}


def _retarget(node: Any) -> int:
    """Rewrite moved ``_target_`` paths anywhere under ``node``; the number rewritten."""
    changed = 0
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "_target_" and value in MOVED_TARGETS:
                node[key] = MOVED_TARGETS[value]
                changed += 1
            else:
                changed += _retarget(value)
    elif isinstance(node, list):
        changed += sum(_retarget(v) for v in node)
    return changed


def migrated_config(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """Today's shape of a run's config (interpolations kept), or None when it already has it."""
    changed = _retarget(cfg)
    encoder = cfg.get("encoder") or {}
    if encoder.get("_target_") == MOVED_TARGETS["canopy_lit.encoders.load_encoder"] and encoder.get("backbone") not in (
        "minilm", "mpnet"
    ):
        raise ValueError(f"load_encoder with backbone {encoder.get('backbone')!r}: not a text encoder")
    retrieval = cfg.get("retrieval") or {}
    if "scope" in retrieval:
        if retrieval.pop("scope") is not None:
            raise ValueError("retrieval.scope set: its run would need the retriever group it names")
        changed += 1
    if retrieval.get("candidate_ranking") == "bm25":
        retrieval["candidate_ranking"] = dict(BM25_RANKING)
        changed += 1
    if isinstance(retrieval.get("candidate_ranking"), str):
        raise ValueError(f"retrieval.candidate_ranking={retrieval['candidate_ranking']!r}: no migration written")
    datamodule = cfg.get("datamodule") or {}
    if "branching" in datamodule:
        if datamodule.pop("branching") != "${tree.branching}":
            raise ValueError("datamodule.branching is not ${tree.branching}")
        changed += 1
    refine = cfg.get("refine") or {}
    if "scorer" in refine:
        if refine.pop("scorer") != "f0" or cfg.get("scorer") is not None:
            raise ValueError("refine.scorer other than f0 beside no scorer group: no migration written")
        cfg["scorer"] = OmegaConf.to_container(F0_SCORER)
        changed += 1
    return cfg if changed else None


def migrated_metrics(run_dir: Path, metrics: dict[str, Any]) -> dict[str, Any] | None:
    """``metrics`` with ``eval/followup_duplicate_rate`` added (a QA run without it), or None."""
    if "eval/followup_duplicate_rate" in metrics or not any(k.startswith("eval/") for k in metrics):
        return None
    ok = [r for r in read_jsonl(run_dir / "predictions.jsonl") if r.get("status") == "ok"]
    rate = duplicate_rates(ok).get("followup_duplicate_rate")
    return None if rate is None else {**metrics, "eval/followup_duplicate_rate": rate}


def migrate_archive(archive: Path, write: bool) -> int:
    """Files changed in one archive (rewritten and repacked when ``write``)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = unpack(archive, Path(tmp) / archive.stem)
        changed = 0
        for config in sorted(folder.rglob(".hydra/config.yaml")):
            cfg = OmegaConf.to_container(OmegaConf.load(config), resolve=False)
            new = migrated_config(cfg)
            if new is not None:
                changed += 1
                config.write_text(OmegaConf.to_yaml(OmegaConf.create(new)))
        for path in sorted(folder.rglob("metrics.json")):
            new = migrated_metrics(path.parent, json.loads(path.read_text()))
            if new is not None:
                changed += 1
                path.write_text(json.dumps(new, indent=2, sort_keys=True))
        if write and changed:
            result = pack(folder)
            Path(result.archive).replace(archive)
    return changed


def migrate_adapter_split(write: bool) -> int:
    """The split record of the one adapter saved without it, copied from its run's other adapter."""
    run = ROOT / "experiments" / "runs" / "recipe" / "gold_sibling10_steps300"
    target, source = run / "adapter_last" / "encoder_fingerprint.json", run / "adapter" / "encoder_fingerprint.json"
    meta = json.loads(target.read_text())
    if "split" in meta:
        return 0
    if write:
        meta["split"] = json.loads(source.read_text())["split"]
        target.write_text(json.dumps(meta, indent=2) + "\n")
    return 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="only count what would change")
    args = ap.parse_args(argv)
    total = 0
    for archive in sorted((ROOT / "experiments" / "runs").glob("*.zip")):
        n = migrate_archive(archive, write=not args.check)
        total += n
        print(f"{archive.name}: {n} files {'to migrate' if args.check else 'migrated'}")
    n = migrate_adapter_split(write=not args.check)
    print(f"adapter split records: {n} {'to migrate' if args.check else 'migrated'}")
    total += n
    return 1 if args.check and total else 0


if __name__ == "__main__":
    sys.exit(main())
