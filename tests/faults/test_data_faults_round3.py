"""Data faults of review round 3: the split seed (a training seed must not change the split evaluation
reads), document-disjoint splits with partly fixed splits, strict JSON reading, the custom reader's
cross-file items and media root, and video clip bounds.

Synthetic questions where the property is about grouping; the bundled data, the committed adapter and the
bundled video (``vtest.avi``, 79.5 s) where a real file is involved.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from evaluate_runner import run_script
from hydra import compose
from hydra.utils import instantiate

from canopy_lit.data import Benchmark, DataFormatError, load_benchmark, split_questions
from canopy_lit.data.datamodule import PreferenceDataModule
from canopy_lit.data.readers._io import iter_records, load_json
from canopy_lit.data.splits import (
    adapter_split,
    adapter_split_problem,
    assign_splits,
    carve_val,
    record_adapter_split,
)
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.types import Item, Question, VideoRef

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = ROOT / "experiments" / "runs" / "recipe" / "base" / "adapter"
VIDEO = ROOT / "data" / "media" / "video" / "vtest.avi"  # 79.5 s


def _ids(questions: list[Question]) -> list[str]:
    return [q.id for q in questions]


# --------------------------------------------------------------------------------- 1. the split seed


def test_another_training_seed_trains_on_the_split_evaluation_reads(hydra_ctx) -> None:
    cfg = compose("train", overrides=["experiment=quickstart", "seed=1"])
    assert cfg.datamodule.seed == 1 and cfg.datamodule.split_seed == 0
    dm = instantiate(cfg.datamodule, _convert_="all")
    nq = load_benchmark("nq")
    # what evaluate.py reads (data.seed 0) and what this run trains / validates / tests on: the same split
    for split in ("train", "val", "test"):
        assert _ids(dm._split(nq, split, {})) == _ids(split_questions(nq, split, seed=0)), split
    trained = {q.id for q in dm._split(nq, "train", {})}
    assert not trained & {q.id for q in split_questions(nq, "test", seed=0)}  # was 230 of 277 test questions


def test_the_split_seed_is_in_the_fingerprint() -> None:
    dm = PreferenceDataModule(benchmarks=["hotpotqa"], seed=1)
    assert dm.fingerprint["split_seed"] == 0 and dm.split_record == {
        "split_seed": 0, "benchmarks": ["hotpotqa"], "zero_shot": []}  # fmt: skip
    made = PreferenceDataModule(benchmarks=["hotpotqa"], seed=0).fingerprint
    PreferenceDataModule(benchmarks=["hotpotqa"], seed=0).check_fingerprint(made)
    with pytest.raises(Exception, match=r"datamodule.split_seed 0 there, 2 here"):
        PreferenceDataModule(benchmarks=["hotpotqa"], seed=0, split_seed=2).check_fingerprint(made)


def _unrecorded_copy(to: Path) -> Path:
    """The committed adapter as saved before the split record existed: its fingerprint without the record."""
    shutil.copytree(ADAPTER, to)
    meta = json.loads((to / "encoder_fingerprint.json").read_text())
    (to / "encoder_fingerprint.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "split"}))
    return to


@pytest.fixture
def adapter_seed3(tmp_path: Path) -> Path:
    """The committed adapter, recorded as trained on NQ / HotpotQA split with split seed 3."""
    adapter = tmp_path / "adapter"
    shutil.copytree(ADAPTER, adapter)
    record_adapter_split(adapter, {"split_seed": 3, "benchmarks": ["hotpotqa", "nq"], "zero_shot": ["tatqa"]})
    return adapter


def test_evaluate_refuses_an_adapter_on_a_split_made_with_another_seed(tmp_path: Path, adapter_seed3: Path) -> None:
    out = run_script("evaluate.py", tmp_path / "run", "mode=probe", "data=nq", "data.seed=0", f"encoder.adapter={adapter_seed3}")
    assert out.status == 2, out.stderr[-2000:]
    [line] = [x for x in out.stderr.splitlines() if "error:" in x]
    assert f"encoder.adapter {adapter_seed3} was trained on nq's split made with split seed 3" in line
    assert "evaluate with data.seed=3" in line and "Traceback" not in out.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_the_seed_check_passes_only_where_no_training_question_can_leak(adapter_seed3: Path) -> None:
    assert adapter_split(adapter_seed3)["split_seed"] == 3
    assert json.loads((adapter_seed3 / "encoder_fingerprint.json").read_text())["adapter_hash"]  # kept
    assert adapter_split_problem(adapter_seed3, "nq", "test", 3) is None  # the same split
    assert adapter_split_problem(adapter_seed3, "tatqa", "test", 0) is None  # zero-shot: never trained on
    assert adapter_split_problem(adapter_seed3, "nq", "all", 0) is None  # no split
    bare = _unrecorded_copy(adapter_seed3.parent / "bare")  # no record, no run config beside it
    assert adapter_split_problem(bare, "nq", "test", 1) is None  # records no split: nothing to check
    assert "split seed 3" in (adapter_split_problem(adapter_seed3, "hotpotqa", "val", 0) or "")


def test_every_committed_and_shipped_adapter_records_the_split_it_trained_on() -> None:
    """Every adapter committed under experiments/runs records its split (the recipe's record their run
    config's), so an evaluation on questions it trained on is refused (was: ``encoder.adapter=quickstart
    data.seed=1`` evaluated the shipped adapter on a split holding questions it trained on)."""
    import zipfile

    import yaml

    from canopy_lit.adapters import shipped_adapter

    with zipfile.ZipFile(ROOT / "experiments" / "runs" / "recipe.zip") as archive:
        configs = {n.split("/.hydra/")[0]: yaml.safe_load(archive.read(n)) for n in archive.namelist() if n.endswith("/.hydra/config.yaml")}
    folders = sorted(p.parent.name for p in (ROOT / "experiments" / "runs" / "recipe").glob("*/adapter"))
    assert folders and folders == sorted(configs)
    for name, cfg in configs.items():
        dm = cfg["datamodule"]
        assert dm["seed"] == "${seed}" and "split_seed" not in dm  # split with the training seed, then
        want = {"split_seed": cfg["seed"], "benchmarks": dm["benchmarks"], "zero_shot": dm["zero_shot"]}
        assert adapter_split(ROOT / "experiments" / "runs" / "recipe" / name / "adapter") == want, name
    every = [p.parent for p in (ROOT / "experiments" / "runs").rglob("adapter_config.json")]
    assert len(every) > len(folders) and all(adapter_split(a) for a in every), [a for a in every if not adapter_split(a)]
    shipped = shipped_adapter("quickstart")
    assert adapter_split(shipped) == adapter_split(ADAPTER)
    assert "split seed 0" in (adapter_split_problem(shipped, "nq", "test", 1) or "")
    assert adapter_split_problem(shipped, "nq", "test", 0) is None


@pytest.mark.slow  # one tiny real training run (~20 s on 2 cores)
def test_train_records_the_split_seed_in_the_adapter(tmp_path: Path) -> None:
    from test_train_faults import _train

    proc = _train(tmp_path / "run", "seed=1")
    assert proc.returncode == 0, proc.out[-3000:]
    record = json.loads((tmp_path / "run" / "adapter" / "encoder_fingerprint.json").read_text())["split"]
    assert record == {"split_seed": 0, "benchmarks": ["hotpotqa"], "zero_shot": []}


# ------------------------------------------------------------------ 4. partly fixed splits stay disjoint


def _docs_by_split(bench: Benchmark, assigned: dict[str, str | None]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for q in bench.questions:
        if assigned[q.id] is not None:
            out.setdefault(assigned[q.id], set()).update(q.meta["doc"])
    return out


def _pairs(fixed: str) -> Benchmark:
    """200 documents, each with one question of a fixed split and one question without a split."""
    qs = []
    for i in range(200):
        qs.append(Question(f"f{i}", "q?", ["a"], "syn", {}, meta={"doc": [f"d{i}"], "split": fixed}))
        qs.append(Question(f"u{i}", "q?", ["a"], "syn", {}, meta={"doc": [f"d{i}"]}))
    return Benchmark("syn", qs, {}, {})


@pytest.mark.parametrize("fixed", ["test", "val", "train"])
def test_a_question_without_a_split_follows_the_fixed_questions_of_its_document(fixed: str) -> None:
    bench = _pairs(fixed)
    assigned = assign_splits(bench)
    unfixed = [assigned[f"u{i}"] for i in range(200)]
    fixed_as = [assigned[f"f{i}"] for i in range(200)]
    assert unfixed == fixed_as  # was: 176 of 200 unfixed questions of fixed-test documents in train
    docs = _docs_by_split(bench, assigned)
    assert all(not docs[a] & docs[b] for a in docs for b in docs if a < b)


def test_random_mixes_of_fixed_and_unfixed_questions_never_share_a_document_across_splits() -> None:
    rng = random.Random(0)
    for trial in range(20):
        qs = [
            Question(f"q{i}", "q?", ["a"], "syn", {}, meta={
                "doc": [f"d{rng.randrange(60)}" for _ in range(rng.randint(1, 2))],
                **({"split": rng.choice(["train", "val", "test"])} if rng.random() < 0.3 else {})})
            for i in range(150)
        ]  # fmt: skip
        bench = Benchmark("syn", qs, {}, {})
        docs = _docs_by_split(bench, assign_splits(bench, seed=trial))
        assert all(not docs[a] & docs[b] for a in docs for b in docs if a < b), trial


def test_the_fallback_validation_split_holds_out_whole_documents() -> None:
    qs = [Question(f"q{i}", "q?", ["a"], "syn", {}, meta={"doc": [f"d{i // 3}"]}) for i in range(30)]
    val, train = carve_val(qs, 0.1, seed=0)
    assert val and train and len(val) + len(train) == 30
    val_docs = {d for q in val for d in q.meta["doc"]}
    assert not val_docs & {d for q in train for d in q.meta["doc"]}
    one_doc = [Question(f"s{i}", "q?", ["a"], "syn", {}, meta={"doc": ["same"]}) for i in range(5)]
    assert carve_val(one_doc, 0.5) == ([], one_doc)  # one document cannot be split: no leaking val


def test_the_datamodule_fallback_val_split_respects_documents(tmp_path: Path) -> None:
    # HotpotQA-shaped custom data, every record with a fixed split and no val: the datamodule carves val.
    recs = []
    for i in range(8):
        j = i // 2
        para = {"id": f"a{j}", "title": f"T{j}", "text": f"Paragraph {j} says {j}. It has more. And more.",
                "gold_spans": [f"Paragraph {j} says {j}."]}
        recs.append({"id": f"q{i}", "question": f"what does {j} say?", "answers": [str(j)],
                     "split": "train", "items": [para]})  # fmt: skip
    recs.append({"id": "t", "question": "x?", "answers": ["x"], "split": "test",
                 "items": [{"id": "px", "text": "X is x. Y is y.", "gold_spans": ["X is x."]}]})  # fmt: skip
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    dm = PreferenceDataModule(benchmarks={"custom": {"path": str(path)}}, val_fraction=0.25)
    bench = load_benchmark("custom", str(path))
    assert not split_questions(bench, "val")  # the hash gave no val questions: the fallback carves them
    dm.setup()
    items = {s: {e.item_id for e in dm.examples[s]} for s in ("train", "val")}
    assert items["val"] and items["train"] and not items["val"] & items["train"]  # was: q0 val, q1 train (a0)


# ------------------------------------------------------------------------- 21 / 24. strict JSON reading


def _write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('[{"id": 1}]\n[{"id": 2}]\n', "a second JSON array follows the closing ']'"),
        ('[{"id": 1}] trailing', "'trailing' follows the closing ']'"),
        ('[{"id": 1} {"id": 2}]', "record 1: expected ',' or ']' after the record"),
    ],
    ids=["two_arrays", "garbage", "missing_comma"],
)
def test_content_after_or_between_array_records_is_an_error_naming_the_file(tmp_path, content, message) -> None:
    path = _write(tmp_path, "data.json", content)
    with pytest.raises(DataFormatError, match="^" + str(path).replace("\\", "\\\\")) as err:
        list(iter_records(path))
    assert message in str(err.value)  # was: the second array's records dropped, the garbage ignored


def test_nan_answers_are_an_error_naming_record_and_field(tmp_path: Path) -> None:
    path = _write(tmp_path, "data.jsonl", '{"id": "q1", "question": "Q?", "answers": NaN, "items": []}\n')
    with pytest.raises(DataFormatError) as err:
        load_benchmark("custom", str(path))
    assert str(err.value).startswith(f"{path}, line 1 (id 'q1'): answers: NaN is not a JSON value")  # was answer 'nan'
    array = _write(tmp_path, "data.json", '[{"id": "a"}, {"id": "b", "meta": {"x": [1, -Infinity]}}]')
    with pytest.raises(DataFormatError, match=r"record 1 \(id 'b'\): meta.x\[1\]: -Infinity is not a JSON value"):
        list(iter_records(array))
    with pytest.raises(DataFormatError, match=r"\[1\].meta.x\[1\]: -Infinity"):
        load_json(array)


def test_a_deeply_nested_line_is_an_error_naming_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "data.jsonl", '{"id": "q0", "question": "Q?"}\n' + "[" * 200_000 + "]" * 200_000 + "\n")
    with pytest.raises(DataFormatError, match=r"data.jsonl, line 2: nested too deeply to parse"):
        list(iter_records(path))  # was: RecursionError


@pytest.mark.parametrize("name", ["data.jsonl", "data.json"])
def test_invalid_utf8_names_its_line(tmp_path: Path, name: str) -> None:
    body = b'{"id": "q0"}\n{"id": "caf\xe9"}\n' if name.endswith("l") else b'[{"id": "q0"},\n{"id": "caf\xe9"}]\n'
    path = _write(tmp_path, name, body)
    with pytest.raises(DataFormatError, match=rf"{name}, line 2: not UTF-8 text"):  # was: record 0
        list(iter_records(path))


# ------------------------------------------------------------------ 24. custom reader: items across files


def _rec(qid: str, items: list, split: str | None = None) -> dict:
    return {"id": qid, "question": f"question {qid}?", "answers": ["a"], "items": items, **({"split": split} if split else {})}


def _folder(tmp_path: Path, files: dict[str, list[dict]]) -> Path:
    folder = tmp_path / "data"
    folder.mkdir(parents=True)
    for name, recs in files.items():
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in recs))
    return folder


def test_an_item_defined_in_train_is_reused_in_test(tmp_path: Path) -> None:
    para = {"id": "p1", "title": "P", "text": "Paris is in France."}
    folder = _folder(tmp_path, {"train.jsonl": [_rec("q1", [para])], "test.jsonl": [_rec("q2", [{"id": "p1", "gold": True}])]})
    bench = load_benchmark("custom", str(folder))  # was: "'p1' names no item defined so far" (test reads first)
    q2 = next(q for q in bench.questions if q.id == "q2")
    assert q2.gold == {"custom:p1": []} and q2.meta["split"] == "test"


def test_a_question_id_in_test_and_train_leaves_later_references_valid(tmp_path: Path) -> None:
    para = {"id": "p9", "text": "Rome is in Italy."}
    folder = _folder(tmp_path, {
        "test.jsonl": [_rec("q1", [{"id": "t", "text": "Oslo is in Norway."}])],
        "train.jsonl": [_rec("q1", [para]), _rec("q2", ["p9"])],
    })  # fmt: skip
    bench = load_benchmark("custom", str(folder))  # was: q2 failed, "'p9' names no item defined so far"
    assert [q.id for q in bench.questions] == ["q1", "q2"] and bench.skipped["duplicate_question"] == 1
    assert bench.candidates["q2"] == ["custom:p9"]
    missing = _folder(tmp_path / "m", {"test.jsonl": [_rec("q1", ["nowhere"])]})
    with pytest.raises(DataFormatError, match=r"items\[0\].id: 'nowhere' names no item defined in the dataset"):
        load_benchmark("custom", str(missing))  # a real problem is still one clear error
    clash = _folder(tmp_path / "c", {"test.jsonl": [_rec("q1", [{"id": "p", "text": "A."}])],
                                     "train.jsonl": [_rec("q2", [{"id": "p", "text": "B."}])]})  # fmt: skip
    with pytest.raises(DataFormatError, match=r"train.jsonl, line 1 \(id 'q2'\): items\[0\].id: 'p' was defined with other content at test.jsonl, line 1"):
        load_benchmark("custom", str(clash))


# ------------------------------------------------------- 17. media paths stay inside the media root


@pytest.mark.parametrize("ref", ["../../../etc/passwd", "/etc/passwd", "img/../../outside.png"])
def test_media_paths_outside_the_media_root_are_refused(tmp_path: Path, ref: str) -> None:
    (tmp_path / "outside.png").write_bytes((ROOT / "data" / "media" / "images" / "coffee.png").read_bytes())
    data = tmp_path / "ds" / "data.jsonl"
    data.parent.mkdir()
    data.write_text(json.dumps(_rec("q1", [{"id": "i", "image": ref}])) + "\n")
    with pytest.raises(DataFormatError, match=r"items\[0\].image: .* lies outside media_root=") as err:
        load_benchmark("custom", str(data))  # was: /etc/passwd became an image item
    assert "allow_outside_media_root" in str(err.value)
    video = data.parent / "video.jsonl"
    video.write_text(json.dumps(_rec("q1", [{"id": "v", "video": {"path": ref, "end": 5}}])) + "\n")
    with pytest.raises(DataFormatError, match=r"items\[0\].video.path: .* lies outside media_root="):
        load_benchmark("custom", str(video))


def test_media_inside_the_root_and_an_explicit_opt_out_are_read(tmp_path: Path) -> None:
    image = ROOT / "data" / "media" / "images" / "coffee.png"
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps(_rec("q1", [{"id": "i", "image": str(image)}])) + "\n")
    with pytest.raises(DataFormatError, match="lies outside media_root"):
        load_benchmark("custom", str(data))
    bench = load_benchmark("custom", str(data), allow_outside_media_root=True)
    assert bench.items["custom:i"].image == str(image)
    inside = tmp_path / "in.jsonl"
    inside.write_text(json.dumps(_rec("q1", [{"id": "i", "image": "coffee.png"}])) + "\n")
    bench = load_benchmark("custom", str(inside), media_root=str(image.parent))
    assert bench.items["custom:i"].image == str(image.parent / "coffee.png")


# ---------------------------------------------------------------- 19 / 24. video clip bounds at read time


@pytest.mark.parametrize(
    ("end", "message"),
    [
        (1e12, r"items\[0\].video.end: 1e\+12 s lies past the end of vtest.avi \(79.5 s\)"),
        ("Infinity", r"items\[0\].video.end: Infinity is not a JSON value"),
    ],
    ids=["far_past_the_end", "infinity"],
)
def test_a_clip_end_past_the_video_is_an_error_naming_the_record(tmp_path: Path, end, message) -> None:
    data = tmp_path / "data.jsonl"
    video = f'{{"path": "{VIDEO.name}", "end": {end}}}'
    data.write_text(f'{{"id": "q1", "question": "Q?", "answers": ["a"], "items": [{{"id": "v", "video": {video}}}]}}\n')
    with pytest.raises(DataFormatError, match=rf"data.jsonl, line 1 \(id 'q1'\): {message}"):
        load_benchmark("custom", str(data), media_root=str(VIDEO.parent))  # was: a 3.3e10-clip tree / OverflowError
    ok = tmp_path / "ok.jsonl"
    ok.write_text(json.dumps(_rec("q1", [{"id": "v", "video": {"path": VIDEO.name, "start": 10, "end": 79.5}}])) + "\n")
    bench = load_benchmark("custom", str(ok), media_root=str(VIDEO.parent))
    assert Hierarchy(2).build(bench.items["custom:v"]).n_leaves == 3


def test_the_video_tree_refuses_a_segment_no_video_has() -> None:
    for end in (1e12, float("inf")):
        item = Item("v", "video", video=VideoRef(str(VIDEO), 0.0, end))
        with pytest.raises(ValueError, match="video item 'v': segment"):
            Hierarchy(2).build(item)  # was: ~3.3e10 leaves built (a hang) / OverflowError
