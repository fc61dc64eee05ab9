"""Issue "Reliability" 1 and 8: configs are checked before any work, and backend knobs stay in their backend.

Most cases call the validators on the real composed configs (fast); a few go through
``evaluate.py`` / ``train.py`` for the exit status (2) and the one-line message without a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from evaluate_runner import ROOT, config_problems, records, run_script
from hydra import compose
from hydra.utils import instantiate

from canopy_lit.schema import validate_eval_config

CONFIGS = ROOT / "configs"



def eval_problems(*overrides: str) -> list[str]:
    return config_problems("evaluate", *overrides)


def train_problems(*overrides: str) -> list[str]:
    return config_problems("train", *overrides)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("retrieval.k=0", "retrieval.k must be an integer >= 1, got 0 (method=canopy retrieves"),
        ("retrieval.k=-1", "retrieval.k must be an integer >= 1, got -1 (method=canopy retrieves"),
        ("loop.max_rounds=0", "loop.max_rounds must be an integer >= 1, got 0 (method=canopy retrieves"),
        ("loop.max_rounds=-2", "loop.max_rounds must be an integer >= 1, got -2 (method=canopy retrieves"),
        ("tree.branching=two", "tree.branching must be an integer >= 2, got 'two'"),
        ("tree.branching=1", "tree.branching must be an integer >= 2, got 1"),
        ("tree.branching=true", "tree.branching must be an integer >= 2, got True"),
        ("loop.reader_max_tokens=0", "loop.reader_max_tokens must be an integer >= 1, got 0"),
        ("limit=0", "limit must be null or an integer >= 1, got 0"),
        ("concurrency=0", "concurrency must be an integer >= 1, got 0"),
        ("threads=0", "threads must be null or an integer >= 1, got 0"),
        ("critic.mode=maybe", "critic.mode must be one of logprob, json, got 'maybe'"),
        ("mode=prob", "mode must be one of qa, probe, evidence, retrieval, got 'prob' (did you mean probe?)"),
        ("+loop.max_round=1", "unknown config key loop.max_round (did you mean loop.max_rounds?)"),
        ("+retrieval.kk=3", "unknown config key retrieval.kk (did you mean retrieval.k?)"),
        ("+limt=3", "unknown config key limt (did you mean limit?)"),
        ("+controller.demo=1", "unknown config key controller.demo ("),
        ("+retriever.pol=x", "unknown config key retriever.pol (canopy_lit.retrieval.scopes.corpus_retriever takes"),
    ],
)
def test_bad_evaluate_knob_is_one_line_naming_key_and_rule(hydra_ctx, override: str, message: str) -> None:
    problems = eval_problems("method=canopy", override)
    assert len(problems) == 1 and problems[0].startswith(message), problems


@pytest.mark.parametrize("override", ["retrieval.k=0", "loop.max_rounds=0"])
def test_methods_that_do_not_retrieve_may_use_zero(hydra_ctx, override: str) -> None:
    assert eval_problems("method=no_retrieval", override) == []
    assert eval_problems("method=no_retrieval", "retrieval.k=-1") != []  # negative is never valid


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.optimizer.lr=0", "model.optimizer.lr must be a number > 0, got 0"),
        ("model.optimizer.lr=-1e-4", "model.optimizer.lr must be a number > 0, got -0.0001"),
        ("model.lora_r=0", "model.lora_r must be an integer >= 1, got 0"),
        ("model.scale=0", "model.scale must be a number > 0, got 0"),
        ("model.gold_child_weight=0", "model.gold_child_weight must be a number > 0, got 0"),
        ("model.gold_sibling_weight=0", "model.gold_sibling_weight must be a number > 0, got 0"),
        ("model.scheduler.decay=cosin", "model.scheduler.decay must be one of constant, linear, cosine, got 'cosin'"),
        ("datamodule.batch_size=0", "datamodule.batch_size must be an integer >= 1, got 0"),
        ("trainer.max_steps=0", "trainer.max_steps must be -1 or an integer >= 1, got 0"),
        ("tree.branching=two", "tree.branching must be an integer >= 2, got 'two'"),
        ("+model.lora_rank=4", "unknown config key model.lora_rank (did you mean model.lora_r"),
    ],
)
def test_bad_train_knob_is_one_line_naming_key_and_rule(hydra_ctx, override: str, message: str) -> None:
    problems = train_problems("experiment=quickstart", override)
    assert any(p.startswith(message) for p in problems), problems


def test_every_preset_passes_validation(hydra_ctx) -> None:
    """No false alarms: every option of every evaluate group, every study and train preset as shipped is valid."""
    bad = {}
    combos = [
        [f"{group}={p.stem}"]
        for group in ("data", "encoder", "tree", "refine", "retrieval", "retriever", "controller", "method")
        for p in sorted((CONFIGS / group).glob("*.yaml"))
    ]
    combos += [
        ["experiment=quickstart_eval", f"llm={p.stem}"] for p in sorted((CONFIGS / "llm").glob("*.yaml"))
    ]
    combos += [[f"experiment={e}"] for e in ("probe", "retrieval", "evidence")]
    combos += [[f"+ablation={p.stem}"] for p in sorted((CONFIGS / "ablation").glob("[!_]*.yaml"))]
    for combo in combos:
        if problems := eval_problems(*combo):
            bad[" ".join(combo)] = problems
    for combo in ([], ["experiment=quickstart"], ["experiment=shared_lora"], ["debug=fdr"], ["debug=limit"]):
        if problems := train_problems(*combo):
            bad["train " + " ".join(combo)] = problems
    assert bad == {}


@pytest.mark.parametrize("llm", ["openai", "vllm"])
def test_server_backends_compose_with_the_quickstart_preset(hydra_ctx, llm: str) -> None:
    """``llm.n_ctx`` (a llama.cpp knob) does not leak from experiment=quickstart_eval."""
    for overrides in (
        [f"llm={llm}", "experiment=quickstart_eval"],
        ["experiment=quickstart_eval", f"llm={llm}"],
    ):
        cfg = compose("evaluate", overrides=overrides)
        assert "n_ctx" not in cfg.llm
        validate_eval_config(cfg)
    cfg = compose("evaluate", overrides=["experiment=quickstart_eval"])
    assert cfg.llm.n_ctx == 6144  # the quickstart's llama.cpp context is unchanged


def test_openai_backend_instantiates_under_the_quickstart_preset(hydra_ctx) -> None:
    from canopy_lit.llm.openai import OpenAILLM

    cfg = compose("evaluate", overrides=["llm=openai", "experiment=quickstart_eval"])
    llm = instantiate(
        cfg.llm
    )  # was: TypeError: OpenAILLM.__init__() got an unexpected keyword argument 'n_ctx'
    try:
        assert isinstance(llm, OpenAILLM)
    finally:
        llm.close()


def test_backend_knob_of_another_backend_is_named(hydra_ctx) -> None:
    problems = eval_problems("llm=openai", "+llm.n_ctx=4096")
    assert problems == [
        "unknown config key llm.n_ctx (canopy_lit.llm.openai.OpenAILLM takes no such argument)"
    ]


def test_evaluate_cli_exits_2_with_every_problem_before_any_work(tmp_path: Path) -> None:
    out = run_script(
        "evaluate.py", tmp_path, "method=canopy", "retrieval.k=0", "tree.branching=two", "+loop.max_round=1"
    )
    assert out.status == 2
    lines = out.stderr.strip().splitlines()
    assert lines == [
        "evaluate.py: error: unknown config key loop.max_round (did you mean loop.max_rounds?)",
        "evaluate.py: error: retrieval.k must be an integer >= 1, got 0 "
        "(method=canopy retrieves; only a method with method.retrieves=false may use 0)",
        "evaluate.py: error: tree.branching must be an integer >= 2, got 'two'",
    ]
    assert "Traceback" not in out.stderr + out.stdout
    assert records(tmp_path) == [] and not (tmp_path / "metrics.json").exists()


def test_train_cli_exits_2_before_any_work(tmp_path: Path) -> None:
    out = run_script("train.py", tmp_path, "experiment=quickstart", "model.optimizer.lr=-1")
    assert out.status == 2
    assert out.stderr.strip() == "error: model.optimizer.lr must be a number > 0, got -1"
    assert "Traceback" not in out.stderr and not (tmp_path / "adapter").exists()


def test_each_range_and_choice_is_declared_once_by_its_owner() -> None:
    """The validator reads a key's range from the constructor that takes it (``Annotated``/``Literal`` in its
    signature), not from a copy beside it: the same bound moves with the code."""
    import typing

    from omegaconf import OmegaConf

    from canopy_lit.schema.signatures import target_keys

    none = OmegaConf.create({})
    owned = {
        ("canopy_lit.hierarchy.Hierarchy", "branching"): {"ge": 2},
        ("canopy_lit.training.schedules.warmup_schedule", "warmup_ratio"): {"ge": 0, "lt": 1},
        ("canopy_lit.refine.ParentRelativeRefiner", "descend_margin"): {"ge": -1.0, "le": 1.0},
        ("canopy_lit.retrieval.index.FaissIndex", "pq_nbits"): {"ge": 1, "le": 16},
        ("canopy_lit.control.critic.critic_controller", "threshold"): {"ge": 0.0, "le": 1.0},
    }
    for (target, key), rule in owned.items():
        assert target_keys(target, none)[key].rule == rule, (target, key)
    decay = target_keys("canopy_lit.training.schedules.warmup_schedule", none)["decay"].hint
    assert typing.get_args(decay) == ("constant", "linear", "cosine")
