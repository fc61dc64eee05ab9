#!/usr/bin/env bash
# The scorer study (issue "a compressor worth using"): fθ trained with other node poolings, on the frontier
# beside today's per-node fθ and f0 (scripts/frontier.sh).
#   late   each item encoded once, every node pooled from that forward (late chunking)
#   cross  each node read after the question, [CLS] q [SEP] node [SEP] (a cross-encoder; not cacheable)
# For each pooling in POOLINGS:
#   1. train.py: the quickstart recipe's `base` row (150 steps, the recipe table's data, seed and test subsets)
#      through that pooling's forward -> experiments/runs/scorers/<pooling>_base (adapter, metrics, test pass);
#   2. validation frontier (first VAL_LIMIT questions of each in-domain val split): CANOPY fθ over δ, k = 5,
#      into experiments/runs/frontier_val (run folders named by the pooling, so they never mix with per-node
#      fθ's); `python -m canopy_lit.studies.frontier choose` then picks each pooling's δ like fθ's;
#   3. test (full splits): CANOPY fθ and flat leaves at CANOPY's tokens over δ, into experiments/runs/frontier.
# Every step resumes: a trained adapter is not retrained and every sweep skips its finished run folders, so
# the script can be stopped and rerun. STEPS="train val" (or "test") runs some steps only. Then
#   python -m canopy_lit.report pack experiments/runs/frontier_val experiments/runs/frontier
#   python -m canopy_lit.studies.frontier      # figures and tables, the scorers beside fθ and f0
# Archives packed before they kept settings.json (every one committed up to issue 47's close) hold runs with
# results but no settings: a rerun refuses them, naming settings.json. RESUME=force continues them under
# today's settings (the folder then records those); RESUME=auto (default) continues only same-settings runs.
set -euo pipefail
cd "$(dirname "$0")/.."
POOLINGS=${POOLINGS:-late cross}
STEPS=${STEPS:-train val test}
VAL_LIMIT=${VAL_LIMIT:-100}
BENCHMARKS=${BENCHMARKS:-hotpotqa,nq,ottqa,tatqa}
VAL_BENCHMARKS=${VAL_BENCHMARKS:-hotpotqa,nq,ottqa}
DELTAS=${DELTAS:-0,0.01,0.02,0.03,0.04,0.06,0.08,0.12}
PY=${PY:-.venv/bin/python}
RESUME=${RESUME:-auto}
# the recipe table's test subsets (experiments/recipe.md): every NQ question, a seeded 80 OTT-QA and 126 TAT-QA
TESTSETS="datamodule.options.nq.max_questions.test=null datamodule.options.ottqa.max_questions.test=80
  datamodule.options.tatqa.max_questions.test=126"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
VAL=experiments/runs/frontier_val
TEST=experiments/runs/frontier
for archive in "$VAL.zip" "$TEST.zip"; do
  [ ! -f "$archive" ] || "$PY" -m canopy_lit.report unpack --if-stale "$archive"
done
has() { [[ " $STEPS " == *" $1 "* ]]; }

for pooling in $POOLINGS; do
  run=experiments/runs/scorers/${pooling}_base
  if has train && [ ! -f "$run/adapter/adapter_config.json" ]; then
    "$PY" train.py experiment=quickstart encoder.node_pooling="$pooling" trainer.max_time=null trainer.max_steps=150 \
      trainer.val_check_interval=50 $TESTSETS threads=1 hydra.run.dir="$run"
  fi
  sweep() {
    "$PY" evaluate.py -m +ablation=frontier adapter="$run/adapter" encoder.node_pooling="$pooling" scorer=ftheta \
      progress=false resume="$RESUME" "$@"
  }
  if has val; then
    sweep data.split=val limit="$VAL_LIMIT" data="$VAL_BENCHMARKS" refine.descend_margin="$DELTAS" variant=full \
      hydra.sweep.dir=$VAL
  fi
  if has test; then
    sweep data="$BENCHMARKS" refine.descend_margin="$DELTAS" variant=full,flat_matched hydra.sweep.dir=$TEST
  fi
done
if has val; then "$PY" -m canopy_lit.studies.frontier choose; fi
