#!/usr/bin/env bash
# The main job on the embedded default, on a CPU laptop with no internet:
#   1. set up (venv, CPU torch, the package, sha256-pinned offline models)
#   2. train the quickstart LoRA node encoder (HotpotQA + NQ + OTT-QA; TAT-QA tested zero-shot)
#   3. refinement probe on the HotpotQA test split: f0 vs fθ (decision accuracy, gold recall)
#   4. evidence evaluation, no LLM, on the full test splits of HotpotQA, NQ, OTT-QA and TAT-QA:
#      canopy fθ, canopy f0, keep-whole and flat leaves at canopy's token count (k = 5, B = 2)
#   5. a small LLM demonstration: canopy vs vanilla on N HotpotQA test questions (Qwen2.5-1.5B)
#   6. the tables.
# Every step resumes: rerun the script after an interruption and finished work is skipped.
# Wall time per step goes to $OUT/timings.tsv. The large paired LLM comparison is its own command
# (scripts/paired.sh, hours on a CPU).
# Knobs (environment): OUT (output folder), N (demo questions, default 3), SKIP_SETUP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/quickstart}
N=${N:-3}
mkdir -p "$OUT"
T0=$(date +%s)
step() {  # step NAME: log the wall time since the previous step
  local now; now=$(date +%s)
  printf '%s\t%s\n' "$1" "$((now - T0))" >> "$OUT/timings.tsv"
  T0=$now
}

[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
step setup

# 2. Train (skipped when the adapter exists).
if [ ! -f "$OUT/train/adapter/adapter_config.json" ]; then
  python train.py experiment=quickstart hydra.run.dir="$OUT/train"
fi
ADAPTER=$(realpath "$OUT/train/adapter")
step train

# 3. Refinement probe on the HotpotQA test split (no LLM): f0 vs fθ.
# Each probe is skipped when its metrics.json exists (a finished run), like the other steps.
[ -f "$OUT/probe/f0/metrics.json" ] ||
  python evaluate.py experiment=probe data=hotpotqa data.split=test encoder.adapter=null hydra.run.dir="$OUT/probe/f0" progress=false
[ -f "$OUT/probe/ftheta/metrics.json" ] ||
  python evaluate.py experiment=probe data=hotpotqa data.split=test encoder.adapter="$ADAPTER" hydra.run.dir="$OUT/probe/ftheta" progress=false
step probe

# 4. Evidence without an LLM (one multirun; each run resumes its questions).
[ -f "$OUT/evidence/.done" ] || {
  python evaluate.py -m +ablation=evidence adapter="$ADAPTER" variant=full,f0,no_projection,flat_matched \
    retrieval.k=5 tree.branching=2 data=hotpotqa,nq,ottqa,tatqa hydra.sweep.dir="$OUT/evidence" progress=false
  mkdir -p "$OUT/evidence" && touch "$OUT/evidence/.done"
}
step evidence

# 5. End-to-end QA demonstration with the local Qwen2.5-1.5B as critic and reader (each question's own
# delivered items as the pool: retriever=candidates; the paired comparison uses the unified corpus).
for variant in "canopy:method=canopy" "vanilla:method=vanilla"; do
  name=${variant%%:*}
  # shellcheck disable=SC2086
  python evaluate.py experiment=quickstart_eval data=hotpotqa limit="$N" ${variant#*:} \
    encoder.adapter="$ADAPTER" hydra.run.dir="$OUT/eval/hotpotqa/$name" progress=false
done
step qa

# 6. Tables (markdown + CSV) from the run folders.
python -m canopy_lit.report tables "$OUT/evidence" --study evidence --out "$OUT/tables"
python -m canopy_lit.report tables "$OUT/eval" "$OUT/probe" --study quickstart --out "$OUT/tables"
step tables
cat "$OUT/tables/evidence.md" "$OUT/tables/quickstart.md"
echo "wall time per step (s):" && cat "$OUT/timings.tsv"
