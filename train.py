"""Train the shared LoRA node encoder (METHOD.md §1.2): a thin entry over ``canopy_lit.train.run``.

    python train.py experiment=quickstart hydra.run.dir=DIR     # CPU, MiniLM, bundled data
    python train.py experiment=shared_lora                      # paper recipe, Qwen3-VL-Embedding-2B, DDP
    python train.py ... hydra.run.dir=DIR ckpt_path=last       # resume DIR/checkpoints/last.ckpt

Writes DIR/adapter/ (peft adapter + encoder fingerprint; the best validation checkpoint's, saved when fit
ends), DIR/metrics.json (after the test; both atomically), DIR/checkpoints/ (best by val/decision_accuracy +
last.ckpt every N steps, at epoch ends and on SIGTERM). Exit status: 0 done; 1 the run folder is not
writable (nothing changed); 2 an invalid config, an empty split, or a checkpoint to resume that was
trained on other data (nothing ran); 143 stopped by SIGTERM in any phase (resume with ckpt_path=last).
Returns ``optimized_metric`` (the best val/decision_accuracy) to Hydra sweepers (never a test score).
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from canopy_lit.command_line import check_command_line
from canopy_lit.quiet import quiet_third_party
from canopy_lit.schema import USAGE_ERROR, ConfigError
from canopy_lit.train import run


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> float | None:
    quiet_third_party()  # CANOPY_LIT_VERBOSE=1 shows third-party notices
    try:
        metrics = run(cfg)
    except ConfigError as err:  # e.g. Lightning restoring a checkpoint made on other data
        for line in err.problems:
            print(f"error: {line}", file=sys.stderr)
        sys.exit(USAGE_ERROR)
    # The value Hydra sweepers optimise: validation only (the schema admits val/ keys; test would leak).
    return metrics.get(cfg.get("optimized_metric", "val/best_decision_accuracy"))


if __name__ == "__main__":
    check_command_line("train", sys.argv[1:], "error: ")  # a mistyped key: one line, exit 2
    main()
