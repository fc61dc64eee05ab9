#!/usr/bin/env bash
# Set up canopy-lit from scratch: virtualenv, CPU torch, the package with extras, Tesseract, offline model assets.
#   bash scripts/setup.sh                      # everything the quickstart needs
#   ASSETS="minilm smollm2-135m" bash scripts/setup.sh   # a lighter set (CI)
#   bash scripts/setup.sh --dry-run            # print where torch would come from; change nothing
# torch (installed first, so nothing below pulls another build): without an NVIDIA GPU (`nvidia-smi -L`
# fails) the CPU wheel from $CPU_TORCH_INDEX when that index answers, else the configured package index
# (where a plain Linux index resolves torch==2.13.0 to the CUDA build + several GB of nvidia-* wheels);
# with a GPU the configured index. TORCH_INDEX_URL=URL forces an index; CANOPY_TORCH=cpu the CPU wheel
# even with a GPU; CANOPY_TORCH=skip keeps the torch you installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
ASSETS=${ASSETS:-"minilm smollm2-135m qwen2.5-1.5b efficientnet-lite0"}
TORCH_SPEC="torch==2.13.0"
CPU_TORCH_INDEX=${CPU_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}

has_nvidia_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

index_answers() {  # does the simple index at $1 list torch? (5 s at most; no network = no)
  "$PY" - "$1" <<'PYEOF' >/dev/null 2>&1
import sys
import urllib.request

urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=5).read(1)
PYEOF
}

torch_index() {  # the index URL to install torch from; empty = the configured package index
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    echo "$TORCH_INDEX_URL"
  elif { [ "${CANOPY_TORCH:-auto}" = cpu ] || ! has_nvidia_gpu; } && index_answers "$CPU_TORCH_INDEX"; then
    echo "$CPU_TORCH_INDEX"
  fi
}

install_torch() {  # prints what it does; with --dry-run only that
  case "${CANOPY_TORCH:-auto}" in
    auto | cpu) ;;  # cpu: the CPU wheel even on a GPU machine
    *) echo "torch: skipped (CANOPY_TORCH=${CANOPY_TORCH})"; return ;;
  esac
  local index
  index=$(torch_index)
  if [ -n "$index" ]; then
    echo "torch: pip install $TORCH_SPEC --index-url $index"
    [ -n "${DRY_RUN:-}" ] || python -m pip install -q --no-compile "$TORCH_SPEC" --index-url "$index"
  else
    echo "torch: pip install $TORCH_SPEC (configured package index)"
    [ -n "${DRY_RUN:-}" ] || python -m pip install -q --no-compile "$TORCH_SPEC"
  fi
}

if [ "${1:-}" = "--dry-run" ]; then
  DRY_RUN=1 install_torch
  exit 0
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pip install -q --upgrade pip
install_torch
# openai: the official client behind llm=openai (small, pure Python); wandb: logger=wandb and W&B sweeps
# (offline without a key); optuna: the Hydra Optuna sweeper behind hparams_search=lora_optuna; cluster: the
# submitit launcher behind hydra/launcher=submitit_local|submitit_slurm (its grid test runs in the suite).
# serve: FastAPI + uvicorn behind python -m canopy_lit.serve (its HTTP tests run in the suite).
# --no-compile (torch too): pip would byte-compile every installed module (~23k files, ~40 s of one core) though
# a run imports a fraction of them; Python compiles and caches those on first import instead.
# Its build backend's notes (setuptools' editable-install warning) are kept in .venv/pip-install.log and shown
# only when the install fails.
python -m pip install -q --no-compile -e ".[dev,video,openai,parallel,cluster,wandb,optuna,docs,langchain,llamaindex,serve]" \
  > .venv/pip-install.log 2>&1 || { cat .venv/pip-install.log >&2; exit 1; }

# Tesseract OCR for the CPU visual describer (Debian/Ubuntu; skipped elsewhere or without root).
if ! command -v tesseract >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    # apt's own chatter (debconf's "delaying package configuration") goes to a log, shown when it fails.
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tesseract-ocr tesseract-ocr-eng) \
      > .venv/apt-tesseract.log 2>&1 \
      || { cat .venv/apt-tesseract.log >&2
           echo "warning: could not install tesseract-ocr; OCR in the visual describer is disabled" >&2; }
  else
    echo "note: install tesseract-ocr for OCR in the visual describer" >&2
  fi
fi

# Offline model assets (sha256-pinned), cached under $CANOPY_LIT_HOME (default ~/.cache/canopy-lit).
# shellcheck disable=SC2086
python -m canopy_lit.assets fetch $ASSETS
