"""run.json: the evaluation records its ablation axes; reports read them instead of re-deriving them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose
from hydra.core.hydra_config import HydraConfig
from runfolders import make_qa_run

from canopy_lit.eval.records import RUN_FILE, read_run_axes, run_axes, write_run_axes
from canopy_lit.report.runs import find_runs, load_run
from canopy_lit.report.tables import qa_rows, render_study


@pytest.mark.parametrize(
    ("overrides", "expect"),
    [
        (["method=vanilla"], {"method": "vanilla", "refine": "keep_whole", "scorer": None, "R": 1, "controller": "none"}),
        (["method=recomp"], {"method": "recomp", "refine": "extractive", "scorer": "f0", "R": 1}),
        (["method=flat", "refine.m=7"], {"method": "flat", "refine": "flat_top_m", "m": 7, "scorer": "f0"}),
        (["method=canopy", "retrieval.k=4", "tree.branching=3"],
         {"refine": "parent_relative", "k": 4, "B": 3, "R": 3, "controller": "critic", "scope": "corpus", "retriever": "dense"}),
        (["retriever=candidates", "retrieval=bm25"], {"scope": "candidates", "retriever": "bm25"}),
        (["method=universalrag"], {"method": "universalrag", "method_label": "universalrag (modality routing only)"}),
        (["refine=longllmlingua", "refine.rate=0.4"],  # reads no node score; its rate and LM are recorded
         {"refine": "longllmlingua", "scorer": None, "rate": 0.4, "compressor": "smollm2-135m"}),
    ],
)
def test_axes_of_real_configs(hydra_ctx, tmp_path: Path, overrides: list[str], expect: dict) -> None:
    cfg = compose("evaluate", overrides=[*overrides, "data=tatqa", "limit=3", f"paths.root_dir={tmp_path}"])
    path = write_run_axes(tmp_path / "run", cfg)
    axes = json.loads(path.read_text())
    assert path.name == RUN_FILE and axes == read_run_axes(tmp_path / "run")
    assert axes["benchmark"] == "tatqa" and axes["limit"] == 3 and axes["encoder"] == "minilm"
    assert axes["reader"] == cfg.llm.model and axes["split"] == cfg.data.split
    assert {k: axes[k] for k in expect} == expect


def test_adapter_hash_is_recorded_when_the_run_starts(tmp_path: Path) -> None:
    adapter = tmp_path / "outputs" / "train" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "encoder_fingerprint.json").write_text(json.dumps({"adapter_hash": "feedc0ffee00beef"}))
    cfg = {"mode": "qa", "encoder": {"backbone": "minilm", "adapter": str(adapter)}, "refine": {}}
    write_run_axes(tmp_path / "run", cfg)
    (adapter / "encoder_fingerprint.json").unlink()  # retrained or deleted later: the run still knows
    axes = read_run_axes(tmp_path / "run")
    assert (axes["adapter"], axes["adapter_hash"], axes["scorer"]) == ("outputs/train/adapter", "feedc0ffee00beef", "fθ")
    assert axes["adapter_scale"] == 1.0


def test_an_interpolated_adapter_is_not_labelled_ftheta(tmp_path: Path) -> None:
    cfg = {"mode": "probe", "encoder": {"backbone": "minilm", "adapter": str(tmp_path), "adapter_scale": 0.5}, "refine": {}}
    axes = run_axes(cfg)
    assert (axes["scorer"], axes["adapter_scale"]) == ("fθ×0.5", 0.5)
    f0 = run_axes({"mode": "probe", "encoder": {"backbone": "minilm", "adapter": None, "adapter_scale": 1.0}, "refine": {}})
    assert (f0["scorer"], f0["adapter_scale"]) == ("f0", None)


def test_tables_read_run_json_before_the_config(tmp_path: Path) -> None:
    run = make_qa_run(tmp_path / "run", "hotpotqa", 2, method="canopy", k=3)
    old = load_run(run)
    assert old.setting("k") == 3 and old.setting("refine") == "parent_relative"  # no run.json: from the config
    axes = {**run_axes(old.config), "k": 9, "refine": "flat_top_m", "adapter": "outputs/x/adapter",
            "adapter_hash": "0123456789abcdef", "study": "recorded"}
    (run / RUN_FILE).write_text(json.dumps(axes))
    new = load_run(run)
    assert new.setting("k") == 9 and new.study == "recorded"
    assert new.setting("adapter") == "outputs/x/adapter (adapter 0123456789ab)"
    md = render_study("recorded", [new])
    assert "k (items per round) = 9" in md and "refiner = flat_top_m" in md
    assert "adapter = outputs/x/adapter (adapter 0123456789ab)" in md


def test_bad_run_json_names_the_file(tmp_path: Path) -> None:
    run = make_qa_run(tmp_path / "run", "hotpotqa", 1, method="canopy")
    (run / RUN_FILE).write_text("[1, 2]")
    with pytest.raises(ValueError, match="run.json: expected a JSON object"):
        load_run(run)


def test_judge_and_match_columns_only_where_a_run_has_them(tmp_path: Path) -> None:
    plain = make_qa_run(tmp_path / "a" / "plain", "hotpotqa", 2, method="vanilla", refine="keep_whole", max_rounds=1)
    judged = make_qa_run(tmp_path / "b" / "judged", "hotpotqa", 2, method="canopy")
    metrics = json.loads((judged / "metrics.json").read_text())
    metrics.update({"eval/judge": 0.5, "eval/judge_ci_low": 0.0, "eval/judge_ci_high": 1.0})
    (judged / "metrics.json").write_text(json.dumps(metrics))
    for m in (plain, judged):  # match is what summarize writes today; drop it from the plain run
        mm = json.loads((m / "metrics.json").read_text())
        if m == plain:
            mm = {k: v for k, v in mm.items() if not k.startswith("eval/match")}
        (m / "metrics.json").write_text(json.dumps(mm))

    only_plain = render_study("s", find_runs([tmp_path / "a"]))
    assert "Judge" not in only_plain and "Match" not in only_plain
    both = render_study("s", find_runs([tmp_path]))
    wide, long = both.split("<details>")
    assert "hotpotqa Judge" in wide and "hotpotqa Match" in wide
    assert "| Judge | Judge 95% CI |" in long and "[0.0, 100.0]" in long
    row = next(r for r in qa_rows(find_runs([tmp_path])) if r["method"] == "canopy")
    assert (row["judge"], row["judge_ci_low"], row["judge_ci_high"]) == (0.5, 0.0, 1.0)


@pytest.fixture
def hydra_job(hydra_ctx):
    """Compose an evaluate config with Hydra's runtime set, as in a job of ``python evaluate.py``."""

    def job(overrides: list[str]):
        cfg = compose("evaluate", overrides=overrides, return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        return cfg

    yield job
    HydraConfig.instance().cfg = None


def test_run_json_records_hydra_choices_and_labels_runs_by_them(hydra_job, tmp_path: Path) -> None:
    cfg = hydra_job(["+ablation=components", "variant=no_projection", "retriever=candidates", "data=tatqa",
                     f"paths.root_dir={tmp_path}"])  # fmt: skip
    axes = read_run_axes(write_run_axes(tmp_path / "run", cfg).parent)
    choices = axes["choices"]
    assert choices["variant"] == "no_projection" and choices["refine"] == "keep_whole" and choices["data"] == "tatqa"
    assert not [g for g in choices if g == "hydra" or g.startswith("hydra/")]  # Hydra's own groups are no labels
    assert {k: axes[k] for k in ("variant", "refine", "controller", "scope", "retriever", "study")} == {
        "variant": "no_projection", "refine": "keep_whole", "controller": "critic", "scope": "candidates",
        "retriever": "bm25", "study": "components"}  # fmt: skip
    assert set(axes) - {"choices"} == set(run_axes({}))  # the other keys as ever


def test_labels_are_the_chosen_options_not_rebuilt_from_class_names() -> None:
    """A group option whose class name says something else (a user's own refiner, controller, retriever)."""
    cfg = {"mode": "qa", "encoder": {"backbone": "minilm", "adapter": None},
           "refine": {"_target_": "my_lab.refiners.Pruner", "descend_margin": 0.1},
           "controller": {"_target_": "my_lab.control.adaptive"},
           "retrieval": {"_target_": "my_lab.splade.build", "k": 5}}  # fmt: skip
    choices = {"refine": "my_pruner", "controller": "adaptive_critic", "retrieval": "splade", "retriever": "corpus",
               "hydra/launcher": "basic"}  # fmt: skip
    axes = run_axes(cfg, choices)
    assert (axes["refine"], axes["controller"], axes["retriever"], axes["scope"]) == (
        "my_pruner", "adaptive_critic", "splade", "corpus")
    assert axes["choices"] == {"refine": "my_pruner", "controller": "adaptive_critic", "retrieval": "splade",
                               "retriever": "corpus"}  # fmt: skip
    for index in ("default", "flat", "ivfpq"):  # the dense retriever over another index: labelled by its ranking
        assert run_axes(cfg, {"retrieval": index})["retriever"] == "dense"
    written_before = run_axes(cfg)  # no choices: the labels read back from the config, no choices key
    assert (written_before["refine"], written_before["controller"]) == ("pruner", "adaptive")
    assert "choices" not in written_before
