"""BM25 retriever (bm25s) on real bundled items: interface, rendering, content cache, configs, recall."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("bm25s")

from hydra import compose  # noqa: E402
from hydra.utils import instantiate  # noqa: E402

from canopy_lit.retrieval import bm25 as bm25_mod  # noqa: E402
from canopy_lit.retrieval.bm25 import BM25Retriever, BM25Settings, build_bm25_retriever, item_text  # noqa: E402
from canopy_lit.retrieval.corpus import render_item  # noqa: E402
from canopy_lit.schema import PIPELINE_RETRIEVAL_KEYS
from canopy_lit.types import Item  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
FIXTURE_2WIKI = (
    Path(__file__).resolve().parents[2] / "data" / "fixtures" / "hotpot_format_2wiki_layout_from_bundled.json"
)


@pytest.fixture(scope="module")
def hotpot():
    from canopy_lit.data import load_benchmark

    return load_benchmark("hotpotqa")


@pytest.fixture(scope="module")
def dev_slice(hotpot):
    """The first 5 dev questions and their 50 delivered paragraphs, plus one TAT-QA table."""
    from canopy_lit.data import load_benchmark

    questions = [q for q in hotpot.questions if q.meta.get("split") == "test"][:5]
    ids = list(dict.fromkeys(i for q in questions for i in hotpot.candidates[q.id]))
    table = next(i for i in load_benchmark("tatqa").items.values() if i.modality.value == "table")
    return [hotpot.items[i] for i in ids] + [table], questions


def test_indexes_the_rendered_root_text(dev_slice) -> None:
    items, _ = dev_slice
    table = items[-1]
    assert item_text(table) == render_item(table).text  # title, header and every row, as the dense path
    r = BM25Retriever.from_items(items)
    # a row of the table's linearisation ("Fixed Price | $ 1,452.4 ...") retrieves the table first
    row = " ".join(str(c) for c in table.table.rows[0][:2])
    assert r.retrieve(row, k=3).ids[0] == table.id


def test_retrieve_interface_and_exclude(dev_slice) -> None:
    items, questions = dev_slice
    r = BM25Retriever.from_items(items)
    q = questions[0]
    res = r.retrieve(q.text, 4)
    assert len(res) == 4 and res.query == q.text and all(isinstance(it, Item) for it in res)
    assert res.scores == sorted(res.scores, reverse=True) and res.scores[-1] > 0
    assert set(q.gold) & set(res.ids)  # a supporting paragraph in the top 4 of 51
    held = res.ids[:2]
    again = r.retrieve(q.text, 4, exclude=held)
    assert not set(held) & set(again.ids) and len(again) == 4 and again.ids[:2] == res.ids[2:4]
    batch = r.retrieve_batch([q.text, questions[1].text], k=3, exclude=[held, ()])
    assert batch[0].ids == again.ids[:3] and batch[1].ids == r.retrieve(questions[1].text, k=3).ids
    assert r.retrieve("qqqzzz xyzzy", 4).ids == []  # no shared term: nothing, not arbitrary items
    assert r.stats["queries"] >= 6


class FixedRouter:
    """Routes every query to fixed modalities and records what it was offered (the LLM router's interface)."""

    def __init__(self, route: list[str]) -> None:
        self.to, self.offered, self.calls = route, None, 0

    def restrict(self, groups) -> None:
        self.offered = list(groups)

    def route(self, query: str) -> list[str]:
        self.calls += 1
        return self.to


def test_modality_routing_scores_only_the_routed_modalities(dev_slice) -> None:
    # UniversalRAG on the BM25 corpus (its main-table setting): this raised before.
    items, questions = dev_slice
    table = items[-1]
    row = " ".join(str(c) for c in table.table.rows[0][:2])
    plain = BM25Retriever.from_items(items)
    assert plain.retrieve(row, k=3).ids[0] == table.id
    to_text = BM25Retriever.from_items(items, router=FixedRouter(["text"]))
    assert to_text.router.offered == ["table", "text"]  # only modalities the corpus holds
    res = to_text.retrieve(row, k=3)
    assert table.id not in res.ids and res.groups == ["text"]
    # within the routed modality, the order is plain BM25's order
    assert res.ids == [i for i in plain.retrieve(row, k=len(items)).ids if i != table.id][: len(res)]
    to_table = BM25Retriever.from_items(items, router=FixedRouter(["table"]))
    assert to_table.retrieve(questions[0].text, k=3).ids in ([], [table.id])
    assert to_table.retrieve(row, k=3).ids == [table.id]
    # a route to a modality the corpus lacks falls back to every item
    nowhere = BM25Retriever.from_items(items, router=FixedRouter(["video"]))
    assert nowhere.retrieve(row, k=3).ids == plain.retrieve(row, k=3).ids


def test_settings_change_the_ranking_not_silently_ignored(dev_slice) -> None:
    items, questions = dev_slice
    plain = BM25Retriever.from_items(items, BM25Settings(stemmer=None, stopwords=None))
    stemmed = BM25Retriever.from_items(items)
    assert plain.settings.tokenize(["The runners ran"], vocab=False) == [["the", "runners", "ran"]]
    assert stemmed.settings.tokenize(["The runners ran"], vocab=False) == [["runner", "ran"]]
    q = questions[2].text
    assert plain.scores(q).shape == (len(items),)
    assert (plain.scores(q) != stemmed.scores(q)).any()


def test_index_cached_by_content(tmp_path, monkeypatch) -> None:
    opts = {"2wikimultihopqa": {"path": str(FIXTURE_2WIKI)}}
    first = build_bm25_retriever(benchmarks=["2wikimultihopqa"], cache_dir=tmp_path, benchmark_options=opts)
    folders = sorted(p.name for p in tmp_path.glob("bm25-*"))
    assert len(folders) == 1 and len(first.corpus) == 30
    query = "Which magazine was started first"
    expected = first.retrieve(query, k=5)

    def no_rebuild(*a, **k):
        raise AssertionError("index rebuilt although cached")

    monkeypatch.setattr(bm25_mod, "index_texts", no_rebuild)
    again = build_bm25_retriever(benchmarks=["2wikimultihopqa"], cache_dir=tmp_path, benchmark_options=opts)
    assert again.retrieve(query, k=5).ids == expected.ids
    assert again.retrieve(query, k=5).scores == pytest.approx(expected.scores)
    monkeypatch.undo()
    other = build_bm25_retriever(
        benchmarks=["2wikimultihopqa"], cache_dir=tmp_path, benchmark_options=opts, k1=0.9
    )
    assert len(list(tmp_path.glob("bm25-*"))) == 2  # settings are part of the key
    assert other.index.k1 == 0.9
    with pytest.raises(ValueError, match="routing"):
        build_bm25_retriever(
            benchmarks=["2wikimultihopqa"], cache_dir=tmp_path, benchmark_options=opts, routing=True
        )


def test_recall_on_bundled_hotpotqa(tmp_path) -> None:
    """Regression number: BM25 over the 1,993 bundled HotpotQA paragraphs, all 200 questions."""
    from canopy_lit.retrieval.evaluate import evaluate_retrieval

    m = evaluate_retrieval(
        builder=build_bm25_retriever, corpus_benchmarks=["hotpotqa"], cache_dir=tmp_path, ks=(1, 10)
    )
    assert m["retrieval/corpus_size"] == 1993 and m["retrieval/hotpotqa/questions"] == 200
    # measured 0.825 / 1.000 (any supporting paragraph), 0.775 both at 10 (experiments/retrieval.md)
    assert m["retrieval/hotpotqa/recall@1"] > 0.75 and m["retrieval/hotpotqa/recall@10"] > 0.95
    assert 0.7 < m["retrieval/hotpotqa/recall_all@10"] < 0.85



def test_config_builds_the_retriever_and_candidate_ranking(hydra_ctx, tmp_path, hotpot) -> None:
    from canopy_lit.hierarchy import Hierarchy
    from canopy_lit.pipeline.build import build_retriever as pipeline_retriever
    from canopy_lit.retrieval.candidates import CandidateRetriever

    overrides = [
        "retrieval=bm25",
        f"paths.root_dir={tmp_path}",
        f"retrieval.cache_dir={tmp_path}",
        "retrieval.benchmarks=[2wikimultihopqa]",
        f"+retrieval.benchmark_options={{2wikimultihopqa: {{path: '{FIXTURE_2WIKI}'}}}}",
    ]
    cfg = compose("evaluate", overrides=[*overrides, "retriever=corpus"])
    assert cfg.retrieval.k1 == 1.5 and cfg.retrieval.candidate_ranking._target_.endswith(".BM25Ranking")
    corpus_side = pipeline_retriever(cfg, hotpot, None, Hierarchy(), llm=None)
    assert isinstance(corpus_side, BM25Retriever) and len(corpus_side.corpus) == 30
    cfg = compose("evaluate", overrides=[*overrides, "retriever=candidates"])
    cand = pipeline_retriever(cfg, hotpot, None, Hierarchy(), llm=None)
    assert isinstance(cand, CandidateRetriever) and cand.ranking.name == "bm25"
    q = next(q for q in hotpot.questions if q.meta.get("split") == "test")
    top = cand.retrieve(q.text, 3, (), q)  # no encoder needed for BM25
    assert len(top) == 3 and {it.id for it in top} <= set(hotpot.candidates[q.id])
    partial = instantiate({k: v for k, v in cfg.retrieval.items() if k not in PIPELINE_RETRIEVAL_KEYS})
    assert isinstance(partial(encoder=None, router=None), BM25Retriever)
