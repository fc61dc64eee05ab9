"""Issue "Reliability" 10: corpus encoding without progress, deaf to SIGTERM, and caches in the checkout.

The SIGTERM test encodes a slice of real bundled HotpotQA paragraphs with MiniLM in a child process,
delivers SIGTERM after the first shard is on disk, and checks the exit status, the message and that a rerun
encodes only what was not saved. (About 15 s on a quiet 2-core machine, most of it the child's imports.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf, open_dict

from canopy_lit.retrieval.encode import SIGTERM_EXIT, done_ids, encode_corpus, finished_shards

ROOT = Path(__file__).resolve().parents[2]
N_ITEMS = 96  # bundled HotpotQA paragraphs, cut to 32 tokens: fast, still a dozen batches to interrupt

# The child sends itself a real SIGTERM at the end of batch 3 (deterministic; a signal from outside races
# a fast encode). By then one shard of 16 is saved; batch 4 completes the second, then the encode stops.
ENCODE = """
import logging, os, signal, sys, torch
from lightning.pytorch.callbacks import Callback
torch.set_num_threads(1)
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
from canopy_lit.encoders import load_encoder
from canopy_lit.retrieval.corpus import CorpusStore
from canopy_lit.retrieval.encode import encode_corpus

class SigtermAfterBatch3(Callback):
    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if batch_idx == 2:
            os.kill(os.getpid(), signal.SIGTERM)

encoder = load_encoder("minilm", max_seq_length=32)
rep = encode_corpus(CorpusStore(sys.argv[1]), encoder, sys.argv[2], batch_size=8, shard_size=16,
                    trainer_kwargs={"accelerator": "cpu", "devices": 1}, callbacks=[SigtermAfterBatch3()])
print(rep)
"""


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from canopy_lit.data import load_benchmark
    from canopy_lit.retrieval.corpus import CorpusStore

    items = list(load_benchmark("hotpotqa").items.values())[:N_ITEMS]
    return CorpusStore.write(items, tmp_path_factory.mktemp("corpus") / "corpus.jsonl").path


def _encode(corpus: Path, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", ENCODE, str(corpus), str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip


def test_sigterm_saves_the_shard_in_progress_and_a_rerun_resumes(corpus_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "emb"
    proc = _encode(corpus_path, out)
    stdout, stderr = proc.communicate(timeout=300)

    assert proc.returncode == SIGTERM_EXIT, stderr[-3000:]
    assert stdout == ""  # no report: it did not finish
    assert f"encoding {N_ITEMS} of {N_ITEMS} corpus items into {out}" in stderr  # size, before starting
    assert re.search(rf"encode corpus: +\d+%.*\| *\d+/{N_ITEMS} \[\d\d:\d\d<\d\d:\d\d", stderr), stderr[-3000:]
    saved = done_ids(out)
    message = [ln for ln in stderr.splitlines() if ln.startswith("encoding interrupted by SIGTERM")]
    assert message == [
        f"encoding interrupted by SIGTERM: {len(saved)} new embeddings saved in {len(finished_shards(out))} "
        f"shard(s) under {out} ({len(saved)} of {N_ITEMS} items done); run the same command again to resume"
    ], stderr[-3000:]
    assert len(saved) == 32 and len(finished_shards(out)) == 2
    stamps = {p.name: p.stat().st_mtime_ns for p in finished_shards(out)}

    # the rerun, in this process (one interpreter start less): only the unsaved items are encoded
    from canopy_lit.encoders import load_encoder
    from canopy_lit.retrieval.corpus import CorpusStore

    rep = encode_corpus(CorpusStore(corpus_path), load_encoder("minilm", max_seq_length=32), out, batch_size=8,
                        shard_size=16, trainer_kwargs={"accelerator": "cpu", "devices": 1}, progress=False)  # fmt: skip

    assert (rep.encoded, rep.skipped) == (N_ITEMS - len(saved), len(saved))
    assert {p.name: p.stat().st_mtime_ns for p in finished_shards(out) if p.name in stamps} == stamps
    assert len(done_ids(out)) == N_ITEMS


@pytest.mark.parametrize("retrieval", sorted(p.stem for p in (ROOT / "configs" / "retrieval").glob("*.yaml")))
def test_default_caches_live_under_canopy_lit_home(retrieval: str, tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "canopy-home"
    monkeypatch.setenv("CANOPY_LIT_HOME", str(home))
    monkeypatch.delenv("PROJECT_ROOT", raising=False)
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("evaluate", overrides=[f"retrieval={retrieval}"], return_hydra_config=True)
    GlobalHydra.instance().clear()
    with open_dict(cfg):  # what Hydra sets when it runs the app from the checkout
        cfg.paths.root_dir = str(ROOT)
        cfg.paths.output_dir = str(ROOT / "outputs" / "unused")
        del cfg["hydra"]
    caches = {k: v for k, v in OmegaConf.to_container(cfg.retrieval, resolve=True).items() if "cache" in k}
    assert caches, f"retrieval={retrieval} has no cache keys"
    for key, value in caches.items():
        assert Path(value).is_relative_to(home), f"retrieval={retrieval}: retrieval.{key}={value} not under {home}"


def test_python_defaults_live_under_canopy_lit_home(tmp_path: Path, monkeypatch) -> None:
    import inspect

    from canopy_lit.assets import default_cache_dir
    from canopy_lit.retrieval.retriever import build_retriever

    monkeypatch.setenv("CANOPY_LIT_HOME", str(tmp_path))
    assert default_cache_dir("retrieval") == tmp_path / "retrieval"
    assert inspect.signature(build_retriever).parameters["cache_dir"].default is None



def _describe_frame(frame) -> str:
    """A hand-made image describer: any describer changes how image items render."""
    return f"labels: {frame.path}"


@pytest.fixture
def small_corpus(corpus_path: Path, tmp_path: Path):
    from canopy_lit.retrieval.corpus import CorpusStore

    return CorpusStore.write(list(CorpusStore(corpus_path))[:12], tmp_path / "corpus.jsonl")


ENCODE_KW = {"batch_size": 4, "trainer_kwargs": {"accelerator": "cpu", "devices": 1}, "progress": False}


def test_stored_embeddings_of_another_renderer_are_refused(small_corpus, tmp_path: Path) -> None:
    from canopy_lit.encoders import load_encoder
    from canopy_lit.hierarchy import Hierarchy, ImageTreeBuilder

    encoder, out = load_encoder("minilm", max_seq_length=32), tmp_path / "emb"
    assert encode_corpus(small_corpus, encoder, out, **ENCODE_KW).encoded == len(small_corpus)
    described = Hierarchy(2, builders=[ImageTreeBuilder(describer=_describe_frame)])
    with pytest.raises(ValueError) as err:  # same encoder and corpus, items rendered another way
        encode_corpus(small_corpus, encoder, out, hierarchy=described, **ENCODE_KW)
    msg = str(err.value)
    assert msg.startswith(f"{out / 'meta.json'}: the embeddings there come from another setup (render: ")
    assert f"{described.fingerprint!r} now" in msg and "encode into a fresh folder" in msg
    assert encode_corpus(small_corpus, encoder, out, **ENCODE_KW).encoded == 0  # their own renderer: reused


def test_items_cut_at_max_seq_length_are_counted_and_logged(small_corpus, tmp_path: Path, caplog) -> None:
    from canopy_lit.encoders import load_encoder
    from canopy_lit.retrieval.corpus import render_item

    encoder = load_encoder("minilm", max_seq_length=80)  # a third of these HotpotQA paragraphs are longer
    lengths = [len(ids) for ids in encoder.tokenizer([render_item(it).text for it in small_corpus])["input_ids"]]
    longer = sum(n > 80 for n in lengths)
    assert 0 < longer < len(small_corpus)
    with caplog.at_level("WARNING"):
        rep = encode_corpus(small_corpus, encoder, tmp_path / "emb", **ENCODE_KW)
    assert (rep.encoded, rep.truncated) == (len(small_corpus), longer)
    warning = f"{longer} of the {len(small_corpus)} items to encode are longer than the encoder reads (max_seq_length=80"
    assert [r for r in caplog.records if r.getMessage().startswith(warning)]
