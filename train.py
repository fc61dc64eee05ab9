"""Train the shared LoRA node encoder (METHOD.md §1.2): a thin entry over ``canopy_lit.train.run``.

    python train.py experiment=quickstart hydra.run.dir=DIR     # CPU, MiniLM, bundled data
    python train.py experiment=shared_lora                      # paper recipe, Qwen3-VL-Embedding-2B, DDP
    python train.py ... hydra.run.dir=DIR ckpt_path=last       # resume DIR/checkpoints/last.ckpt

Writes DIR/adapter/ (peft adapter + encoder fingerprint), DIR/metrics.json (both atomically),
DIR/checkpoints/ (best by val/decision_accuracy + last.ckpt every N steps, at epoch ends and on
SIGTERM). Exit status: 0 done; 2 an invalid config (nothing ran); 143 stopped by SIGTERM (resumable).
Returns the best val/decision_accuracy to Hydra sweepers (never a test score).
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from canopy_lit.train import run


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> float | None:
    metrics = run(cfg)
    # The value Hydra sweepers optimise: validation only (choosing hyperparameters on test would leak it).
    return metrics.get("val/best_decision_accuracy")


if __name__ == "__main__":
    main()
