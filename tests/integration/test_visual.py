"""The CPU visual path on the bundled real media: describer (EfficientNet-Lite0 + Tesseract), video trees
with frame descriptions, frame decoding, reader content parts, visual token counts, the LVBench-format fixture."""

from __future__ import annotations

import base64
import io
import json
import re

import pytest
from PIL import Image, ImageDraw, ImageFont

from canopy_lit.hierarchy import (
    Frame,
    Hierarchy,
    ImageTreeBuilder,
    VideoTreeBuilder,
    decode_frames,
    video_duration,
)
from canopy_lit.types import Item, VideoRef
from canopy_lit.visual import (
    FrameDescriber,
    VisualTokenCounter,
    evidence_parts,
    imagenet_labels,
    load_frames,
    ocr_text,
    qwen_vl_image_tokens,
    tesseract_available,
    user_message,
    vllm_inputs,
)

needs_tesseract = pytest.mark.skipif(
    not tesseract_available(),
    reason="tesseract binary not installed (apt-get install tesseract-ocr tesseract-ocr-eng)",
)


@pytest.fixture(scope="module")
def describer() -> FrameDescriber:
    return FrameDescriber(top_k=3)


def video_item(media_dir, name: str) -> Item:
    return Item(name, "video", title=name, video=VideoRef(str(media_dir / "video" / name)))


def labels_of(description: str) -> list[str]:
    m = re.match(r"labels: ([^;]*)", description)
    assert m, description
    return m.group(1).split(", ")


def test_imagenet_labels_come_from_the_packaged_list() -> None:
    names = imagenet_labels()
    assert len(names) == 1000 and len(set(names)) > 990
    assert names[281] == "tabby cat" and names[0] == "tench"  # "tabby, tabby cat" -> the noun-bearing synonym


def test_cat_photo_gets_a_cat_label_and_coffee_a_coffee_label(describer, media_dir) -> None:
    cat = describer.describe_image(media_dir / "images" / "chelsea.png")
    assert any("cat" in label for label in labels_of(cat)), cat
    coffee = describer.describe_image(media_dir / "images" / "coffee.png")
    assert labels_of(coffee)[0] in {"espresso", "cup", "coffee mug"}, coffee


def test_descriptions_are_cached_per_frame(tmp_path, media_dir) -> None:
    cache = tmp_path / "describer.jsonl"
    d = FrameDescriber(ocr=False, cache_path=cache)
    frame = Frame(str(media_dir / "video" / "bikes.mp4"), 3.0)
    first = d(frame)
    assert d.stats.frames == 1 and d(frame) == first and d.stats.cache_hits == 1
    assert d(Frame(frame.path, 9.5)) != first  # another timestamp is another frame
    again = FrameDescriber(ocr=False, cache_path=cache)  # persisted: described without decoding
    assert again(frame) == first and again.stats.frames == 0
    other_model = FrameDescriber(ocr=False, top_k=1, cache_path=cache)
    assert other_model.cache_key(frame) != d.cache_key(frame)


@needs_tesseract
def test_ocr_reads_a_rendered_text_image() -> None:
    im = Image.new("RGB", (640, 160), "white")
    ImageDraw.Draw(im).text(
        (20, 40), "CANOPY evidence 2026", fill="black", font=ImageFont.load_default(size=48)
    )
    assert ocr_text(im) == "CANOPY evidence 2026"


@needs_tesseract
def test_describer_adds_ocr_text_only_where_there_is_text(describer, media_dir, tmp_path) -> None:
    # a real photo with a printed sign pasted on it: labels still come, and the sign is read
    photo = Image.open(media_dir / "images" / "coffee.png").convert("RGB")
    ImageDraw.Draw(photo).rectangle((0, 0, 600, 90), fill="white")
    ImageDraw.Draw(photo).text((20, 15), "CAFE OPEN 7AM", fill="black", font=ImageFont.load_default(size=52))
    photo.save(tmp_path / "sign.png")
    text = describer.describe_image(tmp_path / "sign.png")
    assert text.startswith("labels: ") and text.endswith("; text: CAFE OPEN 7AM"), text
    # frames of natural scenes stay free of OCR noise (confidence filter)
    assert "text:" not in describer(Frame(str(media_dir / "video" / "vtest.avi"), 5.0))


def test_frames_decode_at_timestamps(media_dir) -> None:
    path = str(media_dir / "video" / "tree.avi")
    early, late = decode_frames(path, [5.0, 27.0])
    assert early.size == late.size == (320, 240)
    # the hand that enters the picture at ~24 s darkens the late frame against the bright sky
    assert sum(late.convert("L").getdata()) < sum(early.convert("L").getdata())
    images = load_frames(
        [Frame(path, 27.0), Frame(str(media_dir / "images" / "coffee.png")), Frame(path, 5.0)]
    )
    assert [im.size for im in images] == [(320, 240), (600, 400), (320, 240)]
    assert list(images[2].getdata()) == list(early.convert("RGB").getdata())
    with pytest.raises(FileNotFoundError, match="video file not found"):
        load_frames([Frame(str(media_dir / "video" / "missing.mp4"), 1.0)])


def test_video_trees_of_the_bundled_clips(media_dir) -> None:
    h = Hierarchy(2)
    expected = {
        "vtest.avi": (79.5, 3),
        "tree.avi": (29.6, 1),
        "bikes.mp4": (10.0, 1),
        "bigbuckbunny.mp4": (5.3, 1),
    }
    for name, (duration, n_leaves) in expected.items():
        tree = h.build(video_item(media_dir, name))
        assert video_duration(tree.item.video.path) == pytest.approx(duration, abs=0.1)
        assert tree.n_leaves == n_leaves
        builder = h.builder(tree.item.modality)
        for i in range(len(tree)):
            t0, t1 = builder.window(tree, i)
            frames = builder.frames(tree, i)
            # 1 frame per started 10 s of the node's window, capped at 32
            assert len(frames) == min(32, max(1, -(-round(t1 - t0, 3) // 10)))
            assert all(t0 <= f.t <= t1 for f in frames)


def test_video_node_text_carries_timestamped_frame_descriptions(media_dir) -> None:
    describer = FrameDescriber(ocr=False)  # OCR is covered above; labels keep this test fast
    builder = VideoTreeBuilder(describer=describer)
    tree = builder.build(video_item(media_dir, "vtest.avi"))
    described = describer.describe_tree(tree, builder.frames)  # one batched pass over 8 distinct frames
    assert len(described) == 8
    leaf = tree.find(2, 3)
    text = builder.node_input(tree, leaf).text
    assert text.startswith("vtest.avi [01:00-01:20] 01:05 labels: ")
    assert "01:15 labels: " in text  # the 19.5-s last leaf samples 65 s and 74.75 s
    assert "labels:" in builder.evidence_text(tree, [leaf])


def test_image_items_are_described(describer, media_dir, data_dir) -> None:
    records = json.loads((data_dir / "fixtures" / "bundled_image_items.json").read_text())
    items = [Item.from_dict({**r, "image": str(data_dir / r["image"])}) for r in records]
    h = Hierarchy(2, [ImageTreeBuilder(describer=describer)])
    texts = {it.id: h.node_text(h.build(it), 0) for it in items}
    assert "labels: " in texts["bundled:image/chelsea"] and "cat" in texts["bundled:image/chelsea"]
    assert describer.describe_item(items[0]) in h.evidence_text(h.build(items[0]), [0])


def test_image_content_parts_for_a_vision_language_reader(media_dir) -> None:
    h = Hierarchy(2)
    tree = h.build(video_item(media_dir, "vtest.avi"))
    kept = [tree.find(0, 1), tree.find(2, 3)]  # a gap in the middle
    parts = evidence_parts(h, tree, kept, mode="frames", max_side=384)
    kinds = [p["type"] for p in parts]
    assert kinds == ["text", "text", "image_url", "image_url", "image_url", "text", "image_url", "image_url"]
    assert [p["text"] for p in parts if p["type"] == "text"][1:] == ["[00:00-00:30]", "[01:00-01:20]"]
    url = parts[2]["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    jpeg = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert jpeg.format == "JPEG" and jpeg.size == (384, 288)
    msg = user_message("How many vans?", parts)
    assert msg["content"][-1] == {"type": "text", "text": "Question: How many vans?"}
    text_only = evidence_parts(Hierarchy(2, [VideoTreeBuilder()]), tree, kept, mode="text")
    assert text_only == [{"type": "text", "text": "[video] vtest.avi\n[00:00-00:30]\n…\n[01:00-01:20]"}]
    inputs = vllm_inputs("<image>", [Frame(tree.item.video.path, 5.0)])
    assert inputs["multi_modal_data"]["image"][0].size == (768, 576)


def test_visual_tokens_match_the_reader_processor(media_dir) -> None:
    try:  # transformers >= 5 without torchvision: the PIL backend, same counting
        from transformers import Qwen2VLImageProcessorPil as Qwen2VLImageProcessor
    except ImportError:
        from transformers import Qwen2VLImageProcessor

    frame = Frame(str(media_dir / "video" / "vtest.avi"), 5.0)
    fallback = VisualTokenCounter()
    assert fallback.source == "qwen3-vl-rule" and fallback.frame_tokens(frame) == 432  # 768x576 -> 24 x 18
    # the same geometry configured in a real transformers processor gives the same counts
    ip = Qwen2VLImageProcessor(
        patch_size=16, merge_size=2, size={"shortest_edge": 65536, "longest_edge": 16777216}
    )
    counter = VisualTokenCounter(ip)
    for w, h in [(768, 576), (320, 240), (1280, 720), (90, 40), (9000, 7000)]:
        assert counter.image_tokens(w, h) == qwen_vl_image_tokens(w, h)
    grid = ip(images=[Image.new("RGB", (640, 272))], return_tensors="pt")["image_grid_thw"][0]
    assert counter.image_tokens(640, 272) == int(grid.prod()) // 4
    assert VisualTokenCounter(tokens_per_frame=85).count([frame] * 3) == 255


def test_lvbench_fixture_is_well_formed_and_localised(data_dir) -> None:
    records = json.loads((data_dir / "fixtures" / "lvbench_bundled_clips.json").read_text())
    schema = json.loads((data_dir / "lvbench" / "lvbench_universalrag.json").read_text())[0].keys()
    assert 6 <= len(records) <= 10 and len({r["index"] for r in records}) == len(records)
    for r in records:
        assert set(r) == set(schema), r["index"]
        assert re.findall(r"^\(([A-D])\) ", r["question"], re.M) == ["A", "B", "C", "D"]
        assert r["answer"] in "ABCD"
        (video,) = r["gt_videos"]
        start, end = r["time_reference"]
        assert 0 <= start <= end <= video_duration(str(data_dir / video)) + 0.5, r["index"]


def test_lvbench_fixture_time_reference_gives_video_training_instances(data_dir) -> None:
    from canopy_lit.data import load_benchmark
    from canopy_lit.supervision import instances_for

    bench = load_benchmark(
        "lvbench", str(data_dir / "fixtures" / "lvbench_bundled_clips.json"), video_root=str(data_dir)
    )
    assert not bench.skipped.get("missing_video")
    q = next(q for q in bench.questions if q.id == "bundled_vtest_03")  # time_reference [54, 69]
    assert q.choices and q.answers == ["A"]
    ((item_id, gold),) = q.gold.items()
    assert gold == [1, 2]  # the 30-s clips [30, 60) and [60, 79.5)
    tree = Hierarchy(2).build(bench.items[item_id])
    instances = instances_for(q.id, q.text, tree, gold, "lvbench")
    # B=2: root [0,3) -> [0,2) + [2,3); [0,2) -> [0,1) + [1,2). V = {root, [0,2)}: at the root both
    # children beat it; at [0,2) the gold leaf [1,2) beats its parent and its sibling, the parent the sibling.
    left, right, l0, l1 = (tree.find(*r) for r in [(0, 2), (2, 3), (0, 1), (1, 2)])
    assert [(i.node, sorted(i.pairs)) for i in instances] == [
        (0, sorted([(left, 0), (right, 0)])),
        (left, sorted([(l1, left), (left, l0), (l1, l0)])),
    ]
    # the short clips are single 30-s leaves: whole-gold, no refinement decision to train
    short = next(q for q in bench.questions if q.id == "bundled_tree_01")
    ((sid, sgold),) = short.gold.items()
    assert (
        sgold == [0]
        and instances_for(short.id, short.text, Hierarchy(2).build(bench.items[sid]), sgold) == []
    )
