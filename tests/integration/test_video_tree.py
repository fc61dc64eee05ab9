"""Video trees on the bundled real clips: 30-s leaves, 1 frame / 10 s, <= 32 frames per node, lazy decoding."""

from __future__ import annotations

import pytest

from canopy_lit.hierarchy import Hierarchy, VideoTreeBuilder, decode_frames, sample_times, video_duration
from canopy_lit.types import Item, VideoRef


def video(media_dir, name: str, start: float = 0.0, end: float | None = None) -> Item:
    return Item(name, "video", title=name, video=VideoRef(str(media_dir / "video" / name), start, end))


def test_vtest_has_three_thirty_second_leaves(media_dir) -> None:
    tree = Hierarchy(2).build(video(media_dir, "vtest.avi"))
    assert video_duration(str(media_dir / "video" / "vtest.avi")) == pytest.approx(79.5, abs=0.2)
    assert tree.n_leaves == 3
    assert [(leaf.t_start, round(leaf.t_end, 1)) for leaf in tree.leaves] == [(0.0, 30.0), (30.0, 60.0), (60.0, 79.5)]
    builder = Hierarchy(2).builder(tree.item.modality)
    frames = {tree.node(i): len(builder.frames(tree, i)) for i in range(len(tree))}
    # root 79.5 s -> 8 frames; [0,60) -> 6; last short leaf 19.5 s -> 2; full leaves -> 3
    assert sorted(frames.values()) == [2, 3, 3, 6, 8]


def test_segment_window_and_short_videos(media_dir) -> None:
    tree = Hierarchy(2).build(video(media_dir, "vtest.avi", 10.0, 75.0))
    assert [round(leaf.t_start, 1) for leaf in tree.leaves] == [10.0, 40.0, 70.0]
    short = Hierarchy(2).build(video(media_dir, "bikes.mp4"))
    assert short.n_leaves == 1 and len(Hierarchy(2).builder(short.item.modality).frames(short, 0)) == 1


def test_frames_per_node_are_capped_and_evenly_thinned() -> None:
    times = sample_times(0.0, 3 * 3600.0)  # 3 h parent: 1080 candidate frames
    assert len(times) == 32
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert max(gaps) - min(gaps) <= 10.0 + 1e-6
    assert sample_times(0.0, 30.0) == [5.0, 15.0, 25.0]


def test_decoding_is_lazy_and_seeks_by_timestamp(media_dir) -> None:
    builder = VideoTreeBuilder()
    tree = builder.build(video(media_dir, "vtest.avi"))  # no decoding needed to build
    frames = builder.frames(tree, tree.children[0][0])
    images = decode_frames(frames[0].path, [f.t for f in frames[:2]])
    assert len(images) == 2 and images[0].size == (768, 576)


def test_missing_video_file_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="video file not found"):
        Hierarchy(2).build(Item("x", "video", video=VideoRef(str(tmp_path / "nope.mp4"))))
