#!/usr/bin/env bash
# The paired end-to-end comparison (issue: "does CANOPY give better answers from fewer tokens?"):
# the same test questions through canopy (δ = 0, the paper's rule), canopy at the operating point (the δ that
# canopy_lit/studies/frontier.py chose on validation for that benchmark, for zero-shot TAT-QA the median of the in-domain
# choices: experiments/tables/frontier_operating_point.json),
# canopy w/o projection (refine=keep_whole), canopy w/o iteration (loop.max_rounds=1) and vanilla (k = 5), retrieving from the unified corpus of every bundled benchmark
# (retriever=corpus: 24,837 items), with the CPU default reader (Qwen2.5-Coder-1.5B, llama.cpp).
# The corpus is ranked by BM25 by default (RETRIEVAL=bm25: indexed in about a minute); RETRIEVAL=default
# ranks it with dense MiniLM f0, which first embeds the union once (about an hour of one free CPU core,
# cached by content). Changing RETRIEVAL needs a fresh OUT: a run folder resumes with its own setting.
#
#   ADAPTER=outputs/quickstart/train/adapter bash scripts/paired.sh
#
# Resumable and incremental: questions are added in chunks of STEP up to N per benchmark, every system
# of a benchmark reaching the same count before the next chunk (so the comparison stays paired whenever
# the job stops). Run folders (predictions.jsonl + metrics.json, no caches) land in
# OUT=experiments/runs/paired/<benchmark>/<system>/ (the committed ones are unpacked from paired.zip first, so
# a rerun resumes them); pack them (python -m canopy_lit.report pack experiments/runs/paired), commit
# paired.zip, then regenerate the table with
#   python -m canopy_lit.studies.paired
# Knobs (environment): ADAPTER (required), OUT, N (default 50), STEP (default 10), BENCHMARKS
# (default "hotpotqa nq ottqa tatqa"), THREADS (llama.cpp threads, default 1), RETRIEVAL (bm25 | default | hybrid),
# ONLY (a subset of the systems, e.g. ONLY="canopy no_projection": two such jobs side by side, one core
# each, split one benchmark's work; the pairing is by question id, so it stays exact).
# Archives packed before they kept settings.json (every one committed up to issue 47's close) hold runs with
# results but no settings: a rerun refuses them, naming settings.json. RESUME=force continues them under
# today's settings (the folder then records those); RESUME=auto (default) continues only same-settings runs.
set -euo pipefail
CALLER=$PWD
cd "$(dirname "$0")/.."
: "${ADAPTER:?set ADAPTER to a trained adapter folder (train.py writes <run dir>/adapter)}"
OUT=${OUT:-experiments/runs/paired}
N=${N:-50}
STEP=${STEP:-10}
BENCHMARKS=${BENCHMARKS:-hotpotqa nq ottqa tatqa}
THREADS=${THREADS:-1}
RETRIEVAL=${RETRIEVAL:-bm25}
PY=${PY:-.venv/bin/python}
RESUME=${RESUME:-auto}
# relative to the checkout when inside it: run folders and their configs then name no machine path
ADAPTER=$(cd "$CALLER" && realpath --relative-base="$OLDPWD" "$ADAPTER")
[ ! -f "$OUT.zip" ] || "$PY" -m canopy_lit.report unpack --if-stale "$OUT.zip"

# fθ's validation-chosen δ of one benchmark (empty without an operating point: that system is skipped)
operating_delta() {
  "$PY" -m canopy_lit.studies.frontier operating-points | awk -v b="$1" '$1 == b && $2 == "ftheta" {print $3}'
}
SYSTEMS=(
  "canopy:method=canopy"
  "canopy_op:method=canopy refine.descend_margin=DELTA"
  "no_projection:method=canopy refine=keep_whole"
  "no_iteration:method=canopy loop.max_rounds=1"
  "vanilla:method=vanilla"
)
for ((n = STEP; n <= N; n += STEP)); do
  for bench in $BENCHMARKS; do
    for system in "${SYSTEMS[@]}"; do
      name=${system%%:*}
      [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $name "* ]] || continue
      overrides=${system#*:}
      if [[ $overrides == *DELTA* ]]; then
        delta=$(operating_delta "$bench")
        [ -n "$delta" ] || { echo "paired.sh: no operating point for $bench: $name skipped" >&2; continue; }
        overrides=${overrides//DELTA/$delta}
      fi
      # a folder whose latest run answered n questions is skipped without a model load (~10 s per system and
      # step); its own questions are those of question_ids.json, not every record of predictions.jsonl
      done_ok=0
      [ ! -f "$OUT/$bench/$name/predictions.jsonl" ] || done_ok=$("$PY" -m canopy_lit.studies.paired --answered "$OUT/$bench/$name")
      [ "${done_ok:-0}" -lt "$n" ] || continue
      # shellcheck disable=SC2086
      OMP_NUM_THREADS=1 "$PY" evaluate.py experiment=quickstart_eval data="$bench" data.split=test limit="$n" \
        $overrides retriever=corpus retrieval="$RETRIEVAL" encoder.adapter="$ADAPTER" llm.n_threads="$THREADS" progress=false \
        resume="$RESUME" hydra.run.dir="$OUT/$bench/$name"
    done
  done
  echo "paired.sh: $n questions per benchmark done" >&2
done
