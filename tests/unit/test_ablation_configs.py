"""Every study preset composes with the real configs, and each grid point sets what its row claims."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
STUDIES = sorted(p.stem for p in (CONFIGS / "ablation").glob("[!_]*.yaml"))  # _base.yaml: shared keys, no study


def sweep(study: str) -> dict[str, list[str]]:
    hydra = yaml.safe_load((CONFIGS / "ablation" / f"{study}.yaml").read_text()).get("hydra") or {}
    params = (hydra.get("sweeper") or {}).get("params") or {}  # none: its script passes each sweep's axes
    return {k: [v.strip() for v in str(vals).split(",")] for k, vals in params.items()}


@pytest.fixture(scope="module")
def hydra_ctx():
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        yield
    GlobalHydra.instance().clear()


def test_every_study_takes_the_shared_keys_from_base_and_repeats_none() -> None:
    """One copy of the adapter key, the sweep folder and the run-folder naming (configs/ablation/_base.yaml)."""
    for study in STUDIES:
        cfg = yaml.safe_load((CONFIGS / "ablation" / f"{study}.yaml").read_text())
        assert cfg["defaults"][0] == "_base", f"{study}.yaml: `- _base` must come first in its defaults"
        hydra = cfg.get("hydra") or {}
        assert "job" not in hydra and "sweep" not in hydra and "adapter" not in cfg, f"{study}.yaml repeats _base"


def test_base_names_run_folders_by_the_swept_overrides_only(hydra_ctx) -> None:
    cfg = compose(config_name="evaluate", overrides=["+ablation=k", "adapter=/some/adapter"], return_hydra_config=True)
    excluded = cfg.hydra.job.config.override_dirname.exclude_keys
    assert {"adapter", "encoder.adapter", "limit", "hydra.sweep.dir"} <= set(excluded)
    assert cfg.hydra.sweep.dir == "outputs/ablation/k" and cfg.encoder.adapter == "/some/adapter"


def test_the_paper_studies_exist() -> None:
    assert {"main", "components", "branching", "k", "flat", "exclude_seen", "probe"} <= set(STUDIES)
    assert sweep("k")["retrieval.k"] == ["5", "10", "20"] and sweep("k")["method"] == ["vanilla", "ircot", "canopy"]
    assert sweep("branching")["tree.branching"] == ["2", "3", "4"]
    for study in STUDIES:
        for bench in sweep(study).get("data", []):
            assert (CONFIGS / "data" / f"{bench}.yaml").is_file(), f"{study}: unknown benchmark {bench}"


@pytest.mark.parametrize("study", [s for s in STUDIES if sweep(s)])
def test_every_grid_point_composes(hydra_ctx, study: str) -> None:
    params = {k: v for k, v in sweep(study).items() if k != "data"}  # benchmarks are checked above
    # every value of every axis at least once (the full product only multiplies compose time)
    width = max(len(v) for v in params.values())
    for combo in ([vals[i % len(vals)] for vals in params.values()] for i in range(width)):
        overrides = [f"{k}={v}" for k, v in zip(params, combo)]
        cfg = compose("evaluate", overrides=[f"+ablation={study}", "adapter=/tmp/adapter", *overrides],
                      return_hydra_config=True)
        point = dict(zip(params, combo))
        assert cfg.study == study
        assert cfg.hydra.sweep.dir == f"outputs/ablation/{study}"
        # the adapter path (a folder) never names a sweep subdir
        assert "adapter" in cfg.hydra.job.config.override_dirname.exclude_keys
        variant = point.get("variant", "full")
        assert cfg.encoder.adapter == (None if variant == "f0" else "/tmp/adapter")
        target = cfg.refine._target_.rsplit(".", 1)[-1]
        if variant == "no_projection":
            assert target == "KeepWholeRefiner"
        if variant == "no_iteration":
            assert cfg.loop.max_rounds == 1
        if "method" in point:
            assert cfg.method.name == point["method"]
        if "retrieval.k" in point:
            assert cfg.retrieval.k == int(point["retrieval.k"])
        if "tree.branching" in point:
            assert cfg.tree.branching == int(point["tree.branching"])
        if "refine.m" in point:
            assert target == "FlatTopMRefiner" and cfg.refine.m == int(point["refine.m"])
        if study == "probe":
            assert cfg.mode == "probe"


def test_probe_defaults_to_held_out_questions(hydra_ctx) -> None:
    # train/val hold the adapter's own training questions: the probe's own command must not score them.
    assert compose("evaluate", overrides=["experiment=probe"]).data.split == "test"
    assert compose("evaluate", overrides=["+ablation=probe"]).data.split == "test"


QA_STUDIES = ["main", "components", "branching", "k", "flat", "exclude_seen"]


@pytest.mark.parametrize("study", QA_STUDIES)
def test_qa_studies_report_the_unified_corpus(hydra_ctx, study: str) -> None:
    # The reported setting retrieves from one corpus of every benchmark, even under the CPU preset,
    # whose own scope is each question's delivered items; that scope stays a labelled override.
    for extra in ([], ["experiment=quickstart_eval"]):
        cfg = compose("evaluate", overrides=[f"+ablation={study}", *extra], return_hydra_config=True)
        assert cfg.hydra.runtime.choices.retriever == "corpus"
        assert cfg.retrieval._target_.endswith("build_bm25_retriever")
        assert sorted(cfg.retrieval.benchmarks) == ["hotpotqa", "nq", "ottqa", "tatqa"]
    cfg = compose("evaluate", overrides=[f"+ablation={study}", "experiment=quickstart_eval", "retriever=candidates"],
                  return_hydra_config=True)
    assert cfg.hydra.runtime.choices.retriever == "candidates"


def test_studies_run_in_parallel_lanes_with_the_joblib_launcher(hydra_ctx) -> None:
    # `hydra/launcher=joblib hydra.launcher.n_jobs=2`: one grid point per core (the main table's recipe).
    cfg = compose("evaluate", overrides=["+ablation=main", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
                  return_hydra_config=True)
    assert cfg.hydra.launcher._target_ == "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
    assert cfg.hydra.launcher.n_jobs == 2


# scripts/frontier.sh's sweeps (one point of each): overrides -> (refiner, frozen scorer, δ or m, k)
FRONTIER_POINTS = [
    ("scorer=ftheta refine.descend_margin=0.04 variant=full", ("ParentRelativeRefiner", False, 0.04, 5)),
    ("scorer=f0 refine.descend_margin=0.12 variant=flat_matched", ("FlatMatchedRefiner", True, 0.12, 5)),
    ("scorer=ftheta refine.descend_margin=0.06 variant=full retrieval.k=10", ("ParentRelativeRefiner", False, 0.06, 10)),
    ("variant=no_projection retrieval.k=2", ("KeepWholeRefiner", False, None, 2)),
    ("refine=flat_top_m scorer=ftheta refine.m=8", ("FlatTopMRefiner", False, 8, 5)),
    ("variant=extractive refine.m=20", ("ExtractiveRefiner", True, 20, 5)),
]


def test_the_frontier_script_sweeps_its_axes_and_every_point_composes(hydra_ctx) -> None:
    script = (CONFIGS.parent / "scripts" / "frontier.sh").read_text()
    assert "+ablation=frontier" in script and "canopy_lit.studies.frontier choose" in script
    assert "data.split=val" in script  # δ is chosen on validation before any test sweep
    for overrides, (refiner, frozen, value, k) in FRONTIER_POINTS:
        cfg = compose("evaluate", overrides=["+ablation=frontier", "adapter=/tmp/adapter", *overrides.split()],
                      return_hydra_config=True)  # fmt: skip
        assert cfg.study == "frontier" and cfg.mode == "evidence" and cfg.retrieval.k == k
        assert cfg.refine._target_.rsplit(".", 1)[-1] == refiner
        assert cfg.encoder.adapter == "/tmp/adapter"  # both scorers name the adapter; the scorer decides
        assert bool(cfg.scorer.frozen) is frozen
        if value is not None:
            assert cfg.refine.get("descend_margin", cfg.refine.get("m")) == value
        assert "adapter" in cfg.hydra.job.config.override_dirname.exclude_keys


def test_the_frontier_item_drop_sweep_composes_to_canopy_with_its_margin(hydra_ctx) -> None:
    script = (CONFIGS.parent / "scripts" / "frontier.sh").read_text()
    assert "refine.item_margin=" in script
    cfg = compose("evaluate", overrides=["+ablation=frontier", "adapter=/tmp/adapter", "scorer=ftheta",
                                         "refine.descend_margin=0.04", "variant=full", "refine.item_margin=0.2"])  # fmt: skip
    assert cfg.refine._target_.rsplit(".", 1)[-1] == "ParentRelativeRefiner"
    assert (cfg.refine.descend_margin, cfg.refine.item_margin) == (0.04, 0.2)
    assert compose("evaluate", overrides=["+ablation=frontier", "variant=full"]).refine.item_margin is None  # off
