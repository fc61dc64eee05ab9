#!/usr/bin/env bash
# The main job on the embedded default, on a CPU laptop with no internet:
#   set up -> train the quickstart LoRA node encoder on bundled data -> refinement probe (f0 vs fθ)
#   -> evaluate canopy, vanilla and canopy w/o projection on bundled HotpotQA, NQ, OTT-QA, TAT-QA
#   -> print the table.
# Every step resumes: rerun the script after an interruption and finished work is skipped.
# Knobs (environment): OUT (output folder), N (questions per benchmark), SKIP_SETUP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/quickstart}
N=${N:-8}

[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate

# 1. Train (skipped when the adapter exists).
if [ ! -f "$OUT/train/adapter/adapter_config.json" ]; then
  python train.py experiment=quickstart hydra.run.dir="$OUT/train"
fi
ADAPTER=$(realpath "$OUT/train/adapter")

# 2. Refinement probe on the HotpotQA dev file (no LLM): f0 vs fθ.
# Each probe is skipped when its metrics.json exists (a finished run), like the other steps.
[ -f "$OUT/probe/f0/metrics.json" ] ||
  python evaluate.py experiment=probe data=hotpotqa data.split=test encoder.adapter=null hydra.run.dir="$OUT/probe/f0" progress=false
[ -f "$OUT/probe/ftheta/metrics.json" ] ||
  python evaluate.py experiment=probe data=hotpotqa data.split=test encoder.adapter="$ADAPTER" hydra.run.dir="$OUT/probe/ftheta" progress=false

# 3. End-to-end QA with the local Qwen2.5-1.5B as critic and reader.
for bench in hotpotqa nq ottqa tatqa; do
  for variant in "canopy:method=canopy" "vanilla:method=vanilla" "canopy_keep_whole:method=canopy refine=keep_whole"; do
    name=${variant%%:*}
    # shellcheck disable=SC2086
    python evaluate.py experiment=quickstart_eval data="$bench" limit="$N" ${variant#*:} \
      encoder.adapter="$ADAPTER" hydra.run.dir="$OUT/eval/$bench/$name"
  done
done

# 4. Tables (markdown + CSV) from the run folders.
python -m canopy_lit.report tables "$OUT/eval" "$OUT/probe" --study quickstart --out "$OUT/tables"
cat "$OUT/tables/quickstart.md"
