"""Round-synchronous vs sequential evidence loop, on a simulated serving engine.

``batched_vs_sequential``: 1,000 questions (the bundled HotpotQA dev file's 100, each asked 10
times under a distinct text) through the same ``EvidenceLoop`` (BM25 over each question's 10
paragraphs, whole items kept, log-prob critic, R <= 3, k = 5) on ``SimulatedLLM``: a critic that
asks for one follow-up round, then stops; a fixed reader answer. The backend prices each engine
call as a serving engine runs it (overhead + all prefill + the longest decode, configs/llm/simulated.yaml
costs), on a virtual clock. Sequential: one call at a time; batched: every question in flight
(``batch``) advances stage by stage and each stage is one ``chat_batch``. Ratio = batched / sequential
simulated LLM seconds (target <= 0.5). The pipeline's own CPU time (BM25, trees, token counts, the
barrier) is measured for both and reported next to it; it is the same work in both modes.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _loop(llm: Any, bench: Any, candidates: dict[str, list[str]]) -> Any:
    from canopy_lit.control import LLMCritic
    from canopy_lit.hierarchy import Hierarchy
    from canopy_lit.pipeline.loop import EvidenceLoop, LoopSettings
    from canopy_lit.reader import LLMReader
    from canopy_lit.refine import KeepWholeRefiner
    from canopy_lit.retrieval.candidates import BM25Ranking, CandidateRetriever

    h = Hierarchy(2)
    retriever = CandidateRetriever(bench.items, candidates, None, h, ranking=BM25Ranking())
    return EvidenceLoop(
        retriever, h, KeepWholeRefiner(), LLMReader(llm), llm.count_tokens,
        controller=LLMCritic(llm, mode="logprob", threshold=0.5),
        settings=LoopSettings(k=5, max_rounds=3, aggregation_check=False),
    )  # fmt: skip


def batched_vs_sequential(quick: bool = False, n_questions: int = 1000, batch: int = 1000) -> dict[str, Any]:
    """Simulated wall time of ``n_questions`` questions, sequential vs round-synchronous (``quick`` runs the same)."""
    from canopy_lit.data import load_benchmark
    from canopy_lit.llm.simulated import SimulatedLLM
    from canopy_lit.pipeline.batched import BatchedQuestionRunner, BatchingLLM
    from canopy_lit.pipeline.build import QuestionRunner

    bench = load_benchmark("hotpotqa", str(ROOT / "data/hotpotqa/hotpot_dev_distractor_100.json"))
    base = bench.questions
    questions, candidates = [], {}
    for i in range(n_questions):  # distinct ids and texts: the simulated critic counts verdicts per text
        q = base[i % len(base)]
        copy = dataclasses.replace(q, id=f"{q.id}#{i}", text=f"{q.text} (copy {i // len(base)})")
        questions.append(copy)
        candidates[copy.id] = list(bench.candidates[q.id])
    costs = {
        "call_overhead_s": 0.05,
        "prefill_s_per_token": 2e-4,
        "decode_s_per_token": 0.02,
    }  # simulated.yaml

    warm = BatchingLLM(SimulatedLLM(**costs))  # imports and first-use set-up out of both timings
    QuestionRunner(_loop(warm, bench, candidates), warm).run(questions[0])

    seq_sim = SimulatedLLM(**costs)
    seq_llm = BatchingLLM(seq_sim)
    seq_runner = QuestionRunner(_loop(seq_llm, bench, candidates), seq_llm)
    t0 = time.perf_counter()
    sequential = [seq_runner.run(q) for q in questions]
    seq_cpu = time.perf_counter() - t0

    bat_sim = SimulatedLLM(**costs)
    bat_llm = BatchingLLM(bat_sim)
    bat_runner = BatchedQuestionRunner(_loop(bat_llm, bench, candidates), bat_llm)
    t0 = time.perf_counter()
    batched = bat_runner.run_all(questions, batch_size=batch)
    bat_cpu = time.perf_counter() - t0

    failed = [r for r in batched if isinstance(r, BaseException)]
    if failed:
        raise RuntimeError(f"{len(failed)} batched questions failed, first: {failed[0]!r}")
    same = all(
        a.prediction == b.prediction and a.rounds == b.rounds
        for a, b in zip(sequential, batched, strict=True)
    )
    if not same:
        raise RuntimeError("batched records differ from sequential ones")
    sizes = bat_llm.scheduler.batch_sizes
    return {
        "ours": round(bat_sim.clock, 2),
        "reference": round(seq_sim.clock, 2),
        "ratio": bat_sim.clock / seq_sim.clock,
        "target": 0.5,
        "direction": "max",
        "unit": f"simulated LLM s for {n_questions} questions",
        "questions": n_questions,
        "llm_calls": seq_sim.calls,
        "engine_calls": {"sequential": seq_sim.engine_calls, "batched": bat_sim.engine_calls},
        "largest_batch": max(sizes),
        "pipeline_cpu_s": {"sequential": round(seq_cpu, 2), "batched": round(bat_cpu, 2)},
        "records_identical": same,
    }


if __name__ == "__main__":
    import json

    print(json.dumps(batched_vs_sequential(), indent=2))
