#!/usr/bin/env bash
# Set up canopy-lit from scratch: virtualenv, CPU torch, the package with extras, Tesseract, offline model assets.
#   bash scripts/setup.sh                      # everything the quickstart needs
#   ASSETS="minilm smollm2-135m" bash scripts/setup.sh   # a lighter set (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
ASSETS=${ASSETS:-"minilm smollm2-135m qwen2.5-1.5b efficientnet-lite0"}

[ -x .venv/bin/python ] || "$PY" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pip install -q --upgrade pip
# CPU build of torch first, so nothing below pulls a multi-GB CUDA build (GPU users: install their torch instead).
if [ "${CANOPY_TORCH:-cpu}" = "cpu" ]; then
  python -m pip install -q "torch==2.13.0"
fi
python -m pip install -q -e ".[dev,video]"

# Tesseract OCR for the CPU visual describer (Debian/Ubuntu; skipped elsewhere or without root).
if ! command -v tesseract >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && apt-get install -y -qq tesseract-ocr tesseract-ocr-eng >/dev/null) \
      || echo "warning: could not install tesseract-ocr; OCR in the visual describer is disabled" >&2
  else
    echo "note: install tesseract-ocr for OCR in the visual describer" >&2
  fi
fi

# Offline model assets (sha256-pinned), cached under $CANOPY_LIT_HOME (default ~/.cache/canopy-lit).
# shellcheck disable=SC2086
python -m canopy_lit.assets fetch $ASSETS
