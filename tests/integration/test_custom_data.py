"""``data=custom`` runs probe, evidence, qa and a tiny train on a JSONL file written here and
on the same questions saved as a Hugging Face dataset; a reader class of this module runs by dotted path.

The questions are bundled HotpotQA records converted to the custom format (train file -> ``train`` /
``validation`` records, dev file -> ``test``), so the probe on the custom file must give the numbers of the
probe on the bundled HotpotQA reader for the same questions. Real MiniLM, real SmolLM2-135M for qa (and as
the evidence tokenizer). Runs go through ``evaluate.py`` / ``train.py`` in this process (``run_script``).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "faults"))  # the in-process script runner the fault tests use
from evaluate_runner import metrics, records, run_script  # noqa: E402

from canopy_lit.data import Benchmark, gold_leaves  # noqa: E402
from canopy_lit.types import Item, Modality, Question  # noqa: E402

HOTPOT = ROOT / "data" / "hotpotqa"
SPLITS = {"train": 6, "validation": 2, "test": 4}  # questions per split: train / val from the train file


def to_custom(rec: dict, split: str) -> dict:
    """One official HotpotQA record in the custom format: paragraphs as items, supporting sentences as spans."""
    support: dict[str, list[int]] = {}
    for title, sent in rec["supporting_facts"]:
        support.setdefault(title, []).append(sent)
    items = []
    for title, sentences in rec["context"]:
        sentences = [s.strip() for s in sentences]
        item: dict = {"id": title, "title": title, "sentences": sentences}
        spans = [sentences[i] for i in support.get(title, []) if i < len(sentences)]
        if spans:
            item["gold_spans"] = spans
        items.append(item)
    return {"id": rec["_id"], "question": rec["question"], "answers": [rec["answer"]], "split": split,
            "items": items}  # fmt: skip


@pytest.fixture(scope="module")
def custom_records() -> list[dict]:
    train = json.loads((HOTPOT / "hotpot_train_100.json").read_text())
    dev = json.loads((HOTPOT / "hotpot_dev_distractor_100.json").read_text())
    n_train, n_val = SPLITS["train"], SPLITS["validation"]
    return (
        [to_custom(r, "train") for r in train[:n_train]]
        + [to_custom(r, "validation") for r in train[n_train : n_train + n_val]]
        + [to_custom(r, "test") for r in dev[: SPLITS["test"]]]
    )


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory, custom_records) -> Path:
    path = tmp_path_factory.mktemp("custom") / "my_qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in custom_records))
    return path


@pytest.fixture(scope="module")
def saved_hf(tmp_path_factory, custom_records) -> Path:
    datasets = pytest.importorskip("datasets")
    folder = tmp_path_factory.mktemp("custom") / "my_qa_hf"
    rows = [{k: v for k, v in r.items() if k != "split"} for r in custom_records]  # the split is the key
    splits, start = {}, 0
    for name, n in SPLITS.items():
        splits[name] = datasets.Dataset.from_list(rows[start : start + n])
        start += n
    datasets.DatasetDict(splits).save_to_disk(str(folder))
    return folder


@pytest.fixture(scope="module")
def nodes(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("nodes")


def evaluate(run_dir: Path, nodes: Path, *overrides: str) -> dict[str, float]:
    out = run_script("evaluate.py", run_dir, f"retrieval.node_cache_dir={nodes}", *overrides)
    assert out.status == 0, out.stderr[-3000:]
    return metrics(run_dir)


def _probe_numbers(m: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in m.items() if k.startswith("probe/") and "/node_cache/" not in k}


def test_probe_on_custom_jsonl_equals_the_bundled_reader(tmp_path, jsonl, nodes) -> None:
    custom = evaluate(tmp_path / "custom", nodes, "experiment=probe", "data=custom", f"data.path={jsonl}")
    bundled = evaluate(tmp_path / "hotpotqa", nodes, "experiment=probe", "data=hotpotqa", f"limit={SPLITS['test']}")
    assert custom["probe/n_questions"] == SPLITS["test"]  # data.split=test: the records marked test
    assert _probe_numbers(custom) == _probe_numbers(bundled)


# The saved-HF variants run the same stages over the same records as the JSONL ones: the slow tier holds them.
@pytest.mark.parametrize("source", ["jsonl", pytest.param("saved_hf", marks=pytest.mark.slow)])
def test_custom_data_runs_probe_evidence_and_qa(tmp_path, nodes, source, request) -> None:
    path = request.getfixturevalue(source)
    data = ["data=custom", f"data.path={path}", "data.name=my_qa", "data.reader=custom"]
    probe = evaluate(tmp_path / "probe", nodes, "experiment=probe", *data, "limit=3")
    assert probe["probe/n_questions"] == 3 and 0 <= probe["probe/decision_accuracy"] <= 1
    assert probe["probe/gold_recall"] > 0
    evidence = evaluate(tmp_path / "evidence", nodes, "experiment=evidence", *data, "limit=3",
                        "llm=llamacpp_smollm2")  # fmt: skip
    assert evidence["evidence/n"] == 3 and evidence["evidence/failed"] == 0 and evidence["evidence/tokens"] > 0
    qa = evaluate(tmp_path / "qa", nodes, *data, "limit=2", "llm=llamacpp_smollm2", "retriever=candidates",
                  "retrieval.k=3", "loop.max_rounds=1")  # fmt: skip
    assert qa["eval/n"] == 2 and qa["eval/failed"] == 0
    recs = records(tmp_path / "qa")
    assert [r["id"] for r in recs] == [q for q in _test_ids(path)[:2]]
    assert all(k.startswith("my_qa:") for r in recs for k in r["rounds"][0]["retrieved"])  # the label names items
    assert "my_qa" in (tmp_path / "qa" / "table.md").read_text()


def _test_ids(path: Path) -> list[str]:
    from canopy_lit.data import load_split

    return [q.id for q in load_split("custom", str(path), "test")[1]]


@pytest.mark.parametrize("source", ["jsonl", pytest.param("saved_hf", marks=pytest.mark.slow)])
def test_tiny_train_on_custom_data(tmp_path, source, request) -> None:
    path = request.getfixturevalue(source)
    out = run_script(
        "train.py",
        tmp_path,
        "debug=fdr",
        "datamodule.benchmarks=[custom]",
        "datamodule.zero_shot=[]",
        f"+datamodule.options.custom.path={path}",
        "datamodule.batch_size=4",
        "encoder.max_seq_length=64",
    )
    assert out.status == 0, out.stderr[-3000:]
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert 0.0 <= saved["test/decision_accuracy"] <= 1.0 and "test/custom/decision_accuracy" in saved
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()


def test_two_question_file_fails_before_fit_naming_the_empty_split(tmp_path, custom_records) -> None:
    path = tmp_path / "two.jsonl"
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "split"}) + "\n" for r in custom_records[:2]))
    out = run_script("train.py", tmp_path / "run", "debug=fdr", "datamodule.benchmarks=[custom]",
                     "datamodule.zero_shot=[]", f"+datamodule.options.custom.path={path}")  # fmt: skip
    assert out.status != 0
    assert "datamodule: benchmark custom has no test instances" in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and not (tmp_path / "run" / "adapter").exists()


class LinesReader:
    """A reader outside the package's registry, named by its dotted path: ``question<TAB>answer<TAB>passage``
    lines, gold = the sentences holding the answer (the public ``gold_leaves``)."""

    def read(self, path: Path, name: str = "lines") -> Benchmark:
        bench = Benchmark(name, [], {}, {}, Counter(), {})
        for n, line in enumerate(Path(path).read_text().splitlines()):
            question, answer, passage = line.split("\t")
            item = Item(f"{name}:{n}", Modality.TEXT, title="", text=passage)
            bench.items[item.id] = item
            gold = {item.id: gold_leaves(item, [answer])}
            bench.add_question(Question(f"q{n}", question, [answer], name, gold), [item.id])
        return bench


def test_dotted_reader_path_runs_a_probe(tmp_path, nodes, custom_records) -> None:
    path = tmp_path / "three.tsv"
    rows = []
    for rec in custom_records[-3:]:  # the dev questions: passage = the gold paragraphs' sentences
        gold = [i for i in rec["items"] if i.get("gold_spans")]
        rows.append("\t".join([rec["question"], rec["answers"][0], " ".join(s for i in gold for s in i["sentences"])]))
    path.write_text("\n".join(rows) + "\n")
    m = evaluate(tmp_path / "run", nodes, "experiment=probe", "data=custom", f"data.path={path}", "data.name=lines",
                 f"data.reader={__name__}.LinesReader", "data.split=all")  # fmt: skip
    assert m["probe/n_questions"] >= 2  # a question whose answer is not in its passage has no gold to probe
    saved = (tmp_path / "run" / ".hydra" / "config.yaml").read_text()
    assert f"reader: {__name__}.LinesReader" in saved


def test_docs_three_question_example_loads_and_runs(tmp_path, nodes) -> None:
    """docs/how-to/custom-data.md: its JSONL block gives the gold it says, and its probe command runs."""
    import re

    from canopy_lit.data import load_benchmark

    doc = (ROOT / "docs" / "how-to" / "custom-data.md").read_text()
    path = tmp_path / "my_qa.jsonl"
    path.write_text(re.search(r"cat > my_qa.jsonl <<'EOF'\n(.*?)\nEOF\n", doc, re.S).group(1) + "\n")
    bench = load_benchmark("custom", path, media_root=ROOT)  # the doc writes the file in the clone's root
    gold = {q.id: q.gold for q in bench.questions}
    assert gold == {
        "eiffel-year": {"custom:eiffel": [2]},
        "montparnasse-height": {"custom:heights": [1]},
        "hubble": {"custom:hdf-photo": [0], "custom:hdf": [1]},
    }
    for qid, leaves in gold.items():
        assert str(leaves).replace("{", "").replace("}", "") in doc.replace("{", "").replace("}", ""), qid
    command = re.search(r"evaluate.py (experiment=probe data=custom data.path=my_qa.jsonl .*)\n", doc).group(1)
    overrides = [o.replace("my_qa.jsonl", str(path)) for o in command.split()]
    m = evaluate(tmp_path / "run", nodes, *overrides, f"+data.options.media_root={ROOT}")
    assert m["probe/n_questions"] == 3 and {"probe/decision_accuracy/table", "probe/decision_accuracy/text"} <= set(m)
