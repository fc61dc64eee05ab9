"""One composition root, stages as config groups, entry points of one shape.

Composes the real configs (no model is loaded): the controller and retriever groups build their
stages through ``_target_``, methods pick groups instead of naming a string switch, ``method.runner``
chooses the QA runner, and refiners declare what the loop reads.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra import compose
from hydra.utils import instantiate

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"



def _project_imports(path: Path) -> set[str]:
    """Every ``canopy_lit`` module a file imports, at module level or inside functions."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("canopy_lit"):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("canopy_lit"))
    return out


def test_the_pipeline_imports_nothing_from_eval() -> None:
    """The composition root builds; the harness in eval/ runs. No edge the other way round."""
    for path in sorted((ROOT / "canopy_lit" / "pipeline").glob("*.py")):
        assert not {m for m in _project_imports(path) if m.startswith("canopy_lit.eval")}, path.name


def test_entry_points_are_thin_over_one_library_function() -> None:
    for script, module in (("train.py", "canopy_lit.train"), ("evaluate.py", "canopy_lit.evaluate")):
        tree = ast.parse((ROOT / script).read_text(encoding="utf-8"))
        imported = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert (module, "run") in imported, script
        functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        assert "main" in functions and len(functions) <= 2, functions  # main (+ evaluate.py's exit helper)


class _FakeLLM:
    calibration = {"critic_yes_threshold": 0.6}


@pytest.mark.parametrize(
    ("method", "controller"),
    [("canopy", "LLMCritic"), ("flat", "LLMCritic"), ("ircot", "IRCoTController"),
     ("vanilla", None), ("no_retrieval", None), ("recomp", None), ("universalrag", None)],
)  # fmt: skip
def test_methods_pick_their_controller_from_the_group(hydra_ctx, method: str, controller: str | None) -> None:
    from canopy_lit.hierarchy import Hierarchy
    from canopy_lit.pipeline.build import build_controller

    overrides = [f"method={method}", "paths.root_dir=/tmp/canopy-lit-test"]
    cfg = compose("evaluate", overrides=[*overrides, "controller.demos=0"] if method == "ircot" else overrides)
    assert "controller" not in cfg.method  # a group choice, not a string the builder switches on
    built = build_controller(cfg, _FakeLLM(), Hierarchy(2))
    assert (type(built).__name__ if built is not None else None) == controller


def test_critic_knobs_reach_the_critic(hydra_ctx) -> None:
    from canopy_lit.hierarchy import Hierarchy
    from canopy_lit.pipeline.build import build_controller

    critic = build_controller(compose("evaluate", overrides=["critic.mode=json"]), _FakeLLM(), Hierarchy(2))
    assert critic.mode == "json" and critic.threshold == 0.6  # null threshold: the llm's calibrated value
    critic = build_controller(compose("evaluate", overrides=["critic.threshold=0.3"]), _FakeLLM(), Hierarchy(2))
    assert critic.mode == "logprob" and critic.threshold == 0.3


def test_retriever_group_labels_match_the_option(hydra_ctx) -> None:
    for p in sorted((CONFIGS / "retriever").glob("*.yaml")):
        cfg = compose("evaluate", overrides=[f"retriever={p.stem}"])
        assert cfg.retriever.name == p.stem and "scope" not in cfg.retrieval


def test_method_runner_is_chosen_by_config(hydra_ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    import canopy_lit.eval.modes as ev
    from canopy_lit.pipeline.build import build_mode_runner

    def run(cfg):
        return build_mode_runner(cfg)(cfg)

    calls: list[str] = []
    monkeypatch.setattr(ev, "run_qa", lambda cfg: calls.append("qa") or {"eval/f1": 1.0})
    monkeypatch.setitem(sys.modules, "fake_runner", SimpleNamespace(run=lambda cfg: calls.append(cfg.method.name) or {"x": 2.0}))
    assert run(compose("evaluate", overrides=["method=vanilla"])) == {"eval/f1": 1.0}
    assert run(compose("evaluate", overrides=["method.runner._target_=fake_runner.run"])) == {"x": 2.0}
    assert calls == ["qa", "canopy"]
    carve = compose("evaluate", overrides=["method=carve"]).method.runner  # CARVE names its own runner
    assert carve._target_ == "canopy_lit.eval.carve.run" and carve._partial_


def test_shipped_refiners_declare_what_the_loop_relies_on(hydra_ctx) -> None:
    for p in sorted((CONFIGS / "refine").glob("*.yaml")):
        try:
            refiner = instantiate(compose("evaluate", overrides=[f"refine={p.stem}"]).refine)
        except Exception as err:  # an optional extra's refiner (longllmlingua) where the extra is not installed
            if "canopy-lit[" not in str(err):
                raise
            continue
        assert isinstance(refiner.needs_scores, bool) and isinstance(refiner.lazy, bool), p.stem
        assert not refiner.lazy or callable(refiner.refine_lazily), p.stem
