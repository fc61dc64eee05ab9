"""``pipeline/build.py`` (and ``carve/build.py`` for CARVE) is the one
place that turns their config into stages, and each implementation choice is a ``_target_``.

Structure tests read the source (``ast``); the group tests compose the real configs, validate them with
the schema and build the stages from them (the embedding reranker over the real MiniLM: no LLM).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hydra import compose

from canopy_lit.schema import ConfigError, validate_eval_config

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "canopy_lit"
# The modules whose stages build.py builds: they take built objects and never instantiate a config.
BUILT_ELSEWHERE = [
    *sorted(p for p in (PACKAGE / "carve").glob("*.py") if p.name != "build.py"),
    PACKAGE / "eval" / "carve.py",
    PACKAGE / "retrieval" / "evaluate.py",
    PACKAGE / "eval" / "judge.py",
    PACKAGE / "retrieval" / "scopes.py",
    PACKAGE / "retrieval" / "candidates.py",
]


def _calls(path: Path) -> set[str]:
    """Names of the functions a module calls (``f(...)`` and ``x.f(...)``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            out.add(func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else "")
    return out


def _defined(path: Path) -> set[str]:
    return {n.name for n in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


@pytest.mark.parametrize("path", BUILT_ELSEWHERE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_build_turns_carve_retrieval_and_judge_config_into_stages(path: Path) -> None:
    assert not {"instantiate", "get_method", "get_object"} & _calls(path), path


def test_retrieval_evaluation_takes_built_arguments_not_a_config() -> None:
    tree = ast.parse((PACKAGE / "retrieval" / "evaluate.py").read_text(encoding="utf-8"))
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "evaluate_retrieval"]
    assert "cfg" not in {a.arg for a in fn.args.args + fn.args.kwonlyargs}


def test_build_has_a_builder_for_each_of_these_modes() -> None:
    built = _defined(PACKAGE / "pipeline" / "build.py")
    carve = _defined(PACKAGE / "carve" / "build.py")
    assert {"build_carve_corpus", "build_carve_method", "build_carve_pipeline", "CarveParts"} <= carve
    assert {"build_retrieval_eval", "build_judge", "build_index", "build_candidate_ranking"} <= built
    assert "judge_from_config" not in _defined(PACKAGE / "eval" / "judge.py")
    assert "SharedModels" not in _defined(PACKAGE / "eval" / "carve.py")


def test_one_reciprocal_rank_fusion_and_one_question_loader() -> None:
    """CARVE's fixed fusion is ``retrieval.hybrid``'s RRF; its questions come from ``build.load_questions``."""
    owners = [p for p in PACKAGE.rglob("*.py") if "reciprocal_rank_fusion" in _defined(p)]
    assert owners == [PACKAGE / "retrieval" / "hybrid.py"]
    assert "reciprocal_rank_fusion" in _calls(PACKAGE / "carve" / "baselines.py")
    carve_calls = set().union(*(_calls(p) for p in [*(PACKAGE / "carve").glob("*.py"), PACKAGE / "eval" / "carve.py"]))
    assert "load_questions" in carve_calls and not {"load_benchmark", "split_questions"} & carve_calls


# --------------------------------------------------------------------------- carve/method, carve/normalisation


def _carve(*overrides: str):
    return compose("evaluate", overrides=["method=carve", "carve/reranker=embedding", "paths.root_dir=/tmp/canopy-lit-test", *overrides])


@pytest.mark.parametrize(
    ("overrides", "cls", "name"),
    [
        ([], "ClipAdaptiveReranker", "carve"),
        (["carve/method=rrf", "carve.rrf_k=30"], "FusionRanking", "rrf"),
        (["carve/method=single", "carve.method.config=text_clip"], "SingleConfigRanking", "single:text_clip"),
    ],
)  # fmt: skip
def test_carve_method_group_composes_validates_and_builds(hydra_ctx, overrides, cls, name) -> None:
    from canopy_lit.carve.build import CarveParts, build_carve_method

    cfg = _carve(*overrides)
    validate_eval_config(cfg)
    ranking = build_carve_method(cfg, CarveParts(cfg))
    assert type(ranking).__name__ == cls and ranking.name == name
    if cls == "FusionRanking":
        assert ranking.rrf_k == 30.0  # carve.rrf_k reaches the method through its option
    if cls == "ClipAdaptiveReranker":
        assert ranking.cross_encoder.kind.startswith("embedding") and ranking.normalisation.name == "zscore"
        assert ranking.frame_units == "all" and ranking.settings()["normalisation"] == "zscore"


def test_carve_normalisation_group_reaches_the_reranker(hydra_ctx) -> None:
    from canopy_lit.carve import MinMax, NoNormalisation
    from canopy_lit.carve.build import CarveParts, build_carve_method

    for option, cls in (("minmax", MinMax), ("none", NoNormalisation)):
        cfg = _carve(f"carve/normalisation={option}", "carve.frame_units=best")
        validate_eval_config(cfg)
        ranking = build_carve_method(cfg, CarveParts(cfg))
        assert type(ranking.normalisation) is cls and ranking.frame_units == "best"


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        (["carve/method=single", "carve.method.config=audio_clip"],
         "carve.method.config must be one of visual_frame, visual_clip, text_frame, text_clip, got 'audio_clip'"),
        (["+carve.method.bogus=1"], "unknown config key carve.method.bogus"),
        (["carve.frame_units=some"], "carve.frame_units must be one of all, best, got 'some'"),
        (["carve/method=rrf", "carve.rrf_k=-1"], "carve.rrf_k must be a number >= 0, got -1"),
    ],
)  # fmt: skip
def test_schema_checks_the_carve_method_block(hydra_ctx, overrides, problem) -> None:
    with pytest.raises(ConfigError) as info:
        validate_eval_config(_carve(*overrides))
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems


# --------------------------------------------------------------------------- candidate ranking


@pytest.mark.parametrize("option", ["default", "bm25", "hybrid"])
def test_candidate_ranking_is_a_target_of_the_retrieval_option(hydra_ctx, option) -> None:
    from canopy_lit.pipeline.build import build_candidate_ranking

    rrf_k = ["retrieval.rrf_k=7"] if option == "hybrid" else []
    cfg = compose("evaluate", overrides=[f"retrieval={option}", "retriever=candidates", *rrf_k])
    validate_eval_config(cfg)
    ranking = build_candidate_ranking(cfg)
    assert ranking.name == {"default": "dense", "bm25": "bm25", "hybrid": "hybrid"}[option]
    if option == "hybrid":
        assert ranking.rrf_k == 7 and ranking.weights == {"dense": 1.0, "bm25": 1.0}


def test_schema_checks_the_candidate_ranking_block(hydra_ctx) -> None:
    with pytest.raises(ConfigError, match=r"unknown config key retrieval\.candidate_ranking\.depth"):
        validate_eval_config(compose("evaluate", overrides=["retrieval=hybrid", "+retrieval.candidate_ranking.depth=3"]))


def test_a_method_option_left_unset_is_refused_before_any_build(hydra_ctx) -> None:
    from canopy_lit.carve.build import CarveParts, build_carve_method

    cfg = _carve("carve/method=single")  # config: ??? in configs/carve/method/single.yaml
    with pytest.raises(ConfigError, match=r"^carve\.method\.config must be set"):
        build_carve_method(cfg, CarveParts(cfg))


def test_cli_method_names_stand_for_the_groups_options() -> None:
    """``python -m canopy_lit.carve compare --methods carve,rrf,single:<config>`` builds each from the group."""
    from canopy_lit.carve.__main__ import ALL_METHODS, method_option

    nodes = {name: method_option(name) for name in ALL_METHODS}
    assert nodes["carve"]._target_.endswith(".ClipAdaptiveReranker") and nodes["rrf"]._target_.endswith(".FusionRanking")
    assert method_option("single:Text-Clip").config == "text_clip"
    for bad in ("oracle", "single", "rrf:text_clip"):
        with pytest.raises(ValueError, match="unknown CARVE method"):
            method_option(bad)
