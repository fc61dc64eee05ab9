"""Every key of every config group is typed and range-checked before any work.

Each case goes through the real entry point (``evaluate.py`` / ``train.py`` run by ``run_script``: the same
Hydra composition, validation and exit path as a shell run): exit 2, exactly one line naming the key (with a
"did you mean" for a misspelling), no traceback, nothing written. One real process per entry point carries
several faults at once and is timed: it must end before any model loads. The remaining tests pin that the
schema comes from the code that consumes the keys, so that a new key cannot skip it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from evaluate_runner import ROOT, config_problems, records, run_script, script_cmd
from hydra import compose
from omegaconf import DictConfig, OmegaConf

CONFIGS = ROOT / "configs"
# A real process starts Python, torch and Hydra (15-25 s on the shared 2-core machine); loading a model
# or encoding a corpus comes on top. The bound leaves room for a loaded machine.
PROCESS_SECONDS = 90
# Valid settings that keep a run short should a fault ever get past validation: a simulated LLM, each
# question's own candidate items (no corpus index), a few tiny training batches.
EVAL_QUICK = ["limit=1", "llm=simulated", "retriever=candidates"]
TRAIN_QUICK = ["experiment=quickstart", "debug=fdr", "test=false", "datamodule.benchmarks=[hotpotqa]",
               "datamodule.zero_shot=[]", "datamodule.options.hotpotqa.max_questions.train=4",
               "datamodule.options.hotpotqa.max_questions.val=2"]  # fmt: skip

EVAL_CASES = [
    # the cases of the report
    (["judge.enabled=maybe"], "judge.enabled must be true or false, got 'maybe'"),
    (["+judge.max_token=8"], "unknown config key judge.max_token (did you mean judge.max_tokens?)"),
    (["loop.batched=no_thanks"], "loop.batched must be true or false, got 'no_thanks'"),
    (["data.split=nonsense"], "data.split must be one of train, val, test, all, got 'nonsense'"),
    (["encoder.adapter_scale=abc"], "encoder.adapter_scale must be a number, got 'abc'"),
    (["+encoder.max_seq_len=128"], "unknown config key encoder.max_seq_len (did you mean encoder.max_seq_length?)"),
    (["retrieval=hybrid", "retrieval.rrf_k=-1"], "retrieval.rrf_k must be an integer >= 0, got -1"),
    (["loop.max_batch=-1"], "loop.max_batch must be null or an integer >= 1, got -1"),
    (["retrieval=ivfpq", "retrieval.index_options.pq_m=50"],
     "retrieval.index_options.pq_m must divide the embedding dim 384 of encoder minilm, got 50 (nearest that do: 48, 64)"),
]
# the same for each kind of group (nested option blocks, variants, backends, readers): validator only
EVAL_MORE = [
    (["retrieval=hybrid", "retrieval.bm25.b=2"], "retrieval.bm25.b must be a number >= 0 and <= 1, got 2"),
    (["retrieval=hybrid", "+retrieval.bm25.k_1=2"], "unknown config key retrieval.bm25.k_1 (did you mean retrieval.bm25.k1?)"),
    (["retrieval=bm25", "retrieval.method=okapi"],
     "retrieval.method must be one of lucene, robertson, atire, bm25l, bm25+, got 'okapi'"),
    (["+retrieval.index_options.nlists=8"],
     "unknown config key retrieval.index_options.nlists (did you mean retrieval.index_options.nlist?)"),
    (["data=ottqa", "+data.options.bridge_row=true"],
     "unknown config key data.options.bridge_row (did you mean data.options.bridge_rows?)"),
    (["data=ottqa", "data.options.bridge_rows=sometimes"], "data.options.bridge_rows must be true or false, got 'sometimes'"),
    (["data.name=hotpot"], "data.name must be one of 2wikimultihopqa, custom, hf, hotpotqa,"),
    (["llm=openai", "llm.timeout=soon"], "llm.timeout must be a number > 0, got 'soon'"),
    (["llm.seed=first"], "llm.seed must be an integer, got 'first'"),
    (["encoder.device=5"], "encoder.device must be a string or a device config, got 5"),
    (["method=ircot", "controller.demos=two"], "controller.demos must be an integer, got 'two'"),
    (["resume=maybe"], "resume must be one of auto, force, got 'maybe'"),
]  # fmt: skip
TRAIN_CASES = [
    (["+encoder.max_seq_len=128"], "unknown config key encoder.max_seq_len (did you mean encoder.max_seq_length?)"),
    (["encoder.adapter_scale=abc"], "encoder.adapter_scale must be a number, got 'abc'"),
    (["+trainer.max_epoch=3"], "unknown config key trainer.max_epoch (did you mean trainer.max_epochs?)"),
    (["trainer.precision=bf17"], "trainer.precision must be null or one of 64, 32, 16, transformer-engine"),
    (["datamodule.benchmarks=hotpotqa"], "datamodule.benchmarks must be a mapping or a list of strings, got 'hotpotqa'"),
]
TRAIN_MORE = [
    (["+datamodule.options.nq.max_question=3"],
     "unknown config key datamodule.options.nq.max_question (did you mean datamodule.options.nq.max_questions?)"),
    (["+datamodule.options.ottqa.bridge_rows=maybe"], "datamodule.options.ottqa.bridge_rows must be true or false, got 'maybe'"),
    (["+logger.csv.nam=x"], "unknown config key logger.csv.nam (did you mean logger.csv.name?)"),
    (["callbacks.last_checkpoint.every_n_train_steps=often"],
     "callbacks.last_checkpoint.every_n_train_steps must be an integer, got 'often'"),
    (["+limit=3"], "unknown config key limit"),  # an evaluate.py key
]  # fmt: skip


def eval_problems(*overrides: str) -> list[str]:
    return config_problems("evaluate", *overrides)


def train_problems(*overrides: str) -> list[str]:
    return config_problems("train", "experiment=quickstart", *overrides)


def _one_line(out: Any, prefix: str) -> str:
    assert out.status == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr + out.stdout
    lines = [x for x in out.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith(prefix), lines
    return lines[0][len(prefix):]


@pytest.mark.parametrize(("overrides", "message"), EVAL_CASES, ids=[" ".join(c[0]) for c in EVAL_CASES])
def test_evaluate_refuses_a_bad_key_of_any_group_in_one_line(tmp_path: Path, overrides: list[str], message: str) -> None:
    out = run_script("evaluate.py", tmp_path, *EVAL_QUICK, *overrides)
    assert _one_line(out, "evaluate.py: error: ").startswith(message)
    assert records(tmp_path) == [] and not (tmp_path / "metrics.json").exists()


@pytest.mark.parametrize(("overrides", "message"), TRAIN_CASES, ids=[" ".join(c[0]) for c in TRAIN_CASES])
def test_train_refuses_a_bad_key_of_any_group_in_one_line(tmp_path: Path, overrides: list[str], message: str) -> None:
    out = run_script("train.py", tmp_path, *TRAIN_QUICK, *overrides)
    assert _one_line(out, "error: ").startswith(message)
    assert not (tmp_path / "adapter").exists() and not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize(("overrides", "message"), EVAL_MORE, ids=[" ".join(c[0]) for c in EVAL_MORE])
def test_evaluate_validator_types_every_kind_of_group(hydra_ctx, overrides: list[str], message: str) -> None:
    problems = eval_problems(*overrides)
    assert len(problems) == 1 and problems[0].startswith(message), problems


@pytest.mark.parametrize(("overrides", "message"), TRAIN_MORE, ids=[" ".join(c[0]) for c in TRAIN_MORE])
def test_train_validator_types_every_kind_of_group(hydra_ctx, overrides: list[str], message: str) -> None:
    problems = train_problems(*overrides)
    assert len(problems) == 1 and problems[0].startswith(message), problems


def test_a_method_that_never_retrieves_refuses_a_retrieval_round(tmp_path: Path) -> None:
    """``method=no_retrieval loop.max_rounds=1`` retrieved and was labelled no_retrieval."""
    out = run_script("evaluate.py", tmp_path, *EVAL_QUICK, "method=no_retrieval", "loop.max_rounds=1")
    assert _one_line(out, "evaluate.py: error: ") == (
        "loop.max_rounds must be 0 for method=no_retrieval, got 1 "
        "(method=no_retrieval never retrieves; method=vanilla is one retrieval round)"
    )
    assert records(tmp_path) == []


def test_a_method_that_never_retrieves_passes_when_no_round_can_retrieve(hydra_ctx) -> None:
    assert eval_problems("method=no_retrieval") == []
    assert eval_problems("method=no_retrieval", "loop.max_rounds=1", "retrieval.k=0") == []  # k = 0: nothing fetched
    assert eval_problems("method=vanilla", "loop.max_rounds=1") == []


def _timed(cmd: list[str]) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    return out, time.monotonic() - start


def test_evaluate_process_reports_every_bad_key_before_any_work(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out, seconds = _timed(script_cmd(
        "evaluate.py", run_dir, *EVAL_QUICK, "method=no_retrieval", "loop.max_rounds=1", "judge.enabled=maybe",
        "+judge.max_token=8", "loop.batched=no_thanks", "loop.max_batch=-1", "data.split=nonsense",
        "encoder.adapter_scale=abc", "+encoder.max_seq_len=128", "retrieval=ivfpq", "retrieval.index_options.pq_m=50",
    ))  # fmt: skip
    assert out.returncode == 2, out.stderr[-3000:]
    assert sorted(out.stderr.strip().splitlines()) == sorted(f"evaluate.py: error: {line}" for line in [
        "loop.batched must be true or false, got 'no_thanks'",
        "loop.max_batch must be null or an integer >= 1, got -1",
        "judge.enabled must be true or false, got 'maybe'",
        "unknown config key judge.max_token (did you mean judge.max_tokens?)",
        "encoder.adapter_scale must be a number, got 'abc'",
        "unknown config key encoder.max_seq_len (did you mean encoder.max_seq_length?)",
        "data.split must be one of train, val, test, all, got 'nonsense'",
        "retrieval.index_options.pq_m must divide the embedding dim 384 of encoder minilm, got 50 (nearest that do: 48, 64)",
        "loop.max_rounds must be 0 for method=no_retrieval, got 1 "
        "(method=no_retrieval never retrieves; method=vanilla is one retrieval round)",
    ])  # fmt: skip
    assert "Traceback" not in out.stderr + out.stdout
    assert seconds < PROCESS_SECONDS, f"{seconds:.0f} s"
    assert not run_dir.exists()  # nothing ran: the folder Hydra made at start (.hydra/, the log) is gone too


@pytest.mark.parametrize(
    ("script", "override", "line"),
    [
        ("evaluate.py", "data.nmae=x",
         "evaluate.py: error: unknown config key data.nmae (did you mean data.name?); a new key is added as +data.nmae=..."),
        ("evaluate.py", "loop.max_round=2", "evaluate.py: error: unknown config key loop.max_round "
                                             "(did you mean loop.max_rounds?); a new key is added as +loop.max_round=..."),
        ("evaluate.py", "data=hotpotq", "evaluate.py: error: data=hotpotq: no such option of group data (did you mean "
                                         "hotpotqa?); its options: custom, hotpotqa, lvbench, mmqa, nq, ottqa, tatqa, vragbench"),
        ("train.py", "model.optimizer.lrr=1", "error: unknown config key model.optimizer.lrr (did you mean "
                                     "model.optimizer.lr?); a new key is added as +model.optimizer.lrr=..."),
    ],
)  # fmt: skip
def test_a_mistyped_key_or_option_without_plus_is_one_line_and_exit_2(tmp_path: Path, script: str, override: str,
                                                                      line: str) -> None:  # fmt: skip
    """Was: Hydra's multi-line composition error ("Could not override ... Key 'nmae' is not in struct ...
    Set the environment variable HYDRA_FULL_ERROR=1"), exit 1."""
    argv = [sys.executable, str(ROOT / script), f"hydra.run.dir={tmp_path / 'run'}", override]  # train.py has no progress key
    out, seconds = _timed(argv)
    assert (out.returncode, out.stderr.strip().splitlines()) == (2, [line]), out.stderr[-2000:]
    assert seconds < PROCESS_SECONDS and not (tmp_path / "run").exists()


def test_train_process_reports_every_bad_key_before_the_model_loads(tmp_path: Path) -> None:
    out, seconds = _timed([sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={tmp_path}", *TRAIN_QUICK,
                           "+encoder.max_seq_len=128", "encoder.adapter_scale=abc", "+trainer.max_epoch=3"])  # fmt: skip
    assert out.returncode == 2, out.stderr[-3000:]
    assert sorted(out.stderr.strip().splitlines()) == sorted([
        "error: encoder.adapter_scale must be a number, got 'abc'",
        "error: unknown config key encoder.max_seq_len (did you mean encoder.max_seq_length?)",
        "error: unknown config key trainer.max_epoch (did you mean trainer.max_epochs?)",
    ])  # fmt: skip
    assert "encoder <" not in out.stdout + out.stderr  # train.py logs it just before loading the encoder
    assert seconds < PROCESS_SECONDS, f"{seconds:.0f} s"
    assert not (tmp_path / "adapter").exists()


# --------------------------------------------------------------------------- the schema is the code's


def build_widget(depth: int = 1, exact: bool = False, label: str | None = None, ratio: float = 0.5) -> None:
    """A stand-in ``_target_`` with a signature no schema entry mentions."""


def test_a_new_argument_of_a_target_is_typed_by_its_signature() -> None:
    from canopy_lit.schema import Group, check_node

    node = OmegaConf.create({"_target_": f"{__name__}.build_widget", "depth": "deep", "exact": "yes",
                             "lable": "x", "ratio": 1, "label": None})  # fmt: skip
    problems: list[str] = []
    check_node(node, "widget.", Group(), problems)
    assert problems == [
        "widget.depth must be an integer, got 'deep'",
        "widget.exact must be true or false, got 'yes'",
        "unknown config key widget.lable (did you mean widget.label?)",
    ]


def _shipped(group: str) -> list[str]:
    return [p.stem for p in sorted((CONFIGS / group).glob("*.yaml"))]


def _compositions() -> list[tuple[str, list[str], dict[str, Any]]]:
    from canopy_lit.schema import EVAL_GROUPS, TRAIN_GROUPS

    runs = [("evaluate", [f"{g}={o}"], EVAL_GROUPS)
            for g in ("data", "encoder", "tree", "refine", "retrieval", "retriever", "controller", "llm", "method")
            for o in _shipped(g)]  # fmt: skip
    runs += [("evaluate", [f"experiment={e}"], EVAL_GROUPS) for e in ("evidence", "retrieval", "probe")]
    runs += [("train", [f"{g}={o}"], TRAIN_GROUPS) for g in ("encoder", "trainer", "logger", "callbacks")
             for o in _shipped(g)]  # fmt: skip
    runs += [("train", [f"experiment={e}"], TRAIN_GROUPS) for e in ("quickstart", "shared_lora")]
    return runs


# Blocks whose targets pass **kwargs on to third-party code (SummaryWriter, wandb.init, torch DDP).
OPEN_BLOCKS = {"logger.tensorboard.", "logger.wandb.", "trainer.strategy."}


def _untyped(node: Any, prefix: str, group: Any, out: set[str]) -> None:
    from canopy_lit.schema import Group, group_keys

    if not isinstance(node, DictConfig):
        return
    if group.blocks:
        for name in node:
            _untyped(node.get(name), f"{prefix}{name}.", Group(), out)
        return
    keys, _ = group_keys(node, group)
    if keys is None:
        out.add(prefix + "*")
        return
    for name in map(str, node):
        if name.startswith("_") and name.endswith("_"):
            continue
        if name not in keys or keys[name].hint is Any:
            out.add(prefix + name)
        try:
            child = node[name]
        except Exception:  # a scalar resolvable only at run time
            child = None
        if isinstance(child, DictConfig) and "_target_" in child:
            _untyped(child, f"{prefix}{name}.", Group(), out)


def test_every_shipped_key_has_a_type_and_every_range_a_key(hydra_ctx) -> None:
    """What makes a new key impossible to skip: none of the shipped keys is unchecked (and a YAML key that no
    signature or schema declares is refused: test_every_preset_passes_validation). A range of a target
    group must refine an argument some shipped option takes (no stale entries)."""
    from canopy_lit.schema import EVAL_GROUPS, TRAIN_GROUPS, group_keys

    untyped: set[str] = set()
    accepted: dict[str, set[str]] = {}
    for config, overrides, groups in _compositions():
        cfg = compose(config, overrides=overrides)
        for name, group in groups.items():
            node = cfg.get(name)
            if group is None or not isinstance(node, DictConfig):
                continue
            _untyped(node, f"{name}.", group, untyped)
            if group.schema is not None:
                keys, _ = group_keys(node, group)
                accepted.setdefault(name, set()).update(keys or ())
    assert {k for k in untyped if k.removesuffix("*") not in OPEN_BLOCKS} == set()
    every = {**EVAL_GROUPS, **TRAIN_GROUPS}
    stale = {f"{name}.{f.name}" for name, keys in accepted.items()
             for f in fields(every[name].schema) if f.name not in keys}  # type: ignore[arg-type]  # fmt: skip
    assert stale == set()
