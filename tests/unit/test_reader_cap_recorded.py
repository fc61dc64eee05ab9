"""The reader cap a run folder records is the one that ran, when the llm's context lowers the configured one."""

from __future__ import annotations

import json

from hydra import compose

from canopy_lit.eval.records import settings_changes
from canopy_lit.evaluate import claim_run_folder
from canopy_lit.pipeline.build import build_loop


def test_run_json_and_settings_json_record_the_effective_cap(hydra_ctx, tmp_path) -> None:
    cfg = compose(config_name="evaluate", overrides=[
        "method=no_retrieval", "llm=simulated", "+llm.context_length=1024", f"paths.output_dir={tmp_path}",
    ])  # fmt: skip
    claim_run_folder(tmp_path, cfg)  # what evaluate.py writes before the loop is built
    runner = build_loop(cfg, bench=None)
    effective = runner.loop.settings.reader_max_tokens
    assert effective < 1024 < int(cfg.loop.reader_max_tokens)
    run = json.loads((tmp_path / "run.json").read_text(encoding="utf-8"))
    assert run["cap"] == effective and run["cap_configured"] == 16000
    stored = json.loads((tmp_path / "settings.json").read_text(encoding="utf-8"))
    assert stored["effective"] == {"loop.reader_max_tokens": effective}
    assert stored["settings"]["loop.reader_max_tokens"] == 16000
    assert settings_changes(tmp_path, cfg) == []  # a resume under the same config is still the same run
