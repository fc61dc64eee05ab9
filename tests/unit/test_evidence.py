"""Evidence metrics (no LLM): answer matching, gold and item recall, summaries, the matched-budget flat refiner."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hydra.utils import instantiate

from canopy_lit.data import load_split
from canopy_lit.eval.answers import EvidenceText, answer_found, answer_needles, gold_leaf_counts, item_recall
from canopy_lit.eval.evidence_stats import compare_runs, score_evidence, summarize_evidence
from canopy_lit.eval.harness import run_questions
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.llm.tokenizers import token_counter
from canopy_lit.metrics import paired_bootstrap_ci, ratio_bootstrap_ci
from canopy_lit.numbers import as_number
from canopy_lit.pipeline.trace import QuestionRecord
from canopy_lit.refine import FlatMatchedRefiner, ParentRelativeRefiner, leaf_ids
from canopy_lit.types import Item, Question, Table, Tree

DATA = Path(__file__).resolve().parents[2] / "data"


# --- answer matching ------------------------------------------------------------------------------


def test_numbers_match_as_tatqa_writes_them() -> None:
    ev = EvidenceText.of("Revenue | $1,234.5 | (5.3)% | 12.5% | 2018 | 3.2 million in 2019")
    for needle in ("1234.5", "$1,234.5", "-5.3", "5.3", "12.5", "12.5%", "2018", "3.2 million", "1,234.50"):
        assert ev.contains(needle), needle
    # Numbers compare by value, never as digit strings: "123.45" squeezes to the same letters as "1,234.5".
    for needle in ("123.45", "5", "1,234", "234.5", "12"):
        assert not ev.contains(needle), needle
    assert as_number("$1,496.5") == 1496.5 and as_number("(5.3)") == 5.3 and as_number("12.5 percent") == 12.5
    assert as_number("May 2019") is None and as_number("1.2.3") is None


def test_text_answers_are_squad_normalised_whole_tokens() -> None:
    ev = EvidenceText.of("Please Please Me was the Beatles' first album, released in March.")
    assert ev.contains("The Beatles") and ev.contains("beatles first album") and ev.contains("Please Me")
    assert not ev.contains("Beat") and not ev.contains("first Beatles") and not ev.contains("  ")
    assert not EvidenceText.of("Craigslist founder").contains("Craig")


def test_answer_needles_by_answer_type() -> None:
    def q(answers: list[str], **meta: str) -> Question:
        return Question("q", "?", answers, "tatqa", meta=meta)

    assert answer_needles(q(["Paris", "Paris, France"])) == [["Paris"], ["Paris, France"]]
    assert answer_needles(q(["yes"])) is None and answer_needles(q([""])) is None
    spans = q(["2019", "2018"], answer_type="multi-span")
    assert answer_found(answer_needles(spans), "in 2019 only") is False
    assert answer_found(answer_needles(spans), "2019 and 2018") is True
    # Arithmetic: the operands as written, not the result nor the formula's constants (/ 2, * 100, - 1).
    avg = q(["172"], answer_type="arithmetic", derivation="(166+178)/2 * 100 - 1")
    assert answer_needles(avg) == [["166", "178"]]
    assert answer_found(answer_needles(avg), "| Sales | 166 | 178 |") is True
    assert answer_found(answer_needles(avg), "| Sales | 166 | 179 |") is False
    count = q(["2"], answer_type="count", derivation="Asia##Europe")
    assert answer_needles(count) == [["Asia", "Europe"]]
    assert answer_found(None, "anything") is None


def test_whole_gold_items_hold_the_answer_on_real_tatqa() -> None:
    """On the bundled TAT-QA, the whole gold items contain the answer (or its operands) for >= 98% of
    measurable questions; plain SQuAD substring matching finds under 3% of the arithmetic ones."""
    bench, questions = load_split("tatqa", str(DATA / "tatqa" / "tatqa_dataset_dev.json"), split="all")
    h = Hierarchy()
    found: Counter[str] = Counter()
    measured: Counter[str] = Counter()
    for q in questions:
        items = [i for i in q.gold if i in bench.items]
        text = "\n\n".join(h.evidence_text(h.build(bench.items[i]), [0]) for i in items)
        hit = answer_found(answer_needles(q), text)
        if hit is not None:
            kind = str(q.meta.get("answer_type"))
            measured[kind] += 1
            found[kind] += hit
    assert measured["arithmetic"] > 600 and measured["span"] > 600
    for kind in ("span", "multi-span", "arithmetic", "count"):
        assert found[kind] / measured[kind] >= 0.98, (kind, found[kind], measured[kind])


# --- gold, items, summaries -----------------------------------------------------------------------


def test_gold_leaf_counts_and_item_recall_by_hand() -> None:
    gold = {"a": [0, 2, 3], "b": [], "c": [1]}  # b: gold item whose span was not located
    kept = {"a": [(0, 1), (3, 5)], "b": [(0, 2)], "x": [(0, 9)]}  # c not retrieved
    assert gold_leaf_counts(gold, kept) == (2, 3)  # leaves 0 and 3 of a's 0, 2, 3
    assert item_recall(list(gold), ["a", "b", "x"]) == pytest.approx(2 / 3)
    assert item_recall([], ["a"]) is None


def _rec(
    found: bool | None, hit: int, total: int, tokens: int, kind: str | None = None, status: str = "ok"
) -> dict:
    return {
        "status": status,
        "latency_s": 0.1,
        "time_s": {"encode": 0.05},
        "evidence": {
            "answer_found": found,
            "answer_type": kind,
            "gold_items": 2,
            "gold_items_retrieved": 1,
            "gold_leaves": total,
            "gold_leaves_kept": hit,
            "tokens": tokens,
            "item_tokens": 2 * tokens,
            "kept_tokens": tokens,
        },
    }


def test_summarize_evidence_by_hand() -> None:
    recs = [
        _rec(True, 1, 2, 100, "span"),
        _rec(False, 3, 3, 300, "arithmetic"),
        _rec(None, 0, 0, 200),  # yes/no: not measurable, still counts for tokens
        {"status": "failed", "error": "boom"},
    ]
    m = summarize_evidence(recs)
    assert m["evidence/n"] == 4 and m["evidence/failed"] == 1
    assert m["evidence/answer_recall"] == pytest.approx(1 / 3)  # True, False, failed (0); None left out
    assert m["evidence/answer_recall_n"] == 3
    assert m["evidence/answer_recall/span"] == 1.0 and m["evidence/answer_recall/arithmetic"] == 0.0
    assert m["evidence/gold_recall"] == pytest.approx(4 / 5)  # micro: (1 + 3) / (2 + 3)
    assert m["evidence/item_recall"] == 0.5
    assert m["evidence/tokens"] == 200 and m["evidence/kept_ratio"] == 0.5
    assert m["evidence/tokens_ci_low"] <= 200 <= m["evidence/tokens_ci_high"]
    assert m["time/encode_s"] == pytest.approx(0.15)
    assert score_evidence(recs[0], Question("q", "?", ["x"])) == {
        "tokens": 100.0,
        "answer_recall": 1.0,
        "item_recall": 0.5,
        "gold_recall": 0.5,
    }


def test_pooled_ratio_cis_are_the_metrics_bootstrap() -> None:
    """Gold recall and kept ratio get the pooled-ratio bootstrap of ``canopy_lit.metrics`` (BCa, the one
    family of QA and probe CIs), not a bootstrap of their own."""
    rng = np.random.default_rng(1)
    hit, total = rng.integers(0, 5, 60), rng.integers(0, 6, 60)
    hit = np.minimum(hit, total)
    recs = [_rec(True, int(h), int(t), 100) for h, t in zip(hit, total)]
    m = summarize_evidence(recs)
    lo, hi = ratio_bootstrap_ci(hit.astype(float), total.astype(float))
    assert (m["evidence/gold_recall_ci_low"], m["evidence/gold_recall_ci_high"]) == (lo, hi)
    assert lo < m["evidence/gold_recall"] == hit.sum() / total.sum() < hi


def test_harness_stores_the_given_scores_not_em_f1(tmp_path: Path) -> None:
    """``run_questions(score=...)``: evidence records carry evidence scores (an empty prediction's
    EM / F1 = 0 would be wrong), and the default still scores the prediction."""
    qs = [Question("q1", "?", ["Paris"]), Question("q2", "?", ["Rome"])]

    def answer(q: Question) -> QuestionRecord:
        return QuestionRecord(q.id, q.text, q.answers, "", prediction="Paris")

    recs = run_questions(
        qs, answer, tmp_path / "a", progress=False, score=lambda r, q: {"answer_recall": 1.0}
    )
    assert [r["scores"] for r in recs] == [{"answer_recall": 1.0}] * 2
    recs = run_questions(qs, answer, tmp_path / "b", progress=False)
    assert [r["scores"]["em"] for r in recs] == [1.0, 0.0]


# --- flat top leaves at a matched budget ----------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_tokenizer() -> str:
    from canopy_lit.assets import AssetError, resolve

    try:
        return str(resolve("smollm2-135m"))
    except AssetError as err:
        pytest.skip(f"smollm2-135m asset unavailable: {err}")


def test_matched_flat_refiner_fills_canopys_token_count_on_real_items(smollm2_tokenizer: str) -> None:
    """Real HotpotQA paragraphs, real tokenizer, word-overlap scores (a stand-in for the encoder)."""
    bench, questions = load_split("hotpotqa", str(DATA / "hotpotqa"), split="test")
    h = Hierarchy(2)
    count = token_counter(smollm2_tokenizer)
    refiner = FlatMatchedRefiner(smollm2_tokenizer, hierarchy=h)
    checked = 0
    for q in questions[:8]:
        trees = [h.build(bench.items[i]) for i in bench.candidates[q.id][:5]]
        qw = set(q.text.lower().split())
        scores = [
            np.array(
                [
                    len(qw & set(h.node_text(t, v).lower().split()))
                    / (1 + len(h.node_text(t, v).split()) ** 0.5)
                    for v in range(len(t))
                ],
                dtype=np.float32,
            )
            for t in trees
        ]
        kept = refiner(trees, scores)
        canopy = ParentRelativeRefiner(lazy=False)(trees, scores)
        budget = sum(count(h.evidence_text(t, k)) for t, k in zip(trees, canopy))

        def cost(t: Tree, k: list[int]) -> int:  # the loop renders no block for an item with nothing kept
            return count(h.evidence_text(t, sorted(k, key=lambda node: int(t.starts[node])))) if k else 0

        used = sum(cost(t, k) for t, k in zip(trees, kept))
        assert refiner.last_budget == budget and 0 < used <= budget
        # Greedy by score: every leaf left out would overflow the budget if added to what was kept.
        for j, t in enumerate(trees):
            for v in set(leaf_ids(t).tolist()) - set(kept[j]):
                assert used - cost(t, kept[j]) + cost(t, [*kept[j], v]) > budget, (q.id, j, v)
        assert all(all(t.is_leaf(v) for v in k) for t, k in zip(trees, kept))
        checked += 1
    assert checked == 8


class WordsFlatMatched(FlatMatchedRefiner):
    """Budgets in whitespace words, so that a test can count them by hand."""

    @property
    def count(self):  # type: ignore[override]
        return lambda text: len(text.split())


def test_matched_flat_refiner_charges_only_the_blocks_the_reader_gets() -> None:
    """CANOPY keeps "A: a1 a2 a3 …" (5 words), "B: … b10" (3) and "C: c1 c2 c3 c4 c5" (6): budget 14. Flat takes
    b's leaves by score; a and c get nothing and so no block (not "A: …", "C: …"): b whole (11 words) fits."""
    h = Hierarchy(2)
    items = [
        Item("a", "text", title="A", sentences=["a1 a2 a3", "a4 a5"]),
        Item("b", "text", title="B", sentences=["b1 b2 b3", "b4 b5 b6 b7 b8 b9", "b10"]),
        Item("c", "text", title="C", sentences=["c1 c2 c3 c4 c5"]),
    ]
    trees = [h.build(i) for i in items]
    # node ids: a 0 root, 1-2 leaves; b 0 root, 1 = leaves [0, 2), 2 = leaf 2, 3-4 = leaves 0, 1; c 0 = its leaf
    scores = [np.array([0.22, 0.80, 0.14]), np.array([0.54, 0.09, 0.99, 0.88, 1.0]), np.array([0.49])]
    refiner = WordsFlatMatched("words", hierarchy=h)
    kept = refiner(trees, scores)
    assert refiner.last_budget == 14
    assert kept == [[], [3, 4, 2], []] and h.evidence_text(trees[1], kept[1]) == "B: b1 b2 b3 b4 b5 b6 b7 b8 b9 b10"
    # δ of the CANOPY run it is matched to: at δ = 0.5 CANOPY keeps b whole, so the budget is 5 + 11 + 6.
    matched = WordsFlatMatched("words", hierarchy=h, descend_margin=0.5)
    matched(trees, scores)
    assert matched.last_budget == 22


def test_evidence_configs_compose() -> None:
    """experiment=evidence and every refine option of the evidence study compose; flat_matched
    counts in the evidence tokenizer."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(DATA.parent / "configs"), version_base="1.3"):
        for variant, target in (
            ("full", "ParentRelativeRefiner"),
            ("no_projection", "KeepWholeRefiner"),
            ("flat_matched", "FlatMatchedRefiner"),
            ("extractive", "ExtractiveRefiner"),
        ):
            cfg = compose(
                "evaluate", overrides=["+ablation=evidence", f"variant={variant}", "evidence.tokenizer=tok"]
            )
            assert cfg.mode == "evidence" and cfg.retriever.name == "candidates" and cfg.loop.max_rounds == 1
            assert cfg.refine._target_.endswith(target)
            if variant == "flat_matched":
                assert cfg.refine.tokenizer == "tok"
        # One override sets δ of CANOPY and of the CANOPY budget flat is matched to.
        for variant in ("full", "flat_matched"):
            cfg = compose(
                "evaluate",
                overrides=["+ablation=evidence", f"variant={variant}", "evidence.tokenizer=tok", "refine.descend_margin=0.02"],
            )
            refiner = instantiate(cfg.refine)
            assert getattr(refiner, "reference", refiner).descend_margin == 0.02
    GlobalHydra.instance().clear()


def test_compare_runs_pairs_questions_by_id(tmp_path: Path) -> None:
    """Hand-made run folders: A keeps the answer on q1 and q2, B on q1 only; q3 is yes/no (left out of
    the answer difference, kept for tokens); q4 exists in A only; B failed q2 (no answer, no tokens)."""
    import json

    def write(run: Path, recs: list[dict]) -> Path:
        run.mkdir()
        (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        return run

    def rec(qid: str, found: bool | None, tokens: int, status: str = "ok") -> dict:
        return {"id": qid, "status": status, "evidence": {"answer_found": found, "tokens": tokens}}

    a = write(
        tmp_path / "a", [rec("q1", True, 100), rec("q2", True, 100), rec("q3", None, 100), rec("q4", True, 9)]
    )
    b = write(
        tmp_path / "b", [rec("q1", True, 200), rec("q2", None, 0, status="failed"), rec("q3", None, 200)]
    )
    c = compare_runs(a, b)
    assert c["n"] == 3 and c["n_answer"] == 2
    assert c["answer_recall_diff"] == pytest.approx(0.5)  # (1 - 1 + 1 - 0) / 2
    assert c["answer_recall_diff_ci_low"] <= 0.5 <= c["answer_recall_diff_ci_high"]
    # tokens over the questions both answered (B failed q2: no evidence to count), estimate and interval alike
    assert c["token_ratio"] == pytest.approx(200 / 400) and c["n_tokens"] == 2
    assert (c["token_ratio_ci_low"], c["token_ratio_ci_high"]) == ratio_bootstrap_ci([100, 100], [200, 200])
    assert (c["answer_recall_diff_ci_low"], c["answer_recall_diff_ci_high"]) == paired_bootstrap_ci([1, 1], [1, 0])
    assert "answer_recall_content_diff" not in c  # runs recorded before the content-only match
    with pytest.raises(ValueError, match="share no recorded question"):
        compare_runs(a, write(tmp_path / "c", [rec("other", True, 1)]))

    def rec2(qid: str, found: bool, content: bool) -> dict:
        return {"id": qid, "status": "ok", "evidence": {"answer_found": found, "answer_found_content": content, "tokens": 5}}

    # A finds q1's answer in a title only: +0.5 points with titles, 0 without.
    d = write(tmp_path / "d", [rec2("q1", True, False), rec2("q2", True, True)])
    e = write(tmp_path / "e", [rec2("q1", False, False), rec2("q2", True, True)] + [rec2("q3", True, True)])
    assert compare_runs(d, e)["answer_recall_diff"] == pytest.approx(0.5)
    assert compare_runs(d, e)["answer_recall_content_diff"] == pytest.approx(0.0)


def test_retrieval_cache_keys_on_the_encoder_settings() -> None:
    """The items' f0 retrieval vectors are cached per encoder setting: a run at another
    ``max_seq_length`` must not read vectors truncated at the old length (hand-made encoder stub)."""
    from canopy_lit.scoring import NodeEmbeddingCache
    from canopy_lit.scoring.scorers import QuerySideEncoder

    class EncoderStub:
        fingerprint = "TextEncoder:minilm:abc:adapter=ffff"
        dim = 4

        def __init__(self, max_seq_length: int) -> None:
            self.max_seq_length = max_seq_length

    fps = [NodeEmbeddingCache(QuerySideEncoder(EncoderStub(n)), Hierarchy()).fingerprint for n in (256, 512)]
    assert fps[0] != fps[1] and "max_seq_length=512" in fps[1]
    assert "adapter=none|query-side" in fps[0]  # f0 side: the adapter never changes these vectors


# --- what the reader gets: titles vs content, the reader cap -------------------------------------

RUN_ITEMS = {
    "star": Item("star", "text", title="Alpha Centauri", sentences=["It is the closest star system.", "It has three stars."]),
    "cities": Item(
        "cities", "table", title="Cities", table=Table(["City", "Population"], [["Oslo", "709,000"], ["Bergen", "285,000"]])
    ),
    "moon": Item("moon", "text", title="Moon", sentences=["The Moon orbits Earth.", "Its radius is 1,737 km."]),
}


class ListRetriever:
    def __init__(self, ids: list[str]) -> None:
        self.ids = ids

    def retrieve(self, query, k, exclude, question):
        return [RUN_ITEMS[i] for i in self.ids[:k]]


def evidence_run(ids: list[str], question: Question, cap: int = 16000) -> dict:
    """One question through an ``EvidenceRunner`` over hand-made items (whole items, words as tokens)."""
    from canopy_lit.eval.evidence import EvidenceRunner
    from canopy_lit.pipeline.loop import EvidenceLoop, LoopSettings
    from canopy_lit.reader import NoReader
    from canopy_lit.refine import KeepWholeRefiner

    loop = EvidenceLoop(
        ListRetriever(ids), Hierarchy(2), KeepWholeRefiner(), NoReader(), lambda t: len(t.split()),
        settings=LoopSettings(k=len(ids), max_rounds=1, reader_max_tokens=cap, aggregation_check=False),
    )  # fmt: skip
    return EvidenceRunner(loop)(question).to_dict()


def test_answer_recall_side_by_side_without_titles_and_headers() -> None:
    """The answer only in a title or a column header is seen by the reader but is not content."""
    in_title = evidence_run(["star", "cities"], Question("q1", "Which system?", ["Alpha Centauri"]))["evidence"]
    in_header = evidence_run(["star", "cities"], Question("q2", "Which column?", ["population"]))["evidence"]
    in_row = evidence_run(["star", "cities"], Question("q3", "How many?", ["709000"]))["evidence"]
    in_text = evidence_run(["star", "cities"], Question("q4", "How many stars?", ["three stars"]))["evidence"]
    assert (in_title["answer_found"], in_title["answer_found_content"]) == (True, False)
    assert (in_header["answer_found"], in_header["answer_found_content"]) == (True, False)
    assert (in_row["answer_found"], in_row["answer_found_content"]) == (True, True)
    assert (in_text["answer_found"], in_text["answer_found_content"]) == (True, True)
    recs = [{"status": "ok", "evidence": e} for e in (in_title, in_header, in_row, in_text)]
    m = summarize_evidence(recs)
    assert m["evidence/answer_recall"] == 1.0 and m["evidence/answer_recall_content"] == 0.5
    assert m["evidence/answer_recall_content_ci_low"] <= 0.5 <= m["evidence/answer_recall_content_ci_high"]
    assert score_evidence(recs[0], Question("q", "?", ["x"]))["answer_recall_content"] == 0.0


def test_every_evidence_measure_is_taken_after_the_reader_cap() -> None:
    """Cap 8 words: "Moon: …" (rank 1, 10 words) is cut after its first sentence and "Alpha Centauri: …" (rank 2,
    12 words, its gold leaf 1) dropped: gold recall, kept tokens and answer recall count what the reader gets."""
    q = Question("q1", "How many stars?", ["three stars"], gold={"star": [1], "moon": [1]})
    rec = evidence_run(["moon", "star"], q, cap=8)
    ev = rec["evidence"]
    assert rec["evidence_tokens"] == ev["tokens"] == ev["kept_tokens"] == 6  # "Moon: The Moon orbits Earth. …"
    assert ev["tokens_before_cap"] == ev["item_tokens"] == 10 + 12
    assert (ev["gold_leaves"], ev["gold_leaves_kept"]) == (2, 0)
    assert ev["answer_found"] is False and ev["truncated_items"] == 2
    kept = {k["item_id"]: k for k in rec["rounds"][0]["kept"]}
    assert kept["moon"]["cap"] == "regions" and kept["moon"]["delivered_ranges"] == [(0, 1)]
    assert kept["star"]["cap"] == "dropped" and kept["star"]["delivered_tokens"] == 0
    whole = evidence_run(["moon"], q)["evidence"]
    m = summarize_evidence([{"status": "ok", "evidence": ev}, {"status": "ok", "evidence": whole}])
    assert m["evidence/gold_recall"] == pytest.approx(1 / 3)  # 0 of 2, then moon's 1 of 1
    assert m["evidence/kept_ratio"] == pytest.approx((6 + 10) / (22 + 10))
    assert m["evidence/truncated_items"] == 1.0 and m["evidence/truncated_questions"] == 0.5
    assert m["evidence/tokens_before_cap"] == pytest.approx((22 + 10) / 2)


def test_evidence_table_shows_recall_without_titles_beside_recall() -> None:
    from canopy_lit.report.render import render_evidence

    row = {"benchmark": "hotpotqa", "method": "parent_relative (f0)", "n": 100, "answer_recall": 0.6,
           "answer_recall_ci_low": 0.5, "answer_recall_ci_high": 0.7, "answer_recall_content": 0.4,
           "answer_recall_content_ci_low": 0.3, "answer_recall_content_ci_high": 0.5, "tokens": 288}  # fmt: skip
    header, _, body = render_evidence([row], []).splitlines()
    assert "| answer recall | 95% CI | answer recall w/o titles/headers | 95% CI |" in header
    assert "| 60.0 | [50.0, 70.0] | 40.0 | [30.0, 50.0] |" in body and "cap cut" not in header
    header, _, body = render_evidence([{**row, "truncated_questions": 0.25}], []).splitlines()
    assert header.endswith("| kept ratio | cap cut % |") and body.endswith("| 25.0 |")
