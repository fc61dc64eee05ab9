#!/usr/bin/env bash
# The main job on the embedded default, on a CPU laptop with no internet:
#   1. set up (venv, CPU torch, the package, sha256-pinned offline models)
#   2. train the quickstart LoRA node encoder (HotpotQA + NQ + OTT-QA; TAT-QA tested zero-shot)
#   3. evidence evaluation, no LLM, on the full test splits of HotpotQA, NQ, OTT-QA and TAT-QA:
#      canopy fθ, canopy f0, keep-whole and flat leaves at canopy's token count (k = 5, B = 2)
#   4. a small LLM demonstration: canopy vs vanilla on N HotpotQA test questions (Qwen2.5-Coder-1.5B), each
#      question's answer printed beside the gold answer and the evidence tokens the reader got
#   5. the tables, and f0 -> fθ refinement-decision accuracy on the test splits.
# Two lanes of one thread each (one-thread processes side by side beat one two-thread process on
# 2 cores, and never oversubscribe them). Training holds one core; lane "f0" uses the other for what
# needs no trained adapter (the keep-whole evidence runs, which also rank and cache the retrieved items,
# the vanilla demo, and f0's half of the training test pass: train.py train=false model.test_scorers=[f0]),
# then takes the table benchmarks' fθ evidence runs once training is done, while this lane runs the text
# benchmarks' and the canopy demo. Nothing is computed twice: training tests fθ only. Its log: $OUT/lane_f0.log.
# (The refinement probe, `python evaluate.py experiment=probe`, is a study of its own: training's test pass
# measures the same decision accuracy, and the evidence runs the gold recall.)
# Every step resumes: rerun the script after an interruption and finished work is skipped.
# Wall time per step goes to $OUT/timings.tsv (lane f0's steps are prefixed "f0:"). The large paired
# LLM comparison is its own command (scripts/paired.sh, hours on a CPU).
# Training runs a fixed number of steps (STEPS, default 64) with no wall-time cap, so the adapter and its
# numbers repeat from one machine to the next; a busy machine takes longer, it never trains less. A run that
# ends short of STEPS fails the script (scripts/quickstart_record.py check-steps says what to do).
# At the end $OUT/record.json holds the commit, the sha256 of this script and of its training config, the
# wall time per step, the peak RSS and the adapter's sha256 (experiments/quickstart.md is made from it).
# Knobs (environment): OUT (output folder), N (demo questions, default 3), STEPS, SKIP_SETUP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/quickstart}
N=${N:-3}
STEPS=${STEPS:-64}
mkdir -p "$OUT"
export OUT N OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
T0=$(date +%s)
echo "$T0" > "$OUT/.start"
mkdir -p "$OUT/rss"
# timed NAME CMD...: run CMD, its peak RSS (KiB) into $OUT/rss/NAME.kb where GNU time is there.
timed() {
  local name=$1; shift
  if [ -x /usr/bin/time ] && /usr/bin/time -f %M true >/dev/null 2>&1; then
    /usr/bin/time -f %M -o "$OUT/rss/$name.kb" "$@"
  else
    "$@"
  fi
}
step() {  # step NAME: log the wall time since the previous step of this lane
  local now; now=$(date +%s)
  printf '%s\t%s\n' "$1" "$((now - T0))" >> "$OUT/timings.tsv"
  T0=$now
}
ONE=(threads=1 llm.n_threads=1 progress=false)  # one core per lane

# f0_test: f0's refinement-decision accuracy on training's test subsets (the untrained model: fθ = f0), skipped
# once finished; training itself then tests fθ only.
f0_test() {
  [ -f "$OUT/train_f0/metrics.json" ] ||
    timed train_f0 python train.py experiment=quickstart train=false model.test_scorers=[f0] \
      hydra.run.dir="$OUT/train_f0"
}
# evidence NAME VARIANTS BENCHMARKS ADAPTER: one evidence multirun (no LLM) into $OUT/evidence; each
# run resumes its questions, and the marker NAME skips the whole multirun once finished.
evidence() {
  [ -f "$OUT/evidence/.done_$1" ] && return
  timed "evidence_$1" python evaluate.py -m +ablation=evidence adapter="$4" variant="$2" retrieval.k=5 tree.branching=2 \
    data="$3" hydra.sweep.dir="$OUT/evidence" "${ONE[@]}"
  mkdir -p "$OUT/evidence" && touch "$OUT/evidence/.done_$1"
}
# demo NAME OVERRIDE...: end-to-end QA with the local Qwen2.5-Coder-1.5B as critic and reader on N HotpotQA
# test questions (each question's own delivered items as the pool: retriever=candidates; the paired
# comparison uses the unified corpus). A rerun resumes from predictions.jsonl.
demo() {
  local name=$1; shift
  # the caller's overrides last: on Hydra's command line the last value of a key wins
  timed "demo_$name" python evaluate.py experiment=quickstart_eval data=hotpotqa limit="$N" "${ONE[@]}" "$@" \
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
  evidence keep_whole no_projection hotpotqa,nq,ottqa,tatqa null
  step f0:evidence
  demo vanilla method=vanilla
  step f0:qa
  f0_test
  step f0:test_f0
  until [ -f "$OUT/train/.done" ]; do sleep 5; done  # the main lane stops this lane if training fails
  step f0:wait_train
  evidence ftheta_tables full,flat_matched ottqa,tatqa "$(realpath "$OUT/train/adapter")"
  step f0:evidence_ftheta
}
export -f lane_f0 f0_test evidence demo step timed
export ONE_STR="${ONE[*]}"
SETSID=$(command -v setsid || true)  # util-linux; without it (macOS) a failure stops only the lane's shell
$SETSID bash -c 'ONE=($ONE_STR); lane_f0' > "$OUT/lane_f0.log" 2>&1 &
LANE=$!
trap 'kill -- -"$LANE" 2>/dev/null || kill "$LANE" 2>/dev/null || true' EXIT

# 2. Train (skipped once finished: metrics.json is written last; a stopped run resumes from last.ckpt).
# One validation, at the last step: the tested and saved adapter is the step-STEPS one on every machine.
if [ ! -f "$OUT/train/metrics.json" ]; then
  RESUME=()
  if [ -f "$OUT/train/checkpoints/last.ckpt" ]; then
    echo "training: resuming from $OUT/train/checkpoints/last.ckpt"
    RESUME=(ckpt_path=last)
  else
    echo "training: starting fresh (no last.ckpt yet), $STEPS steps"
  fi
  timed train python train.py experiment=quickstart hydra.run.dir="$OUT/train" ${RESUME[@]+"${RESUME[@]}"} \
    trainer.max_steps="$STEPS" trainer.val_check_interval="$STEPS" trainer.max_time=null model.test_scorers=[ftheta] \
    test_threads=2  # lane f0 normally waits for training by then (its own work is shorter): both cores test
fi
# A short run must not feed its adapter to the evaluations (the trap stops lane f0).
python scripts/quickstart_record.py check-steps "$OUT/train/metrics.json" "$STEPS"
touch "$OUT/train/.done"
ADAPTER=$(realpath "$OUT/train/adapter")
step train

# 3-4 with fθ: the text benchmarks' evidence runs, then the canopy demo, on this lane's core (lane f0 runs the
# tables' evidence runs meanwhile, about as long).
evidence ftheta_text full,flat_matched hotpotqa,nq "$ADAPTER"
step evidence
demo canopy method=canopy encoder.adapter="$ADAPTER"
step qa
if ! wait "$LANE"; then
  echo "lane f0 failed; its log: $OUT/lane_f0.log" >&2 && tail -20 "$OUT/lane_f0.log" >&2 && exit 1
fi
trap - EXIT
step wait_f0

# 5. Tables (markdown + CSV) from the run folders.
python -m canopy_lit.report tables "$OUT/evidence" --study evidence --out "$OUT/tables"
python -m canopy_lit.report tables "$OUT/eval" --study quickstart --out "$OUT/tables"
step tables
cat "$OUT/tables/evidence.md" "$OUT/tables/quickstart.md"
echo
python scripts/quickstart_record.py summary "$OUT/train/metrics.json" "$STEPS" "$OUT/train_f0/metrics.json"
python scripts/quickstart_record.py skips "$OUT"
echo
echo "LLM demonstration, $N HotpotQA test questions (Qwen2.5-Coder-1.5B as critic and reader):"
python -m canopy_lit.report answers canopy="$OUT/eval/hotpotqa/canopy" vanilla="$OUT/eval/hotpotqa/vanilla"
echo "wall time per step (s):" && cat "$OUT/timings.tsv"
python scripts/quickstart_record.py write "$OUT"
