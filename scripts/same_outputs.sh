#!/usr/bin/env bash
# Runs a fixed set of small runs into OUT, so two checkouts can be compared output for output:
#   bash scripts/same_outputs.sh OUT_A          # in checkout A (e.g. a worktree of the last release)
#   bash scripts/same_outputs.sh OUT_B          # in checkout B
#   python scripts/same_outputs.py OUT_A OUT_B  # every metric and per-question row equal, timings aside
# The set: QA with the critic loop (llama.cpp SmolLM2), the refinement probe, the evidence evaluation
# (CANOPY fθ and flat at matched tokens), CARVE's method comparison, a training fast_dev_run and
# ``canopy_lit.compress`` on bundled HotpotQA and TAT-QA items (with and without a budget).
set -euo pipefail
OUT=$(realpath -m "${1:?usage: same_outputs.sh OUT}")
PY=${PYTHON:-python}
ADAPTER=experiments/runs/recipe/base/adapter
mkdir -p "$OUT"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
$PY evaluate.py data=hotpotqa data.split=test method=canopy llm=llamacpp_smollm2 retriever=candidates \
  retrieval.k=3 limit=3 encoder=minilm encoder.adapter=$ADAPTER progress=false hydra.run.dir="$OUT/qa"
$PY evaluate.py experiment=probe data=hotpotqa limit=20 encoder.adapter=$ADAPTER progress=false \
  hydra.run.dir="$OUT/probe"
for refine in parent_relative flat_matched; do
  $PY evaluate.py experiment=evidence data=ottqa limit=20 refine=$refine encoder.adapter=$ADAPTER \
    progress=false hydra.run.dir="$OUT/evidence_$refine"
done
$PY -m canopy_lit.carve compare --triples data/fixtures/vragbench_bundled_clips.jsonl \
  --video-root data/media/video --out "$OUT/carve" llm=llamacpp_smollm2 llm.n_threads=1 \
  carve/summariser=captions carve.summariser.path=data/fixtures/vragbench_bundled_captions.jsonl
$PY train.py experiment=quickstart debug=fdr logger=csv paths.output_dir="$OUT/train" \
  hydra.run.dir="$OUT/train" 2>&1 | tee "$OUT/train.log"
$PY - "$OUT/compress" "$ADAPTER" <<'PYEOF'
import json
import sys
from pathlib import Path

import canopy_lit
from canopy_lit.data import load_split

out, adapter = Path(sys.argv[1]), sys.argv[2]
out.mkdir(parents=True, exist_ok=True)
with (out / "records.jsonl").open("w", encoding="utf-8") as fh:
    for name, path in (("hotpotqa", "data/hotpotqa/hotpot_dev_distractor_100.json"),
                       ("tatqa", "data/tatqa/tatqa_dataset_dev.json")):
        bench, questions = load_split(name, path, split="test")
        for q in questions[:5]:
            items = [bench.items[i] for i in bench.candidates[q.id]][:5]
            for budget in (None, 120):
                ev = canopy_lit.compress(q.text, items, adapter=adapter, budget=budget, max_item_chars=None)
                regions = [[r.item_id, r.start, r.end, round(r.score, 6)] for r in ev.regions]
                fh.write(json.dumps({"question": q.id, "budget": budget, "blocks": ev.blocks, "tokens": ev.tokens,
                                     "cut": ev.cut, "regions": regions}) + "\n")
PYEOF
