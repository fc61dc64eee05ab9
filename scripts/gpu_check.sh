#!/usr/bin/env bash
# GPU checks in one command, on a machine with a CUDA GPU and the project installed (.venv):
#   1. quickstart training with trainer=gpu (bf16), encoder placed by Lightning;
#   2. the four-benchmark training (HotpotQA, NQ, OTT-QA, TAT-QA) with trainer=ddp on every visible GPU;
#   3. the refinement probe with encoder.device=cuda and the adapter from 1;
#   4. the GPU training-step benchmark (real step vs bare forward+backward, instances/s, target >= 0.8);
#   5. every `gpu`-marked test.
# Writes $OUT/gpu_check.json: per check its exit code, seconds and key numbers; exits non-zero when a
# check failed. Each check runs even if an earlier one failed (the probe then uses f0).
#   bash scripts/gpu_check.sh                        # OUT=outputs/gpu_check
#   OUT=outputs/gc STEPS=300 bash scripts/gpu_check.sh  # more training steps (default: the presets' 150)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/gpu_check}
STEPS=${STEPS:-150}
LIMIT=${LIMIT_S:-900}  # seconds per check at most
PY=${PY:-.venv/bin/python}
mkdir -p "$OUT"
: >"$OUT/checks.tsv"

if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check: torch sees no CUDA device (install a CUDA build of torch: see README)" >&2
  exit 2
fi

check() {  # check NAME CMD...: run with a time limit, log to $OUT/NAME.log, record rc and seconds
  local name=$1 t0 rc
  shift
  echo "== $name: $*"
  t0=$(date +%s)
  timeout "$LIMIT" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - t0))" >>"$OUT/checks.tsv"
  echo "   rc=$rc ($(($(date +%s) - t0)) s), log $OUT/$name.log"
}

# GPU runs: threads not pinned to 1 (that knob is for a shared 2-core CPU), loader workers on.
GPU_DATA=(threads=null datamodule.num_workers=4 datamodule.pin_memory=true "trainer.max_steps=$STEPS")

check quickstart_gpu "$PY" train.py experiment=quickstart trainer=gpu "${GPU_DATA[@]}" \
  callbacks.rich_progress_bar=null hydra.run.dir="$OUT/quickstart_gpu"

check ddp_four_benchmarks "$PY" train.py experiment=quickstart trainer=ddp "${GPU_DATA[@]}" \
  "datamodule.benchmarks=[hotpotqa,nq,ottqa,tatqa]" callbacks.rich_progress_bar=null \
  hydra.run.dir="$OUT/ddp_four_benchmarks"

ADAPTER=null
[ -f "$OUT/quickstart_gpu/adapter/adapter_config.json" ] && ADAPTER=$(realpath "$OUT/quickstart_gpu/adapter")
check probe_cuda "$PY" evaluate.py experiment=probe data=hotpotqa data.split=test encoder.device=cuda \
  encoder.adapter="$ADAPTER" progress=false hydra.run.dir="$OUT/probe_cuda"

check bench_train_step_gpu "$PY" perf/run.py --only train_step_gpu train_step_vs_raw \
  --out "$OUT/bench_train_step.json"

# pytest exits 5 when it collects nothing: no gpu-marked test is not a failure here.
check pytest_gpu bash -c '"$0" -m pytest -q -m gpu -p no:cacheprovider --junitxml "$1"; rc=$?; [ $rc -eq 5 ] && rc=0; exit $rc' \
  "$PY" "$OUT/pytest_gpu.xml"

"$PY" - "$OUT" <<'EOF'
"""Collect $OUT/checks.tsv and each run's metrics into $OUT/gpu_check.json."""
import json
import subprocess
import sys
from pathlib import Path

import torch

out = Path(sys.argv[1])
res = {"_meta": {"gpu": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(), "torch": torch.__version__,
                 "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()}}
keys = ("val/best_decision_accuracy", "val/decision_accuracy", "test/decision_accuracy", "test/decision_accuracy_f0",
        "train/global_step", "train/seconds", "probe/decision_accuracy", "probe/gold_recall")
for line in (out / "checks.tsv").read_text().splitlines():
    name, rc, seconds = line.split("\t")
    entry = {"rc": int(rc), "seconds": int(seconds)}
    metrics = out / name / "metrics.json"
    if metrics.is_file():
        m = json.loads(metrics.read_text())
        entry["metrics"] = {k: m[k] for k in keys if k in m}
    if name == "bench_train_step_gpu" and (out / "bench_train_step.json").is_file():
        entry["bench"] = {k: v for k, v in json.loads((out / "bench_train_step.json").read_text()).items() if k != "_meta"}
    res[name] = entry
(out / "gpu_check.json").write_text(json.dumps(res, indent=2) + "\n")
print(json.dumps(res, indent=2))
sys.exit(1 if any(v.get("rc") for k, v in res.items() if k != "_meta") else 0)
EOF
