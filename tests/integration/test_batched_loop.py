"""Round-synchronous loop on the real stack: bundled HotpotQA, real MiniLM, SmolLM2 greedy.

Records (predictions, kept regions, rounds, critic decisions) must equal the sequential loop's.
llama.cpp's prefix-cache reuse changes floating-point summation order (a reused prefix is not
recomputed), which can flip a near-tie token; interleaving questions changes what is cached, so
both runs prefill every prompt in full (``llm.cache_prompt=false``) and differ only in call order.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture(scope="module")
def runner_and_questions(tmp_path_factory):
    from canopy_lit.assets import AssetError, resolve

    try:
        resolve("smollm2-135m")
    except AssetError as err:
        pytest.skip(f"smollm2-135m asset unavailable: {err}")
    from canopy_lit.pipeline.build import build_loop, load_questions

    overrides = [
        "data=hotpotqa", "data.split=test", "limit=2", "llm=llamacpp_smollm2", "llm.n_threads=1",
        "llm.cache_prompt=false", "retriever=candidates", "retrieval.k=2", "loop.max_rounds=2",
        "loop.batched=true", "reader.max_tokens=8", "critic.threshold=0.05",  # a low threshold: some questions stop after round 1
        f"paths.root_dir={CONFIGS.parent}", f"retrieval.node_cache_dir={tmp_path_factory.mktemp('nodes')}",  # SQLite, used from question threads
    ]  # fmt: skip
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(config_name="evaluate", overrides=overrides)
    bench, questions = load_questions(cfg)
    runner = build_loop(cfg, bench)
    yield runner, questions
    runner.llm.close()


def comparable(rec) -> dict:
    d = rec.to_dict()
    for key in ("time_s", "latency_s"):
        d.pop(key)
    return d


def test_batched_records_equal_sequential_on_smollm2(runner_and_questions) -> None:
    from canopy_lit.llm.base import CallLog
    from canopy_lit.pipeline.batched import BatchedQuestionRunner
    from canopy_lit.pipeline.build import QuestionRunner

    runner, questions = runner_and_questions
    assert isinstance(runner, BatchedQuestionRunner)
    # batched first: the node cache's SQLite store is opened and read from the question threads
    batched = runner.run_all(questions, batch_size=len(questions))
    assert all(not isinstance(r, BaseException) for r in batched), batched
    sizes = list(runner.llm.scheduler.batch_sizes)
    runner.llm.log = CallLog()  # the same question ids again: per-question accounting starts afresh
    sequential = [QuestionRunner(runner.loop, runner.llm).run(q) for q in questions]  # one call at a time
    assert runner.llm.scheduler.batch_sizes == sizes  # outside run_all nothing waits at the barrier
    assert [comparable(r) for r in batched] == [comparable(r) for r in sequential]
    assert max(sizes) == len(questions)  # the first stage went as one batch
    assert sum(sizes) == sum(sum(r.llm_calls.values()) for r in sequential)
    assert any(r.rounds and r.rounds[0].kept for r in sequential)
