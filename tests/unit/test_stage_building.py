"""The qa, probe and evidence modes get their stages from ``pipeline/build.py``; the evidence code is split
along its seams (answer matching, refiners with one leaf ranking, a ``scorer`` stage, one bootstrap family,
one number normaliser); ``method.runner`` and the scorer are ``_target_`` choices the schema checks."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import compose
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate

import canopy_lit.refine as refine
import canopy_lit.refine.flat as refine_flat
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.schema import ConfigError, validate_eval_config
from canopy_lit.types import Item, Table

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "canopy_lit"


def _calls(path: Path) -> set[str]:
    """Names of the functions a module calls (``f(...)`` and ``x.f(...)``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            f = node.func
            out.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return out


def _problems(cfg, key: str) -> list[str]:
    """The schema's problems with ``key`` (others' keys are other tests' business)."""
    try:
        validate_eval_config(cfg)
    except ConfigError as err:
        return [p for p in err.problems if key in p]
    return []


def test_the_qa_probe_and_evidence_modes_build_nothing_themselves() -> None:
    """No ``instantiate`` and no check of what was built (``isinstance(refiner, ...)``, ``type(retriever) is``)
    outside the composition root, for these modes."""
    runners = [PACKAGE / "evaluate.py", *sorted((PACKAGE / "eval").glob("evidence*.py")),
               PACKAGE / "eval" / "answers.py", PACKAGE / "eval" / "probe.py", PACKAGE / "eval" / "summary.py"]  # fmt: skip
    for path in runners:
        assert "instantiate" not in _calls(path) and "get_method" not in _calls(path), path.name
    build = (PACKAGE / "pipeline" / "build.py").read_text(encoding="utf-8")
    assert "isinstance(refiner" not in build and "type(retriever)" not in build
    for name in ("build_evidence_loop", "build_probe", "build_mode_runner", "build_node_scorer"):
        assert callable(getattr(__import__("canopy_lit.pipeline.build", fromlist=[name]), name)), name


def test_one_leaf_ranking_serves_the_three_flat_refiners(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flat top-m, extractive (full and lazy scores) and flat at a matched budget all rank leaves with
    ``refine.flat.best_leaves``; the three live together in ``refine/flat.py``."""
    h = Hierarchy(2)
    trees = [
        h.build(Item("a", "text", title="A", sentences=["a1 a2", "a3", "a4 a5 a6"])),
        h.build(Item("t", "table", title="T", table=Table(["x", "y"], [["1", "2"], ["3", "4"]]))),
    ]
    scores = [np.linspace(0.1, 0.9, len(t)).astype(np.float32) for t in trees]
    seen: list[str] = []
    original = refine_flat.best_leaves

    def spy(*args, **kwargs):
        seen.append("called")
        return original(*args, **kwargs)

    monkeypatch.setattr(refine_flat, "best_leaves", spy)

    class WordsFlatMatched(refine.FlatMatchedRefiner):
        @property
        def count(self):  # type: ignore[override]
            return lambda text: len(text.split())

    def score_nodes(requests):
        return [s[list(r)] for s, r in zip(scores, requests, strict=True)]

    for run in (
        lambda: refine.FlatTopMRefiner(m=2)(trees, scores),
        lambda: refine.ExtractiveRefiner(m=2)(trees, scores),
        lambda: refine.ExtractiveRefiner(m=2).refine_lazily(trees, score_nodes),
        lambda: WordsFlatMatched("words", hierarchy=h)(trees, scores),
    ):
        seen.clear()
        assert run() and seen == ["called"]
    assert refine.ExtractiveRefiner.__module__ == refine.FlatMatchedRefiner.__module__ == "canopy_lit.refine.flat"
    # Same ranking for top-m and extractive on full scores (aggregation aside).
    assert refine.FlatTopMRefiner(m=3)(trees, scores) == refine.ExtractiveRefiner(m=3)(trees, scores)


def test_the_scorer_group_replaces_refine_scorer_and_the_schema_checks_it(hydra_ctx) -> None:
    options = sorted(p.stem for p in (ROOT / "configs" / "scorer").glob("*.yaml"))
    assert options == ["adapter", "f0", "ftheta"]
    for option in options:
        cfg = compose("evaluate", overrides=[f"scorer={option}"])
        assert _problems(cfg, "scorer") == []
        assert cfg.scorer._target_ == "canopy_lit.scoring.node_scorer"
    # refine=extractive brings its own f0 scorer (through the group, not a refiner key); a command line wins.
    cfg = compose("evaluate", overrides=["refine=extractive", "encoder.adapter=/tmp/adapter"])
    assert cfg.scorer.frozen is True and "scorer" not in cfg.refine
    assert compose("evaluate", overrides=["refine=extractive", "scorer=ftheta"]).scorer.require_adapter is True
    assert compose("evaluate", overrides=["method=recomp"]).scorer.frozen is True
    assert compose("evaluate").scorer.frozen is False  # CANOPY: the run's encoder (fθ with an adapter)
    with pytest.raises(ConfigCompositionException):
        compose("evaluate", overrides=["refine=extractive", "refine.scorer=f0"])
    assert _problems(compose("evaluate", overrides=["scorer.frozen=maybe"]), "scorer") == [
        "scorer.frozen must be true or false, got 'maybe'"
    ]
    assert _problems(compose("evaluate", overrides=["+scorer.frozn=true"]), "scorer") == [
        "unknown config key scorer.frozn (did you mean scorer.frozen?)"
    ]


def test_method_runner_is_a_target_the_schema_checks(hydra_ctx) -> None:
    from canopy_lit.eval.modes import run_qa
    from canopy_lit.pipeline.build import build_mode_runner

    cfg = compose("evaluate")
    assert _problems(cfg, "method") == [] and build_mode_runner(cfg).func is run_qa
    carve = compose("evaluate", overrides=["method=carve"])
    assert carve.method.runner._target_ == "canopy_lit.eval.carve.run" and _problems(carve, "method") == []
    assert build_mode_runner(carve).func.__qualname__ == "run" and build_mode_runner(carve).func.__module__ == (
        "canopy_lit.eval.carve"
    )
    assert _problems(compose("evaluate", overrides=["+method.runner.verbose=1"]), "method") == [
        "unknown config key method.runner.verbose (canopy_lit.eval.modes.run_qa takes no such argument)"
    ]


def test_each_mode_runner_is_a_target_block_and_a_new_mode_is_one_more(hydra_ctx) -> None:
    """``mode`` picks its runner from ``modes`` (no table of runners in code): the four shipped ones, a mode of
    one's own added from the command line, and a name that is no mode refused with the nearest one."""
    from canopy_lit.eval import modes
    from canopy_lit.pipeline.build import build_mode_runner

    shipped = {"qa": modes.run_qa, "probe": modes.run_probe, "evidence": modes.run_evidence_mode,
               "retrieval": modes.run_retrieval}  # fmt: skip
    for mode, runner in shipped.items():
        cfg = compose("evaluate", overrides=[f"mode={mode}"])
        assert build_mode_runner(cfg).func is runner and _problems(cfg, "mode") == [], mode
    mine = compose("evaluate", overrides=["+modes.mine={_target_: canopy_lit.eval.modes.run_probe, _partial_: true}",
                                          "mode=mine"])  # fmt: skip
    assert _problems(mine, "mode") == [] and build_mode_runner(mine).func is modes.run_probe
    typo = compose("evaluate", overrides=["mode=retreival"])
    assert _problems(typo, "mode must") == [
        "mode must be one of qa, probe, evidence, retrieval, got 'retreival' (did you mean retrieval?); a mode of "
        "your own is a _target_ block under modes (+modes.retreival=...)"
    ]
    sharded = compose("evaluate", overrides=["+modes.mine={_target_: canopy_lit.eval.modes.run_probe, _partial_: true}",
                                             "mode=mine", "shard=0/2"])  # fmt: skip
    assert _problems(sharded, "shard=") == [
        "shard=0/2: mode=mine runs whole (shards split qa and evidence runs); remove shard="
    ]


def test_setting_lines_are_run_axes(hydra_ctx) -> None:
    """The line under each run's table states run.json's axes: RECOMP's f0 scorer even with an adapter set,
    the refiner by its option name."""
    from canopy_lit.eval.evidence import EVIDENCE_SETTING
    from canopy_lit.eval.modes import PROBE_SETTING, QA_SETTING
    from canopy_lit.eval.summary import run_setting

    recomp = compose("evaluate", overrides=["method=recomp", "encoder.adapter=/tmp/adapter", "data=nq"])
    line = run_setting(recomp, QA_SETTING)
    assert line.startswith("benchmark=nq split=") and "method=recomp" in line
    assert line.endswith(" refine=extractive scorer=f0 encoder=minilm adapter=adapter")  # the path as run.json has it
    ev = compose("evaluate", overrides=["experiment=evidence", "evidence.tokenizer=tok"])
    assert run_setting(ev, EVIDENCE_SETTING).endswith("scorer=f0 encoder=minilm tokenizer=tok")
    assert "scope=candidates k=5 B=2 refine=parent_relative" in run_setting(ev, EVIDENCE_SETTING)
    probe = compose("evaluate", overrides=["experiment=probe", "refine.descend_margin=0.02"])
    assert "B=2 descend_margin=0.02 scorer=f0" in run_setting(probe, PROBE_SETTING)


def test_one_bare_number_normaliser() -> None:
    import canopy_lit.data.readers.tatqa as tatqa
    import canopy_lit.eval.answers as answers
    from canopy_lit.numbers import as_number

    assert tatqa.as_number is as_number and answers.as_number is as_number
    assert not hasattr(tatqa, "_BARE_NUMBER")
    assert tatqa.split_header([["", "2019", "2018"], ["Sales", "(1,234.5)", "3.2 million"]])[0] == ["", "2019", "2018"]


def test_flat_matched_renders_with_the_runs_tree(hydra_ctx) -> None:
    """The matched budget is counted on evidence rendered by the run's ``tree`` (its config names it)."""
    cfg = compose("evaluate", overrides=["refine=flat_matched", "tree.branching=3", "+evidence.tokenizer=tok"])
    refiner = instantiate(cfg.refine)
    assert refiner.hierarchy.branching == 3 and refiner.tokenizer == "tok"


def test_compare_cli_pairs_two_runs(tmp_path: Path) -> None:
    def run(name: str, found: list[bool], tokens: list[int]) -> Path:
        d = tmp_path / name
        d.mkdir()
        recs = [{"id": f"q{i}", "status": "ok", "evidence": {"answer_found": f, "tokens": t}}
                for i, (f, t) in enumerate(zip(found, tokens, strict=True))]  # fmt: skip
        (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        return d

    a = run("a", [True, True, False, True], [50, 60, 40, 30])
    b = run("b", [True, False, False, True], [100, 100, 100, 100])
    res = subprocess.run([sys.executable, "-m", "canopy_lit.eval.evidence", str(a), str(b)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "paired questions 4 (4 with a measurable answer)" in res.stdout
    assert "answer recall A - B: +25.0 points" in res.stdout and "tokens A / B: 0.450" in res.stdout


def test_evidence_and_probe_stages_come_from_config(hydra_ctx, tmp_path: Path) -> None:
    """Real MiniLM, bundled HotpotQA: the evidence loop caches the candidates' f0 vectors because the builder
    asks the retriever factory to, flat-matched renders with the run's tree, no LLM stage is built; the probe
    scores through the ``scorer`` group's view."""
    from canopy_lit.data import load_split
    from canopy_lit.pipeline.build import build_evidence_loop, build_probe
    from canopy_lit.reader import NoReader
    from canopy_lit.scoring.scorers import FrozenEncoderView, QuerySideEncoder

    common = ["experiment=evidence", "llm=llamacpp_smollm2", f"retrieval.node_cache_dir={tmp_path}"]
    cfg = compose("evaluate", overrides=[*common, "refine=flat_matched", "tree.branching=3"])
    bench, _ = load_split("hotpotqa", str(ROOT / "data" / "hotpotqa"), split="test")
    loop = build_evidence_loop(cfg, bench)
    assert isinstance(loop.retriever.item_cache.encoder, QuerySideEncoder)
    assert loop.refiner.hierarchy.branching == loop.hierarchy.branching == 3
    assert isinstance(loop.reader, NoReader) and loop.controller is None and loop.aggregation is None
    assert loop.settings.max_rounds == 1 and loop.scorer is not None
    with pytest.raises(ValueError, match="retrieval.routing=false"):
        build_evidence_loop(compose("evaluate", overrides=[*common, "retrieval.routing=true"]), bench)
    stages = build_probe(compose("evaluate", overrides=["experiment=probe", "scorer=f0", "refine.descend_margin=0.01"]))
    assert isinstance(stages.scorer.encoder, FrozenEncoderView) and stages.descend_margin == 0.01


def test_a_group_factory_gets_only_the_keywords_it_declares() -> None:
    """``build.call_declared``: a factory is never handed a keyword it does not declare (no ``unused`` parameters
    kept for a uniform call), one taking ``**kwargs`` gets them all, and a missing required one still fails."""
    from canopy_lit.control import critic_controller, no_controller
    from canopy_lit.pipeline.build import call_declared

    offered = {"llm": "an llm", "hierarchy": Hierarchy(2), "data": {"name": "hotpotqa"}}
    assert call_declared(lambda llm: llm, **offered) == "an llm"
    assert call_declared(lambda **kw: sorted(kw), **offered) == ["data", "hierarchy", "llm"]
    assert call_declared(no_controller, **offered) is None
    assert call_declared(critic_controller, **offered).llm == "an llm"
    with pytest.raises(TypeError, match="threshold"):
        call_declared(lambda llm, threshold: None, **offered)
