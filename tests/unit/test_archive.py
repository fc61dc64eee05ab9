"""Study archives: run folders <-> one deterministic zip (pack / unpack / auto-unpack on read)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import yaml
from runfolders import make_multirun, make_probe_run

from canopy_lit.report.__main__ import main as report_main
from canopy_lit.report.archive import ArchiveError, ensure_unpacked, pack, read_archive, unpack, write_archive
from canopy_lit.report.runs import find_runs
from canopy_lit.studies import recipe

JOBS = [dict(method=m, name="hotpotqa", refine=r, max_rounds=rounds, k=k, n=2)
        for m, r, rounds in (("vanilla", "keep_whole", 1), ("canopy", "parent_relative", 2)) for k in (2, 4)]  # fmt: skip


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A multirun study folder as evaluate.py leaves it (Hydra files, logs, settings), plus an adapter."""
    runs = tmp_path_factory.mktemp("runs")
    folder = make_multirun(runs / "k", JOBS)  # no `study` key: reports name it after the multirun folder
    for run in sorted(folder.iterdir()):
        if run.is_dir():
            (run / "evaluate.log").write_text("log\n")
            (run / "settings.json").write_text("{}\n")
            hydra = yaml.safe_load((run / ".hydra" / "hydra.yaml").read_text())
            hydra["hydra"]["runtime"]["choices"] = {"method": "canopy", "hydra/launcher": "basic"}
            (run / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(hydra))
    adapter = folder / "train" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}\n")
    return folder


def _summary(folder: Path) -> list[tuple]:
    return [(r.path.relative_to(folder).as_posix(), r.study, r.method, r.metrics, r.overrides, r.setting("k"))
            for r in find_runs([folder])]  # fmt: skip


def test_pack_keeps_records_and_moves_hydra_facts_into_run_json(study: Path) -> None:
    before = _summary(study)
    done = pack(study)
    names = set(read_archive(done.archive))
    assert done.runs == 4 and done.left_out["hydra.yaml"] == 4 and done.left_out["adapter_config.json"] == 1
    for kept in ("metrics.json", "run.json", "settings.json", ".hydra/config.yaml", "predictions.jsonl",
                 "question_ids.json"):  # fmt: skip
        assert sum(n.endswith("/" + kept) for n in names) == 4, kept
    for dropped in ("hydra.yaml", "overrides.yaml", "evaluate.log", "table.md", "multirun.yaml", "adapter_config.json"):
        assert not any(n.endswith(dropped) for n in names), dropped
    record = json.loads(read_archive(done.archive)[f"{before[0][0]}/run.json"])
    assert record["choices"] == {"method": "canopy", "hydra/launcher": "basic"}
    assert record["overrides"] == before[0][4] and record["study"] == "k"

    # unpacked elsewhere, without any Hydra file: the same runs, study names, metrics and overrides
    copy = unpack(done.archive, study.parent / "copy" / "k")
    assert not list(copy.rglob("hydra.yaml")) and _summary(copy) == before


def test_an_unpacked_run_continues_under_its_settings_and_only_under_them(hydra_ctx, tmp_path: Path) -> None:
    """A study packed and unpacked elsewhere (another checkout) resumes: its settings.json travels with it, its
    paths relative to the paths.* folders; other settings are still refused, naming the key."""
    from hydra import compose
    from omegaconf import open_dict

    from canopy_lit.eval.records import settings_changes, write_run_settings

    def config(root: Path, *overrides: str):
        cfg = compose("evaluate", overrides=["method=vanilla", *overrides])
        with open_dict(cfg):
            cfg.paths.root_dir = str(root)
        return cfg

    run = tmp_path / "a" / "k" / "vanilla"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text('{"eval/n": 2}\n')
    write_run_settings(run, config(tmp_path / "a"))
    copy = unpack(pack(run.parent).archive, tmp_path / "b" / "k") / "vanilla"
    assert settings_changes(copy, config(tmp_path / "b")) == []
    assert settings_changes(copy, config(tmp_path / "b", "retrieval.k=7")) == [("retrieval.k", 10, 7)]


def test_repacking_unchanged_runs_gives_identical_bytes(study: Path, tmp_path: Path) -> None:
    first = pack(study).archive.read_bytes()
    assert pack(study).archive.read_bytes() == first
    with zipfile.ZipFile(study.with_name("k.zip")) as zf:
        infos = zf.infolist()
    assert [i.filename for i in infos] == sorted(i.filename for i in infos)
    assert {(i.date_time, i.external_attr >> 16) for i in infos} == {((1980, 1, 1, 0, 0, 0), 0o100644)}
    # a copy of the folder elsewhere (other mtimes, other absolute path) packs to the same bytes
    other = tmp_path / "k"
    unpack(study.with_name("k.zip"), other)
    assert pack(other).archive.read_bytes() == first


def test_reports_unpack_a_missing_study_folder(study: Path, tmp_path: Path) -> None:
    archive = tmp_path / "k.zip"
    archive.write_bytes(pack(study).archive.read_bytes())
    runs = find_runs([tmp_path / "k"])  # only the archive is there
    assert len(runs) == 4 and {r.study for r in runs} == {"k"}
    assert (tmp_path / "k" / ".unpacked.json").is_file()
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as zf:  # any other zip beside it is never unpacked unasked
        zf.writestr("metrics.json", "{}")
    assert ensure_unpacked([tmp_path, tmp_path / "other" / "run"]) == []  # and the current one not twice
    assert not (tmp_path / "other").exists()


def test_an_edited_unpacked_file_is_never_overwritten_silently(study: Path, tmp_path: Path) -> None:
    archive = tmp_path / "k.zip"
    archive.write_bytes(pack(study).archive.read_bytes())
    folder = unpack(archive)
    metrics = sorted(folder.rglob("metrics.json"))[0]
    metrics.write_text("{}")
    assert ensure_unpacked([folder]) == []  # the same archive: still current, nothing to do
    assert report_main(["unpack", "--if-stale", str(archive)]) == 0 and metrics.read_text() == "{}"
    write_archive(archive, {**read_archive(archive), "extra/metrics.json": b"{}"})  # a newer archive
    with pytest.raises(ArchiveError, match=r"1 unpacked file\(s\) changed since .*metrics.json.*--force"):
        ensure_unpacked([folder])
    assert report_main(["unpack", str(archive)]) == 2  # the CLI says it in one line
    assert report_main(["unpack", str(archive), "--force"]) == 0
    assert metrics.read_text() != "{}" and (folder / "extra" / "metrics.json").is_file()


def test_pack_refuses_a_folder_that_never_held_its_archive(study: Path, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "k"
    (folder / "mine").mkdir(parents=True)
    (folder / "mine" / "metrics.json").write_text('{"eval/f1": 0.5}')
    folder.with_name("k.zip").write_bytes(pack(study).archive.read_bytes())
    assert report_main(["pack", str(folder)]) == 2
    assert "k.zip was never unpacked here; unpack it first" in capsys.readouterr().err
    assert len(read_archive(folder.with_name("k.zip"))) > 1  # the archive keeps every run


def test_an_entry_outside_the_folder_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "bad.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../escape/metrics.json", "{}")
    with pytest.raises(ArchiveError, match="entry '../escape/metrics.json' is not a relative file path"):
        unpack(archive)
    assert not (tmp_path / "escape").exists()


def test_training_run_overrides_come_from_run_json_once_packed(tmp_path: Path) -> None:
    run = tmp_path / "recipe" / "mpnet"
    (run / ".hydra").mkdir(parents=True)
    (run / "metrics.json").write_text('{"val/best_decision_accuracy": 0.6}')
    (run / ".hydra" / "config.yaml").write_text("task_name: train\n")
    (run / ".hydra" / "overrides.yaml").write_text("- experiment=quickstart\n- experiment=quickstart_mpnet\n")
    archive = pack(tmp_path / "recipe").archive
    copy = unpack(archive, tmp_path / "copy" / "recipe")
    assert not (copy / "mpnet" / ".hydra" / "overrides.yaml").exists()
    assert recipe.run_overrides(copy / "mpnet") == ["experiment=quickstart", "experiment=quickstart_mpnet"]
    assert recipe.render(copy).splitlines()[2].startswith("| mpnet | `experiment=quickstart_mpnet` | 60.0 |")
    [run] = find_runs([copy])
    assert run.mode == "train" and run.overrides == ["experiment=quickstart", "experiment=quickstart_mpnet"]


def test_probe_rows_survive_the_archive(tmp_path: Path) -> None:
    run = make_probe_run(tmp_path / "probe" / "hotpotqa" / "f0", n=3)
    rows = (run / "probe_nodes.jsonl").read_bytes()
    copy = unpack(pack(tmp_path / "probe").archive, tmp_path / "copy")
    assert (copy / "hotpotqa" / "f0" / "probe_nodes.jsonl").read_bytes() == rows
