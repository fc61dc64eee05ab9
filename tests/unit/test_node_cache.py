"""NodeEmbeddingCache with a counting fake encoder (hash-seeded vectors) on hand-made fixture items."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

from canopy_lit.hierarchy import Hierarchy, ImageTreeBuilder, VideoTreeBuilder
from canopy_lit.hierarchy.base import NodeInput
from canopy_lit.scoring.node_cache import NodeEmbeddingCache
from canopy_lit.types import Item, Table, VideoRef

ROOT = Path(__file__).resolve().parents[2]


class FakeCountingEncoder:
    """Deterministic text -> unit vector (seeded by the text hash); records every text it encodes."""

    dim = 16

    def __init__(self, adapter: str = "none") -> None:
        self.adapter = adapter
        self.calls: list[list[str]] = []

    @property
    def fingerprint(self) -> str:
        return f"FakeCountingEncoder:adapter={self.adapter}"

    def encode_nodes(self, inputs, batch_size=None) -> torch.Tensor:
        texts = [x.text if isinstance(x, NodeInput) else x for x in inputs]
        self.calls.append(texts)
        rows = []
        for t in texts:
            seed = int(hashlib.sha256(f"{self.adapter}|{t}".encode()).hexdigest()[:8], 16)
            v = np.random.default_rng(seed).standard_normal(self.dim)
            rows.append(v / np.linalg.norm(v))
        return torch.tensor(np.stack(rows), dtype=torch.float32)

    @property
    def n_encoded(self) -> int:
        return sum(len(c) for c in self.calls)


# Hand-made fixture items (not benchmark records).
TEXT = Item(
    id="fixture:text",
    modality="text",
    title="Fixture",
    sentences=["One sentence.", "Two sentence.", "Red sentence.", "Blue sentence.", "Last one."],
)
TABLE = Item(
    id="fixture:table",
    modality="table",
    title="Scores",
    table=Table(header=["team", "points"], rows=[["a", "1"], ["b", "2"], ["c", "3"]]),
)


def test_miss_then_memory_hit_encodes_each_node_once() -> None:
    enc = FakeCountingEncoder()
    cache = NodeEmbeddingCache(enc)
    tree = Hierarchy(2).build(TEXT)
    first = cache.embed_tree(tree)
    assert first.shape == (len(tree), enc.dim) and first.dtype == np.float32
    assert enc.n_encoded == len(tree) and len(enc.calls) == 1
    second = cache.embed_tree(tree)
    assert enc.n_encoded == len(tree)  # nothing new encoded
    np.testing.assert_array_equal(first, second)
    assert cache.stats()["hits"] == len(tree) and cache.stats()["misses"] == len(tree)
    # Rows are the embeddings of Hierarchy.node_input of each node id.
    h = Hierarchy(2)
    expect = FakeCountingEncoder().encode_nodes([h.node_input(tree, i) for i in range(len(tree))]).numpy()
    np.testing.assert_allclose(first, expect, atol=1e-7)


def test_key_includes_fingerprint() -> None:
    enc = FakeCountingEncoder()
    cache = NodeEmbeddingCache(enc)
    tree = Hierarchy(2).build(TABLE)
    f0 = cache.embed_tree(tree)
    enc.adapter = "lora-1234"  # a trained adapter: a new fingerprint, so every node is a miss
    ft = cache.embed_tree(tree)
    assert enc.n_encoded == 2 * len(tree)
    assert not np.allclose(f0, ft)
    enc.adapter = "none"
    np.testing.assert_array_equal(cache.embed_tree(tree), f0)  # both fingerprints stay cached
    assert enc.n_encoded == 2 * len(tree)


def test_disk_persistence_across_cache_objects(tmp_path) -> None:
    tree = Hierarchy(2).build(TEXT)
    enc = FakeCountingEncoder()
    a = NodeEmbeddingCache(enc, cache_dir=tmp_path)
    cold = a.embed_tree(tree)
    a.close()
    enc2 = FakeCountingEncoder()
    b = NodeEmbeddingCache(enc2, cache_dir=tmp_path)
    warm = b.embed_tree(tree)
    assert enc2.n_encoded == 0 and b.stats()["disk_hits"] == len(tree)
    np.testing.assert_array_equal(cold, warm)
    # Another fingerprint gets its own store: nothing is served across encoders.
    c = NodeEmbeddingCache(FakeCountingEncoder(adapter="x"), cache_dir=tmp_path)
    c.embed_tree(tree)
    assert c.stats()["misses"] == len(tree)
    assert len(list(tmp_path.glob("nodes-*.sqlite"))) == 2


def test_float16_store_is_consistent_cold_and_warm(tmp_path) -> None:
    tree = Hierarchy(2).build(TEXT)
    cold = NodeEmbeddingCache(FakeCountingEncoder(), cache_dir=tmp_path, dtype="float16").embed_tree(tree)
    warm = NodeEmbeddingCache(FakeCountingEncoder(), cache_dir=tmp_path, dtype="float16").embed_tree(tree)
    np.testing.assert_array_equal(cold, warm)  # rounded through fp16 both times: identical scores
    with pytest.raises(ValueError, match="dtype"):
        NodeEmbeddingCache(FakeCountingEncoder(), dtype="int8")


def test_lru_eviction_without_disk() -> None:
    enc = FakeCountingEncoder()
    cache = NodeEmbeddingCache(enc, capacity=3)
    tree = Hierarchy(2).build(TEXT)  # 5 leaves -> 9 nodes
    cache.embed_tree(tree)
    assert len(cache) == 3  # only the 3 most recently used survive
    n = enc.n_encoded
    cache.embed_tree(tree)
    assert enc.n_encoded > n  # evicted nodes had to be re-encoded
    # Recency: touching a key keeps it when others arrive.
    small = NodeEmbeddingCache(FakeCountingEncoder(), capacity=2)
    small.embed_tree(Hierarchy(2).build(Item(id="fixture:one", modality="text", sentences=["A.", "B."])))
    kept = list(small._mem)
    small._mem_get(small.fingerprint, kept[0][1:])  # use the older entry
    small._mem_put(small.fingerprint, ("other", "digest", 0, 1), (np.zeros(16, np.float32), False))
    assert kept[0] in small._mem and kept[1] not in small._mem


def test_trees_of_different_branching_share_leaf_ranges() -> None:
    enc = FakeCountingEncoder()
    cache = NodeEmbeddingCache(enc)
    t2, t3 = Hierarchy(2).build(TEXT), Hierarchy(3).build(TEXT)
    e2 = cache.embed_tree(t2)
    before = enc.n_encoded
    e3 = cache.embed_tree(t3)
    ranges2 = {(int(s), int(e)) for s, e in zip(t2.starts, t2.ends, strict=True)}
    shared = [i for i in range(len(t3)) if (int(t3.starts[i]), int(t3.ends[i])) in ranges2]
    assert enc.n_encoded - before == len(t3) - len(shared)
    np.testing.assert_array_equal(e3[0], e2[0])  # the root is the same node under any B


def test_embed_trees_batches_misses_and_precompute_skips_cached() -> None:
    enc = FakeCountingEncoder()
    cache = NodeEmbeddingCache(enc)
    trees = [Hierarchy(2).build(TEXT), Hierarchy(2).build(TABLE)]
    out = cache.embed_trees(trees)
    assert [len(o) for o in out] == [len(t) for t in trees] and len(enc.calls) == 1
    assert cache.precompute([TEXT, TABLE]) == 0  # all cached
    fresh = NodeEmbeddingCache(FakeCountingEncoder())
    assert fresh.precompute([TEXT, TABLE], chunk=1) == sum(len(t) for t in trees)


# Hand-made fixture items for the renderer key: an image (one node) and a 60-s video segment.
IMAGE = Item(
    id="fixture:image", modality="image", title="Astronaut", image=str(ROOT / "data/media/images/astronaut.png"),
    meta={"caption": "a portrait"},
)  # fmt: skip
VIDEO = Item(id="fixture:video", modality="video", title="Bunny", video=VideoRef(str(ROOT / "data/media/video/bikes.mp4"), 0.0, 60.0))


def fixture_describer(frame) -> str:
    """A hand-made stand-in for FrameDescriber: text that depends on the frame only."""
    return f"labels: fixture@{frame.t}"


def test_renderer_is_part_of_the_key_image_default_vs_described(tmp_path) -> None:
    enc = FakeCountingEncoder()
    plain, described = Hierarchy(2), Hierarchy(2, builders=[ImageTreeBuilder(describer=fixture_describer)])
    assert plain.fingerprint != described.fingerprint
    tree = plain.build(IMAGE)
    old = NodeEmbeddingCache(enc, plain, cache_dir=tmp_path).embed_tree(tree)
    fresh = FakeCountingEncoder()
    got = NodeEmbeddingCache(fresh, described, cache_dir=tmp_path).embed_tree(described.build(IMAGE))
    assert fresh.n_encoded == 1  # re-encoded under the described renderer, not served from the plain store
    np.testing.assert_allclose(got, fresh.encode_nodes([described.node_input(tree, 0)]).numpy(), atol=1e-7)
    assert not np.allclose(got, old)


def test_video_clip_and_frame_settings_rekey() -> None:
    enc = FakeCountingEncoder()
    cache_30 = NodeEmbeddingCache(enc, Hierarchy(2, builders=[VideoTreeBuilder(clip_seconds=30.0)]))
    h20 = Hierarchy(2, builders=[VideoTreeBuilder(clip_seconds=20.0)])
    cache_20 = NodeEmbeddingCache(enc, h20)
    cache_20._mem = cache_30._mem  # one shared memory tier, as one long-lived process would have
    cache_30.embed_tree(cache_30.tree(VIDEO))
    before = enc.n_encoded
    tree20 = h20.build(VIDEO)  # leaf 0 = [0, 20) s now, same leaf range (0, 1) as [0, 30) s before
    got = cache_20.embed_tree(tree20)
    assert enc.n_encoded - before == len(tree20)
    expect = FakeCountingEncoder().encode_nodes([h20.node_input(tree20, i) for i in range(len(tree20))]).numpy()
    np.testing.assert_allclose(got, expect, atol=1e-7)
    assert Hierarchy(2, builders=[VideoTreeBuilder(frame_interval=5.0)]).fingerprint != Hierarchy(2).fingerprint
    assert Hierarchy(2, builders=[VideoTreeBuilder(max_frames=8)]).fingerprint != Hierarchy(2).fingerprint
    assert Hierarchy(3).fingerprint == Hierarchy(2).fingerprint  # B does not change how a node renders


def test_encoder_render_settings_enter_the_key() -> None:
    enc = FakeCountingEncoder()
    cache = NodeEmbeddingCache(enc)
    enc.max_seq_length = 256
    fp256 = cache.fingerprint
    enc.max_seq_length = 128  # a shorter cut changes every long node's vector
    assert cache.fingerprint != fp256 and "max_seq_length=128" in cache.fingerprint
    enc.max_frames_per_node = 4
    assert "max_frames_per_node=4" in cache.fingerprint


def test_configured_trees_have_distinct_fingerprints() -> None:
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    default = instantiate(OmegaConf.load(ROOT / "configs/tree/default.yaml"))
    described = instantiate(OmegaConf.load(ROOT / "configs/tree/described.yaml"))
    assert default.fingerprint == Hierarchy(2).fingerprint
    assert described.fingerprint != default.fingerprint
    spec = described.builder("image").render_spec
    assert "FrameDescriber" in spec["describer"] and "efficientnet-lite0" in spec["describer"]


class FrameAwareFakeEncoder(FakeCountingEncoder):
    """Like ``FakeCountingEncoder`` but the vector also depends on the frames a node carries (a visual encoder)."""

    def encode_nodes(self, inputs, batch_size=None) -> torch.Tensor:
        keyed = [f"{x.text}|frames={len(x.frames)}" if isinstance(x, NodeInput) else f"{x}|frames=0" for x in inputs]
        return super().encode_nodes(keyed, batch_size)


def test_scorer_without_cache_encodes_the_same_inputs_as_the_cache() -> None:
    from canopy_lit.scoring.scorers import NodeScorer

    h = Hierarchy(2)
    tree = h.build(VIDEO)  # video nodes carry frames
    cached = NodeScorer(FrameAwareFakeEncoder(), h, NodeEmbeddingCache(FrameAwareFakeEncoder(), h))
    plain = NodeScorer(FrameAwareFakeEncoder(), h)
    np.testing.assert_allclose(plain.embed_tree(tree), cached.embed_tree(tree), atol=1e-7)
    np.testing.assert_allclose(plain.embed_trees([tree], [[0, 1]])[0], cached.embed_trees([tree], [[0, 1]])[0], atol=1e-7)


def test_an_image_file_replaced_under_the_same_path_is_encoded_again(tmp_path) -> None:
    # Bundled photos copied to a hand-made item: the path and the record stay, the pixels change.
    import shutil

    photo = tmp_path / "photo.png"
    shutil.copy(ROOT / "data/media/images/astronaut.png", photo)
    item = Item(id="fixture:photo", modality="image", title="Photo", image=str(photo))
    enc = FakeCountingEncoder()
    h = Hierarchy(2)
    NodeEmbeddingCache(enc, h, cache_dir=tmp_path / "nodes").embed_tree(h.build(item))
    NodeEmbeddingCache(enc, h, cache_dir=tmp_path / "nodes").embed_tree(h.build(item))
    assert enc.n_encoded == 1  # the second run read the node from disk
    shutil.copy(ROOT / "data/media/images/coffee.png", photo)
    NodeEmbeddingCache(enc, h, cache_dir=tmp_path / "nodes").embed_tree(h.build(item))
    assert enc.n_encoded == 2
