"""Study tables from run folders: grouping, settings, averages, CSV, robustness, README blocks."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from runfolders import ROOT, make_multirun, make_probe_run, make_qa_run

from canopy_lit.eval.records import RUN_FILE, adapter_axes, run_axes
from canopy_lit.report import render
from canopy_lit.report.__main__ import main as report_main
from canopy_lit.report.runs import find_runs, load_run
from canopy_lit.report.tables import qa_rows, render_study, split_settings, write_tables
from canopy_lit.studies import refresh


@pytest.fixture(scope="module")
def studies(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("outputs") / "ablation"
    main = [
        dict(method=m, name=b, refine=r, max_rounds=rounds, n=3)
        for b in ("hotpotqa", "tatqa")
        for m, r, rounds in (("vanilla", "keep_whole", 1), ("canopy", "parent_relative", 2))
    ]
    make_multirun(root / "main", main, study="main")
    k = [
        dict(method=m, name="hotpotqa", refine=r, max_rounds=rounds, k=kk, n=3)
        for m, r, rounds in (("vanilla", "keep_whole", 1), ("canopy", "parent_relative", 2))
        for kk in (2, 4)
    ]
    make_multirun(root / "k", k)  # no `study` key: named by its multirun folder
    return root


def metrics_of(path: Path) -> dict[str, float]:
    return json.loads((path / "metrics.json").read_text())


def test_runs_are_grouped_by_study_and_configs_resolve(studies: Path) -> None:
    runs = find_runs([studies])
    assert sorted({r.study for r in runs}) == ["k", "main"]
    assert len(runs) == 8
    r = next(r for r in runs if r.study == "main")
    # Hydra saves ${paths.data_dir}/... unresolved; the run's hydra.yaml gives runtime.cwd.
    assert r.config["data"]["path"] in (str(ROOT / "data" / "hotpotqa"), str(ROOT / "data" / "tatqa/tatqa_dataset_dev.json"))
    assert r.mode == "qa" and r.method in ("vanilla", "canopy") and r.benchmark in ("hotpotqa", "tatqa")


def test_main_table_means_match_metrics_files_and_state_fixed_setting(studies: Path) -> None:
    runs = [r for r in find_runs([studies]) if r.study == "main"]
    axes, fixed = split_settings(runs)
    assert axes == []  # refiner and R differ only between methods: implied by the method
    assert fixed["k"] == "3" and fixed["B"] == "2" and "refine" not in fixed
    rows = qa_rows(runs, axes)
    avg = next(r for r in rows if r["method"] == "canopy" and r["benchmark"] == "average")
    per = [metrics_of(r.path) for r in runs if r.method == "canopy"]
    assert avg["em"] == pytest.approx(sum(m["eval/em"] for m in per) / 2)
    assert avg["evidence_tokens"] == pytest.approx(sum(m["eval/evidence_tokens"] for m in per) / 2)
    assert avg["n"] == sum(m["eval/n"] for m in per)
    md = render_study("main", runs)
    assert "**Fixed setting:**" in md and "k (items per round) = 3" in md
    canopy = next(r for r in runs if r.method == "canopy" and r.benchmark == "hotpotqa")
    m = metrics_of(canopy.path)
    line = next(x for x in md.splitlines() if x.startswith("| canopy | hotpotqa |"))
    assert f"{100 * m['eval/f1']:.1f}" in line and f"{m['eval/evidence_tokens']:.0f}" in line
    assert f"[{100 * m['eval/f1_ci_low']:.1f}, {100 * m['eval/f1_ci_high']:.1f}]" in line


def test_k_study_makes_k_a_column_and_csv_has_every_run(studies: Path, tmp_path: Path) -> None:
    runs = [r for r in find_runs([studies]) if r.study == "k"]
    axes, fixed = split_settings(runs)
    assert axes == ["k"] and "k" not in fixed
    written = write_tables(runs, tmp_path)
    assert set(written) == {"k"}
    with (tmp_path / "k.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 4  # one benchmark: no average rows
    for row in rows:
        m = metrics_of(Path(row["run"]))
        assert float(row["f1"]) == pytest.approx(m["eval/f1"])
        assert float(row["duplicate_rate_all_rounds"]) == pytest.approx(m["eval/duplicate_rate_all_rounds"])
        followup = m.get("eval/followup_duplicate_rate")  # absent for one-round methods
        assert row["followup_duplicate_rate"] == "" if followup is None else float(row["followup_duplicate_rate"]) == pytest.approx(followup)
        assert row["k"] in ("2", "4")
    # more items per round -> at least as many evidence tokens for whole items
    vanilla = sorted((int(r["k"]), float(r["evidence_tokens"])) for r in rows if r["method"] == "vanilla")
    assert vanilla[0][1] < vanilla[1][1]


def test_duplicate_rates_are_labelled_all_rounds_and_followup(tmp_path: Path) -> None:
    run = tmp_path / "run"
    make_qa_run(run, "hotpotqa", 3, method="canopy", max_rounds=2)
    m = metrics_of(run)
    row = qa_rows([load_run(run)])[0]
    assert row["duplicate_rate_all_rounds"] == pytest.approx(m["eval/duplicate_rate_all_rounds"])
    assert row["followup_duplicate_rate"] == pytest.approx(m["eval/followup_duplicate_rate"])
    md = render_study("runs", [load_run(run)])
    header = next(x for x in md.splitlines() if x.startswith("| method | benchmark |"))
    assert "follow-up dup %" in header and "dup % all rounds" in header and "| dup % |" not in header


def test_adapter_is_printed_relative_to_outputs_with_its_hash(tmp_path: Path) -> None:
    adapter = tmp_path / "machine" / "outputs" / "quickstart" / "train" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "encoder_fingerprint.json").write_text(json.dumps({"adapter_hash": "0123456789abcdef"}))
    label = adapter_axes({"encoder": {"adapter": str(adapter)}})
    assert label == ("outputs/quickstart/train/adapter", "0123456789abcdef")
    # relative paths resolve against the run's project root to find the fingerprint
    cfg = {"encoder": {"adapter": "outputs/quickstart/train/adapter"}, "paths": {"root_dir": str(tmp_path / "machine")}}
    assert adapter_axes(cfg) == label
    assert adapter_axes({"encoder": {"adapter": "/elsewhere/my_lora"}}) == ("my_lora", None)  # outside outputs: its name
    assert adapter_axes({"encoder": {"adapter": None}}) == (None, None)
    make_qa_run(tmp_path / "run", "hotpotqa", 2, method="canopy", adapter=str(adapter))
    md = render_study("runs", find_runs([tmp_path / "run"]))
    assert "adapter = outputs/quickstart/train/adapter (adapter 0123456789ab);" in md and str(tmp_path) not in md


def test_no_average_when_a_system_misses_a_benchmark(tmp_path: Path) -> None:
    make_qa_run(tmp_path / "a", "hotpotqa", 2, method="vanilla", refine="keep_whole", max_rounds=1)
    make_qa_run(tmp_path / "b", "tatqa", 2, method="vanilla", refine="keep_whole", max_rounds=1)
    make_qa_run(tmp_path / "c", "hotpotqa", 2, method="canopy")
    rows = qa_rows(find_runs([tmp_path]))
    assert [(r["method"], r["benchmark"]) for r in rows if r["benchmark"] == "average"] == [("vanilla", "average")]


def test_run_without_hydra_config_and_with_nan_still_tabulates(tmp_path: Path) -> None:
    run = tmp_path / "bare"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"eval/n": 2, "eval/f1": 0.5, "eval/evidence_tokens": float("nan")}))
    r = load_run(run)
    assert r.method == "?" and r.benchmark == "bare" and r.metric("eval/evidence_tokens") is None
    md = render_study("runs", [r])
    assert "| ? | bare |" in md and "nan" not in md.lower()


def test_probe_table_has_depth_columns(tmp_path: Path) -> None:
    make_multirun(tmp_path / "probe", [dict(probe=True, name="hotpotqa", adapter=a, n=4) for a in (None, "adapter")])
    runs = find_runs([tmp_path])
    md = render_study("probe", runs)
    assert "| hotpotqa | f0 |" in md and "| hotpotqa | fθ |" in md and "acc d=0" in md
    m = metrics_of(next(r.path for r in runs if r.setting("scorer") == "f0"))
    assert f"{100 * m['probe/decision_accuracy']:.1f}" in md


def test_probe_runs_of_different_adapters_or_delta_are_told_apart(tmp_path: Path) -> None:
    # Two fθ adapters (or one at two δ) in one table: before, both rows read "fθ" with nothing to tell them apart.
    cases = {"f0": (None, None, 0.0), "a": ("outputs/a/adapter", "a" * 16, 0.0), "b": ("outputs/b/adapter", "b" * 16, 0.0),
             "b_d": ("outputs/b/adapter", "b" * 16, 0.01)}  # fmt: skip
    for name, (path, digest, delta) in cases.items():
        run = make_probe_run(tmp_path / "probe" / name, adapter=path, n=3)
        axes = {**run_axes(load_run(run).config), "adapter": path, "adapter_hash": digest, "descend_margin": delta,
                "scorer": "fθ" if path else "f0", "study": "probe"}  # fmt: skip
        (run / RUN_FILE).write_text(json.dumps(axes))
    md = render_study("probe", find_runs([tmp_path]))
    rows = [line for line in md.splitlines() if line.startswith("| hotpotqa")]
    assert len(rows) == 4 and len(set(rows)) == 4
    assert sum("outputs/b/adapter (adapter bbbbbbbbbbbb)" in r for r in rows) == 2
    assert any("| 0.01 |" in r for r in rows)


def test_bad_inputs_name_the_file(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metrics.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"bad/metrics.json"):
        load_run(bad)
    assert report_main(["tables", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "missing: no such run folder" in capsys.readouterr().err


def test_cli_writes_tables_and_plots(studies: Path, tmp_path: Path) -> None:
    assert report_main(["tables", str(studies / "k"), "--out", str(tmp_path), "--plots"]) == 0
    assert (tmp_path / "k.md").is_file() and (tmp_path / "k_wide.csv").is_file()
    assert (tmp_path / "quality_vs_tokens.png").stat().st_size > 10_000


def test_refresh_rewrites_only_generated_blocks(studies: Path, tmp_path: Path) -> None:
    doc = tmp_path / "README.md"
    doc.write_text(
        "# Title\nhand-written\n<!-- BEGIN table:k -->\nSTALE\n<!-- END table:k -->\n"
        "<!-- BEGIN table:branching -->\nGENERATED ON ANOTHER MACHINE\n<!-- END table:branching -->\n"
        "<!-- BEGIN table:flat -->\n<!-- END table:flat -->\n"
        "<!-- BEGIN plot:quality_vs_tokens -->\n<!-- END plot:quality_vs_tokens -->\n"
        "<!-- BEGIN table:paired -->\nPAIRED (canopy_lit/studies/paired.py owns it)\n<!-- END table:paired -->\ntail\n"
    )
    written = refresh.refresh(studies, tmp_path / "exp", [doc])
    text = doc.read_text()
    assert "\nPAIRED (canopy_lit/studies/paired.py owns it)\n" in text  # a block of another generator stays
    assert text.startswith("# Title\nhand-written\n") and text.endswith("tail\n") and "STALE" not in text
    assert "| canopy | 2 |" in text  # the k table
    # no runs here: a generated block stays, an empty one gets the placeholder
    assert "\nGENERATED ON ANOTHER MACHINE\n" in text and "_No runs yet for `flat`" in text
    assert "![quality_vs_tokens](exp/img/quality_vs_tokens.png)" in text
    assert written["plot:quality_vs_tokens"].is_file()
    refresh.refresh(studies, tmp_path / "exp", [doc])
    assert doc.read_text() == text  # idempotent


def test_fmt_percent_and_missing() -> None:
    assert render.fmt("f1", 0.4567) == "45.7"
    assert render.fmt("evidence_tokens", 1815.6) == "1816"
    assert render.fmt("llm_calls", 2.75) == "2.75"
    assert render.fmt("em", None) == "" and render.fmt("em", math.nan) == ""


def test_training_run_folders_stay_out_of_qa_tables(tmp_path: Path) -> None:
    train = tmp_path / "train"
    (train / ".hydra").mkdir(parents=True)
    (train / "metrics.json").write_text(json.dumps({"val/decision_accuracy": 0.55, "train/loss": 0.3}))
    (train / ".hydra" / "config.yaml").write_text("task_name: train\n")
    make_qa_run(tmp_path / "qa", "hotpotqa", 2, method="vanilla", refine="keep_whole", max_rounds=1)
    runs = find_runs([tmp_path])
    assert sorted(r.mode for r in runs) == ["qa", "train"]
    assert [r["method"] for r in qa_rows(runs)] == ["vanilla"]
    assert "val/decision_accuracy" in render_study("runs", runs)  # listed apart, as it is


def test_unreadable_metric_values_keep_their_columns_and_are_named(tmp_path: Path, caplog) -> None:
    """A NaN or a string in metrics.json must not make EM / F1 vanish from the tables silently."""
    run = make_qa_run(tmp_path / "run", "hotpotqa", 3, method="vanilla", refine="keep_whole", max_rounds=1)
    m = metrics_of(run)
    (run / "metrics.json").write_text(json.dumps({**m, "eval/em": float("nan"), "eval/f1": "0.5"}))
    with caplog.at_level("WARNING"):
        r = load_run(run)
    md = render_study("runs", [r])
    header = next(x for x in md.splitlines() if x.startswith("| method | benchmark |"))
    assert "| EM |" in header and "| F1 |" in header and "| Match |" in header
    wide = next(x for x in md.splitlines() if x.startswith("| method |"))
    assert "hotpotqa EM" in wide and "hotpotqa F1" in wide
    assert "nan" not in md.lower()  # blank cells, not "nan"
    assert r.metric("eval/em") is None and r.metric("eval/match") == m["eval/match"]
    lines = [x.getMessage() for x in caplog.records]
    assert any(line.startswith(f"{run / 'metrics.json'}: eval/em is NaN") for line in lines), lines
    assert any(line.startswith(f"{run / 'metrics.json'}: eval/f1 is \"0.5\"") for line in lines), lines


def _first_table(md: str) -> list[list[str]]:
    """The cells of the first markdown table in ``md``, header row first."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        if not line.startswith("|---"):
            rows.append([cell.strip() for cell in line[1:-1].split(" | ")])
    return rows


def _header(md: str) -> list[str]:
    return _first_table(md)[0]


def _column(md: str, name: str) -> list[str]:
    header, *body = _first_table(md)
    return [row[header.index(name)] for row in body]


def _record_variant(run: Path, variant: str) -> None:
    """run.json as the evaluation writes it for ``variant=<variant>`` (Hydra's choice of that group)."""
    (run / RUN_FILE).write_text(json.dumps(run_axes(load_run(run).config, {"variant": variant})))


def test_ablation_rows_are_named_by_their_variant_and_the_study_by_the_setting_line(tmp_path: Path) -> None:
    root = tmp_path / "components"
    for variant, refine, rounds, adapter in (("no_projection", "keep_whole", 2, "outputs/train/adapter"),
                                             ("f0", "parent_relative", 2, None),
                                             ("full", "parent_relative", 2, "outputs/train/adapter"),
                                             ("no_iteration", "parent_relative", 1, "outputs/train/adapter")):  # fmt: skip
        run = make_qa_run(root / variant, "hotpotqa", 2, refine=refine, max_rounds=rounds, adapter=adapter,
                          study="components")  # fmt: skip
        _record_variant(run, variant)
    md = render_study("components", find_runs([root]))
    wide, long = md.split("<details>")
    assert "**Fixed setting:** study = components; " in md
    for table in (wide, long):
        assert _header(table)[:2] == ["method", "variant"]
        assert _column(table, "variant") == ["full", "f0", "w/o iteration", "w/o projection"]  # the reference first
    assert "failed" not in _header(wide)  # no run lost a question


def test_rows_of_several_studies_name_their_study(tmp_path: Path) -> None:
    make_qa_run(tmp_path / "flat" / "run", "hotpotqa", 2, method="flat", refine="flat_top_m", m=5, study="flat")
    make_qa_run(tmp_path / "main" / "run", "hotpotqa", 2, study="main")
    md = render_study("flat", find_runs([tmp_path]))
    assert _column(md, "study") == ["flat", "main"] and "study =" not in md


def test_failed_questions_have_a_column_wherever_a_run_lost_some(tmp_path: Path) -> None:
    make_qa_run(tmp_path / "s" / "vanilla", "hotpotqa", 2, method="vanilla", refine="keep_whole", max_rounds=1)
    lossy = make_qa_run(tmp_path / "s" / "canopy", "hotpotqa", 2)
    metrics = metrics_of(lossy)
    (lossy / "metrics.json").write_text(json.dumps({**metrics, "eval/failed": 1.0}))
    wide = render_study("s", find_runs([tmp_path / "s"])).split("<details>")[0]
    assert _column(wide, "method") == ["vanilla", "canopy"] and _column(wide, "failed") == ["0", "1"]


def _evidence_run(path: Path, variant: str, scorer: str, failed: int) -> Path:
    """An evidence run folder as experiment=evidence writes it (metrics.json + run.json)."""
    path.mkdir(parents=True)
    metrics = {"evidence/n": 10.0, "evidence/failed": float(failed), "evidence/answer_recall": 0.5,
               "evidence/answer_recall_ci_low": 0.2, "evidence/answer_recall_ci_high": 0.8, "evidence/tokens": 120.0,
               "evidence/gold_recall": 0.6, "evidence/item_recall": 0.9, "evidence/kept_ratio": 0.4}  # fmt: skip
    (path / "metrics.json").write_text(json.dumps(metrics))
    axes = {"mode": "evidence", "method": "evidence", "benchmark": "nq", "refine": "parent_relative", "k": 5, "B": 2,
            "scorer": scorer, "variant": variant, "study": "evidence"}  # fmt: skip
    (path / RUN_FILE).write_text(json.dumps(axes))
    return path


def test_evidence_rows_show_their_variant_and_failed_questions(tmp_path: Path) -> None:
    _evidence_run(tmp_path / "f0", "f0", "f0", failed=2)
    _evidence_run(tmp_path / "full", "full", "fθ", failed=0)
    md = render_study("evidence", find_runs([tmp_path]))
    assert "**Fixed setting:** study = evidence; " in md
    assert _header(md)[:4] == ["benchmark", "method", "variant", "n"]
    assert _column(md, "variant") == ["f0", "full"] and _column(md, "failed") == ["2", "0"]
