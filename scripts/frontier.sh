#!/usr/bin/env bash
# The frontier study (no LLM): answer recall against evidence tokens on the four bundled benchmarks.
#   1. validation (first VAL_LIMIT questions of each in-domain val split): CANOPY fθ and f0 over δ and keep-whole
#      at k = 5 (HotpotQA's val split has 8 questions: the rest of its train file trained the adapter);
#   2. the operating point: per in-domain benchmark and scorer, the δ whose validation tokens are 72-86% of
#      keep-whole's, and the budgets' δs (40 / 60 / 80%); zero-shot TAT-QA takes the median of the in-domain
#      choices, so its own data never enters (python -m canopy_lit.studies.frontier choose ->
#      experiments/tables/frontier_operating_point.json; the archive's TAT-QA validation runs, made before
#      that rule, are not read for it);
#   3. test (full splits): CANOPY fθ / f0 and flat leaves at CANOPY's tokens over δ (k = 5), the same over
#      k in {3, 10} at the operating point, keep-whole over k in {1, 2, 3, 5, 10}, flat top-m and
#      extractive over m (k = 5); LongLLMLingua over its rate ρ (HotpotQA, NQ); CANOPY fθ with item drop over the
#      item margin at the operating point.
# Every sweep resumes its run folders, so the script can be stopped and rerun. Then
#   python -m canopy_lit.report pack experiments/runs/frontier_val experiments/runs/frontier
#   python -m canopy_lit.studies.frontier       # figures, tables, the README headline block
#
#   ADAPTER=experiments/runs/recipe/base/adapter bash scripts/frontier.sh
# Archives packed before they kept settings.json (every one committed up to issue 47's close) hold runs with
# results but no settings: a rerun refuses them, naming settings.json. RESUME=force continues them under
# today's settings (the folder then records those); RESUME=auto (default) continues only same-settings runs.
set -euo pipefail
cd "$(dirname "$0")/.."
ADAPTER=${ADAPTER:-experiments/runs/recipe/base/adapter}
VAL_LIMIT=${VAL_LIMIT:-100}
BENCHMARKS=${BENCHMARKS:-hotpotqa,nq,ottqa,tatqa}
VAL_BENCHMARKS=${VAL_BENCHMARKS:-hotpotqa,nq,ottqa}  # in-domain only: the zero-shot δ is pooled from these
DELTAS=${DELTAS:-0,0.01,0.02,0.03,0.04,0.06,0.08,0.12}
PY=${PY:-.venv/bin/python}
RESUME=${RESUME:-auto}
VAL=experiments/runs/frontier_val
TEST=experiments/runs/frontier
for archive in "$VAL.zip" "$TEST.zip"; do
  [ ! -f "$archive" ] || "$PY" -m canopy_lit.report unpack --if-stale "$archive"
done
sweep() {  # one process per sweep: the encoder loads once
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$PY" evaluate.py -m +ablation=frontier adapter="$ADAPTER" progress=false resume="$RESUME" "$@"
}

sweep data.split=val limit="$VAL_LIMIT" data="$VAL_BENCHMARKS" scorer=ftheta,f0 refine.descend_margin="$DELTAS" \
  variant=full hydra.sweep.dir=$VAL
sweep data.split=val limit="$VAL_LIMIT" data="$VAL_BENCHMARKS" variant=no_projection hydra.sweep.dir=$VAL
"$PY" -m canopy_lit.studies.frontier choose

sweep data="$BENCHMARKS" scorer=ftheta,f0 refine.descend_margin="$DELTAS" variant=full,flat_matched hydra.sweep.dir=$TEST
sweep data="$BENCHMARKS" variant=no_projection retrieval.k=1,2,3,5,10 hydra.sweep.dir=$TEST
sweep data="$BENCHMARKS" refine=flat_top_m scorer=ftheta refine.m=1,2,3,5,8,12,20 hydra.sweep.dir=$TEST
sweep data="$BENCHMARKS" variant=extractive refine.m=1,2,3,5,8,12,20 hydra.sweep.dir=$TEST
# LongLLMLingua (SmolLM2-135M, the lingua extra) over its rate ρ; no node scorer. LINGUA_BENCHMARKS="" skips it.
LINGUA_BENCHMARKS=${LINGUA_BENCHMARKS-hotpotqa,nq}
[ -z "$LINGUA_BENCHMARKS" ] || sweep data="$LINGUA_BENCHMARKS" refine=longllmlingua refine.rate=0.3,0.55,0.8 hydra.sweep.dir=$TEST
# k at each benchmark's operating point (one sweep per benchmark and scorer: δ differs)
while read -r bench scorer delta; do
  sweep data="$bench" scorer="$scorer" refine.descend_margin="$delta" variant=full,flat_matched retrieval.k=3,10 \
    hydra.sweep.dir=$TEST
done < <("$PY" -m canopy_lit.studies.frontier operating-points)
# item drop (refine.item_margin, off in the paper) at each benchmark's fθ operating point, over the margin
while read -r bench scorer delta; do
  [ "$scorer" = ftheta ] || continue
  sweep data="$bench" scorer=ftheta refine.descend_margin="$delta" variant=full refine.item_margin=0.05,0.1,0.2,0.3 \
    hydra.sweep.dir=$TEST
done < <("$PY" -m canopy_lit.studies.frontier operating-points)
