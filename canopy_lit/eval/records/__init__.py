"""A run folder's records, one module per file it owns:

- ``predictions``: ``predictions.jsonl``, durable per-question records (append + flush + fsync one JSON line per
  finished question, resume by id: a run killed at any point, even SIGKILL mid-write, re-does exactly the
  unfinished questions) and ``read_predictions``, how anything else reads it;
- ``lock``: ``.lock``, ``RunLock`` keeps a second evaluation out of a run folder while one is writing it;
- ``axes``: ``run.json``, the run's ablation axes recorded when the evaluation starts, so that reports read what
  ran instead of re-deriving it from a config layout that may have changed since (``run_axes``);
- ``settings``: ``settings.json``, every setting the records depend on (``run_settings``), so that a rerun into a
  folder with results made under other settings is refused instead of continuing and relabelling them.
"""

from canopy_lit.eval.records.axes import (
    DENSE_RETRIEVAL_OPTIONS,
    RUN_FILE,
    UNSCORED_REFINERS,
    adapter_axes,
    adapter_weights_hash,
    cfg_get,
    controller_name,
    group_choices,
    plain_config,
    read_run_axes,
    refine_label,
    refiner_name,
    retrieval_scope,
    retriever_label,
    retriever_name,
    run_axes,
    scorer_name,
    write_run_axes,
)
from canopy_lit.eval.records.lock import RunLock, RunLocked
from canopy_lit.eval.records.predictions import RecordLog, read_predictions
from canopy_lit.eval.records.settings import (
    ANSWER_NEUTRAL_KEYS,
    SETTINGS_FILE,
    RunFolderError,
    discard_refused_run_folder,
    run_has_results,
    run_settings,
    settings_changes,
    settings_fingerprint,
    write_hydra_files,
    write_run_settings,
)

__all__ = [
    "ANSWER_NEUTRAL_KEYS", "DENSE_RETRIEVAL_OPTIONS", "RUN_FILE",
    "RecordLog", "RunFolderError", "RunLock", "RunLocked", "SETTINGS_FILE", "UNSCORED_REFINERS", "adapter_axes",
    "adapter_weights_hash", "cfg_get", "controller_name", "discard_refused_run_folder",
    "group_choices", "plain_config", "read_predictions", "read_run_axes", "refine_label", "refiner_name",
    "retrieval_scope", "retriever_label", "retriever_name", "run_axes", "run_has_results", "run_settings",
    "scorer_name", "settings_changes", "settings_fingerprint", "write_hydra_files", "write_run_axes",
    "write_run_settings",
]
