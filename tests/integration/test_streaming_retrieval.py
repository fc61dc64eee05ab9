"""The streaming default path on real MiniLM over a real slice of bundled items (HotpotQA dev + one TAT-QA
table): ``encode_corpus`` reads and renders one chunk at a time, and the index ``build_retriever`` streams from
the shards on disk ranks exactly as the in-memory build (``load_shards`` + ``FaissIndex.build``) did."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from canopy_lit.retrieval.corpus import CorpusStore, render_item
from canopy_lit.retrieval.encode import encode_corpus, finished_shards, load_shards
from canopy_lit.retrieval.ids import IdArray
from canopy_lit.retrieval.index import FaissIndex

N_QUESTIONS = 3  # HotpotQA test questions; their 10 paragraphs each (+ one table) are the corpus
CPU = {"accelerator": "cpu", "devices": 1}


def _slice(n_questions: int = N_QUESTIONS):
    from canopy_lit.data import load_benchmark
    from canopy_lit.data.base import Benchmark

    hp = load_benchmark("hotpotqa")
    questions = [q for q in hp.questions if q.meta.get("split") == "test"][:n_questions]
    ids = list(dict.fromkeys(i for q in questions for i in hp.candidates[q.id]))
    table = next(i for i in load_benchmark("tatqa").items.values() if i.modality.value == "table")
    items = {i: hp.items[i] for i in ids} | {table.id: table}
    return Benchmark("hotpotqa", questions, items, {q.id: hp.candidates[q.id] for q in questions})


@pytest.fixture(scope="module")
def encoder():
    from canopy_lit.encoders import load_encoder

    torch.manual_seed(0)
    return load_encoder("minilm", max_seq_length=32)


@pytest.fixture(scope="module")
def bench():
    return _slice()


def test_encode_renders_one_chunk_at_a_time(bench, encoder, tmp_path, monkeypatch) -> None:
    import canopy_lit.retrieval.encode as enc

    store = CorpusStore.write(bench.items.values(), tmp_path / "corpus.jsonl")
    rendered: list[str] = []
    monkeypatch.setattr(enc, "render_item", lambda item, h=None: (rendered.append(item.id), render_item(item, h))[1])
    seen: list[int] = []

    class Rendered(Callback):
        def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
            seen.append(len(rendered))

    rep = encode_corpus(store, encoder, tmp_path / "emb", batch_size=4, shard_size=8, chunk_size=16,
                        callbacks=[Rendered()], progress=False, trainer_kwargs=CPU)  # fmt: skip
    n = len(store)
    assert rep.encoded == n and sorted(rendered) == sorted(store.ids)  # every item read and rendered once
    # one chunk (16 items = 4 batches) is rendered at a time, not the corpus: after batch i at most the
    # chunks up to that of batch i + 1 (the loader may fetch one batch ahead)
    assert len(seen) == (n + 3) // 4 and seen[0] == 16 < n and seen[-1] == n
    assert all(s <= min(n, 16 * ((i + 1) // 4 + 1)) for i, s in enumerate(seen))
    ids, vecs = load_shards(tmp_path / "emb", order=store.ids)
    ref = encoder.encode_queries([render_item(store.get(i)).text for i in ids]).numpy()
    np.testing.assert_allclose(vecs, ref, atol=1e-5)


def test_default_path_streams_and_ranks_as_the_in_memory_build(bench, encoder, tmp_path) -> None:
    from canopy_lit.retrieval.retriever import build_retriever

    def build():
        return build_retriever(encoder, ["hotpotqa"], cache_dir=tmp_path, loaded={"hotpotqa": bench},
                               batch_size=16, shard_size=16, trainer_kwargs=CPU)  # fmt: skip

    r = build()
    assert sorted(r.index.groups) == ["table", "text"]
    assert all(isinstance(r.index.part_ids[g], IdArray) for g in r.index.groups)  # ids on disk, not objects
    (emb,) = tmp_path.glob("emb-*")
    ids, vecs = load_shards(emb, order=r.corpus.ids)  # what build_retriever did before: all vectors in RAM
    old = FaissIndex.build(ids, vecs, groups=r.corpus.modalities.tolist())
    from canopy_lit.data import load_benchmark

    queries = [q.text for q in load_benchmark("hotpotqa").questions[:20]]  # these 3 and 17 others
    qv = encoder.encode_queries(queries).numpy()
    a, b = old.search(qv, 10), r.index.search(qv, 10)
    assert a.ids == b.ids and a.scores == b.scores
    assert [x.ids for x in r.retrieve_batch(queries, 10)] == a.ids
    again = build()  # the second call loads the saved index
    assert again.index.search(qv, 10).ids == a.ids
    assert len(list(tmp_path.glob("index*"))) == 1  # no temporary folder left beside it


def test_cli_device_options_become_trainer_kwargs() -> None:
    from canopy_lit.retrieval.__main__ import trainer_kwargs

    ns = argparse.Namespace(accelerator="cpu", devices="2", strategy="ddp", num_nodes=None)
    assert trainer_kwargs(ns) == {"accelerator": "cpu", "devices": 2, "strategy": "ddp"}
    assert trainer_kwargs(argparse.Namespace(devices="0,1")) == {"devices": "0,1"}
    assert trainer_kwargs(argparse.Namespace()) == {}


DDP_SCRIPT = """
import json, sys, torch
torch.set_num_threads(1)
sys.path.insert(0, {tests!r})
from test_streaming_retrieval import _slice
from canopy_lit.encoders import load_encoder
from canopy_lit.retrieval.retriever import build_retriever

bench = _slice(3)
r = build_retriever(load_encoder("minilm", max_seq_length=32), ["hotpotqa"], cache_dir=sys.argv[1],
                    loaded={{"hotpotqa": bench}}, batch_size=4, shard_size=8,
                    trainer_kwargs={{"accelerator": "cpu", "devices": 2, "strategy": "ddp"}})
rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
print("RESULT " + json.dumps({{"rank": rank, "top": [r.retrieve(q.text, 5).ids for q in bench.questions]}}))
"""


@pytest.mark.slow
def test_two_rank_cpu_ddp_encode_then_one_index(tmp_path) -> None:
    """``strategy=ddp`` on 2 CPU processes (Lightning relaunches the script): each rank encodes its slice,
    rank 0 builds the index while rank 1 waits and loads it; both rank the same as one process."""
    script = tmp_path / "encode_ddp.py"
    script.write_text(DDP_SCRIPT.format(tests=str(Path(__file__).parent)))
    cache = tmp_path / "cache"
    out = subprocess.run([sys.executable, str(script), str(cache)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    results = [json.loads(line[7:]) for line in (out.stdout + out.stderr).splitlines() if line.startswith("RESULT ")]
    assert sorted(r["rank"] for r in results) == [0, 1]
    (emb,) = cache.glob("emb-*")
    ranks = {p.name.split("-")[1] for p in finished_shards(emb)}
    assert ranks == {"r0", "r1"}
    assert len(list(cache.glob("index-*"))) == 1  # one index, no leftover temporary folder

    from canopy_lit.encoders import load_encoder
    from canopy_lit.retrieval.retriever import build_retriever

    bench = _slice(3)
    one = build_retriever(load_encoder("minilm", max_seq_length=32), ["hotpotqa"], cache_dir=tmp_path / "one",
                          loaded={"hotpotqa": bench}, batch_size=4, shard_size=8, trainer_kwargs=CPU)  # fmt: skip
    expect = [one.retrieve(q.text, 5).ids for q in bench.questions]
    assert all(r["top"] == expect for r in results)
