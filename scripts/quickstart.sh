#!/usr/bin/env bash
# The main job on the embedded default, on a CPU laptop with no internet:
#   1. set up (venv, CPU torch, the package, sha256-pinned offline models)
#   2. train the quickstart LoRA node encoder (HotpotQA + NQ + OTT-QA; TAT-QA tested zero-shot)
#   3. refinement probe on the HotpotQA test split: f0 vs fθ (decision accuracy, gold recall)
#   4. evidence evaluation, no LLM, on the full test splits of HotpotQA, NQ, OTT-QA and TAT-QA:
#      canopy fθ, canopy f0, keep-whole and flat leaves at canopy's token count (k = 5, B = 2)
#   5. a small LLM demonstration: canopy vs vanilla on N HotpotQA test questions (Qwen2.5-1.5B), each
#      question's answer printed beside the gold answer and the evidence tokens the reader got
#   6. the tables.
# Two lanes of one thread each (one-thread processes side by side beat one two-thread process on
# 2 cores, and never oversubscribe them). Training holds one core; lane "f0" uses the other for what
# needs no trained adapter (the f0 probe, the keep-whole evidence runs, which also rank and cache the
# retrieved items, and the vanilla demo), then takes half of the fθ evidence runs once training is done.
# Its log: $OUT/lane_f0.log.
# Every step resumes: rerun the script after an interruption and finished work is skipped.
# Wall time per step goes to $OUT/timings.tsv (lane f0's steps are prefixed "f0:"). The large paired
# LLM comparison is its own command (scripts/paired.sh, hours on a CPU).
# Training runs a fixed number of steps (STEPS, default 80: ~10 min on one busy core), not a wall-time cap, so
# the adapter and its numbers repeat from one machine to the next; max_time is only a safety net.
# Knobs (environment): OUT (output folder), N (demo questions, default 10), STEPS, SKIP_SETUP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/quickstart}
N=${N:-10}
STEPS=${STEPS:-80}
mkdir -p "$OUT"
export OUT N OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
T0=$(date +%s)
step() {  # step NAME: log the wall time since the previous step of this lane
  local now; now=$(date +%s)
  printf '%s\t%s\n' "$1" "$((now - T0))" >> "$OUT/timings.tsv"
  T0=$now
}
ONE=(threads=1 llm.n_threads=1 progress=false)  # one core per lane

# probe SCORER ADAPTER: the refinement probe on the HotpotQA test split, skipped once finished.
probe() {
  [ -f "$OUT/probe/$1/metrics.json" ] ||
    python evaluate.py experiment=probe data=hotpotqa data.split=test encoder.adapter="$2" \
      hydra.run.dir="$OUT/probe/$1" "${ONE[@]}"
}
# evidence NAME VARIANTS BENCHMARKS ADAPTER: one evidence multirun (no LLM) into $OUT/evidence; each
# run resumes its questions, and the marker NAME skips the whole multirun once finished.
evidence() {
  [ -f "$OUT/evidence/.done_$1" ] && return
  python evaluate.py -m +ablation=evidence adapter="$4" variant="$2" retrieval.k=5 tree.branching=2 \
    data="$3" hydra.sweep.dir="$OUT/evidence" "${ONE[@]}"
  mkdir -p "$OUT/evidence" && touch "$OUT/evidence/.done_$1"
}
# demo NAME OVERRIDE...: end-to-end QA with the local Qwen2.5-1.5B as critic and reader on N HotpotQA
# test questions (each question's own delivered items as the pool: retriever=candidates; the paired
# comparison uses the unified corpus). A rerun resumes from predictions.jsonl.
demo() {
  local name=$1; shift
  # the caller's overrides last: on Hydra's command line the last value of a key wins
  python evaluate.py experiment=quickstart_eval data=hotpotqa limit="$N" "${ONE[@]}" "$@" \
    hydra.run.dir="$OUT/eval/hotpotqa/$name"
}

[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
step setup

# Lane f0, beside training, in its own process group so that a failure of the main lane stops it.
lane_f0() {
  set -euo pipefail
  T0=$(date +%s)
  probe f0 null
  step f0:probe
  evidence keep_whole no_projection hotpotqa,nq,ottqa,tatqa null
  step f0:evidence
  demo vanilla method=vanilla
  step f0:qa
  until [ -f "$OUT/train/.done" ]; do sleep 5; done  # the main lane stops this lane if training fails
  step f0:wait_train
  evidence ftheta_tables full,flat_matched ottqa,tatqa "$(realpath "$OUT/train/adapter")"
  step f0:evidence_ftheta
}
export -f lane_f0 probe evidence demo step
export ONE_STR="${ONE[*]}"
SETSID=$(command -v setsid || true)  # util-linux; without it (macOS) a failure stops only the lane's shell
$SETSID bash -c 'ONE=($ONE_STR); lane_f0' > "$OUT/lane_f0.log" 2>&1 &
LANE=$!
trap 'kill -- -"$LANE" 2>/dev/null || kill "$LANE" 2>/dev/null || true' EXIT

# 2. Train (skipped once finished: metrics.json is written last; a stopped run resumes from last.ckpt).
if [ ! -f "$OUT/train/metrics.json" ]; then
  python train.py experiment=quickstart hydra.run.dir="$OUT/train" ckpt_path=last \
    trainer.max_steps="$STEPS" trainer.val_check_interval="$((STEPS / 2))" trainer.max_time=00:00:30:00
fi
touch "$OUT/train/.done"
ADAPTER=$(realpath "$OUT/train/adapter")
step train

# 3-4 with fθ (text benchmarks here, tables in lane f0).
probe ftheta "$ADAPTER"
step probe
evidence ftheta_text full,flat_matched hotpotqa,nq "$ADAPTER"
step evidence
if ! wait "$LANE"; then
  echo "lane f0 failed; its log: $OUT/lane_f0.log" >&2 && tail -20 "$OUT/lane_f0.log" >&2 && exit 1
fi
trap - EXIT
step wait_f0
# 5. Both cores are free again: the LLM decodes on two threads.
demo canopy method=canopy encoder.adapter="$ADAPTER" threads=2 llm.n_threads=2
step qa

# 6. Tables (markdown + CSV) from the run folders.
python -m canopy_lit.report tables "$OUT/evidence" --study evidence --out "$OUT/tables"
python -m canopy_lit.report tables "$OUT/eval" "$OUT/probe" --study quickstart --out "$OUT/tables"
step tables
cat "$OUT/tables/evidence.md" "$OUT/tables/quickstart.md"
echo
python - "$OUT/train/metrics.json" "$STEPS" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
def acc(part):
    return f"f0 {m[f'test/{part}/decision_accuracy_f0']:.1%} -> fθ {m[f'test/{part}/decision_accuracy']:.1%}"
print(f"training: {m.get('train/global_step', 0):.0f} of {sys.argv[2]} steps. Test decision accuracy (does the encoder "
      f"keep the region that holds the answer?): in-domain {acc('in_domain')}; TAT-QA zero-shot {acc('zero_shot')}")
PY
echo
echo "LLM demonstration, $N HotpotQA test questions (Qwen2.5-1.5B as critic and reader):"
python -m canopy_lit.report answers canopy="$OUT/eval/hotpotqa/canopy" vanilla="$OUT/eval/hotpotqa/vanilla"
echo "wall time per step (s):" && cat "$OUT/timings.tsv"
