"""Evaluate CANOPY, its baselines and ablations: a thin entry over ``canopy_lit.evaluate.run``.

    python evaluate.py experiment=NAME [overrides] hydra.run.dir=DIR

Writes predictions.jsonl (resumable), metrics.json and table.md into the run dir. ``shard=I/N`` (0-based)
answers only shard I of N of the questions; ``python -m canopy_lit.report merge-shards OUT DIR...`` makes
the unsharded run folder of the N shard folders (docs/how-to/evaluate.md, "Sharded evaluation").
Exit status: 0 done; 1 the run failed (unreadable data, run folder in use, unwritable or full,
LLM backend down: one line on stderr saying why, records kept for a resume); 2 an invalid config, or a
run folder whose results were made with other settings (nothing ran; ``resume=force`` continues them).
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from canopy_lit.command_line import check_command_line
from canopy_lit.data.readers._io import DataFormatError
from canopy_lit.eval.harness import RunFailed, notify, unwritable_message
from canopy_lit.eval.records import RunFolderError, RunLocked, discard_refused_run_folder
from canopy_lit.evaluate import run
from canopy_lit.quiet import quiet_third_party
from canopy_lit.schema import USAGE_ERROR, ConfigError


def _exit(status: int, lines: list[str], run_dir: str | None = None) -> None:
    for line in lines:
        notify(f"evaluate.py: error: {line}")
    if run_dir is not None:
        discard_refused_run_folder(run_dir, (f"{Path(sys.argv[0]).stem}.log", "evaluate.log"))
    sys.exit(status)


@hydra.main(version_base="1.3", config_path="configs", config_name="evaluate")
def main(cfg: DictConfig) -> float | None:
    quiet_third_party()  # CANOPY_LIT_VERBOSE=1 shows third-party notices
    try:
        metrics = run(cfg)
    except ConfigError as err:
        _exit(USAGE_ERROR, err.problems, cfg.paths.output_dir)
    except (RunFailed, RunLocked, RunFolderError, DataFormatError, FileNotFoundError) as err:
        _exit(1, [str(err)])
    except OSError as err:  # a full disk or a read-only place; any other OSError is a bug: its traceback
        line = unwritable_message(err, cfg.paths.output_dir)
        if line is None:
            raise
        _exit(1, [line])
    # A scalar for Hydra sweepers: answer F1 for QA runs, decision accuracy for probes.
    return metrics.get("eval/f1", metrics.get("probe/decision_accuracy"))


if __name__ == "__main__":
    check_command_line("evaluate", sys.argv[1:], "evaluate.py: error: ")  # a mistyped key: one line, exit 2
    main()
