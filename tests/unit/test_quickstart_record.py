"""The committed quickstart record describes the current scripts/quickstart.sh and its training config.

The README's duration line and experiments/quickstart.md cite experiments/quickstart_record.json (written by
scripts/quickstart_record.py from a run's outputs/quickstart/record.json). When the script or the config
changes, the record no longer describes what the first command does: this test fails until the run is
measured again and the record replaced.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import quickstart_record as qr  # noqa: E402

sys.path.pop(0)


def test_committed_record_matches_the_script_and_config() -> None:
    if not qr.COMMITTED.is_file():
        pytest.skip(f"no committed quickstart record yet ({qr.COMMITTED.relative_to(ROOT)}): measure a fresh-clone run "
                    "and copy its outputs/quickstart/record.json there")
    rec = json.loads(qr.COMMITTED.read_text())
    now = qr.source_hashes(ROOT)
    stale = [p for p in qr.HASHED if rec["sha256"].get(p) != now[p]]
    assert not stale, (f"{qr.COMMITTED.relative_to(ROOT)} was measured with other versions of {', '.join(stale)}: "
                       "rerun `bash scripts/quickstart.sh` from a fresh clone and commit its outputs/quickstart/"
                       "record.json there (and the table of `python scripts/quickstart_record.py table`)")
    assert rec["steps_trained"] > 0 and rec["adapter_sha256"]


def test_stale_record_is_detected(tmp_path: Path) -> None:
    """The hash comparison above sees a one-byte change of the script."""
    for rel in qr.HASHED:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes((ROOT / rel).read_bytes())
    before = qr.source_hashes(tmp_path)
    assert before == qr.source_hashes(ROOT)
    (tmp_path / "scripts" / "quickstart.sh").write_bytes((ROOT / "scripts" / "quickstart.sh").read_bytes() + b"\n")
    assert qr.source_hashes(tmp_path)["scripts/quickstart.sh"] != before["scripts/quickstart.sh"]


def test_short_training_is_an_error_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    metrics = tmp_path / "train" / "metrics.json"
    metrics.parent.mkdir()
    metrics.write_text(json.dumps({"train/global_step": 60.0}))
    with pytest.raises(SystemExit) as e:
        qr.check_steps(metrics, 80)
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert f"training ran 60 of 80 steps ({metrics})" in err and "Rerun `bash scripts/quickstart.sh`" in err
    metrics.write_text(json.dumps({"train/global_step": 80.0}))
    assert qr.check_steps(metrics, 80) == 80


def test_adapter_hash_is_of_bytes_and_names(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "adapter_model.safetensors").write_bytes(b"\x00\x01")
        (d / "adapter_config.json").write_text("{}")
    assert qr.sha256_tree(a) == qr.sha256_tree(b)
    (b / "adapter_config.json").write_text('{"base_model_name_or_path": "/elsewhere/minilm"}')
    assert qr.sha256_tree(a) == qr.sha256_tree(b)  # another checkout's path: the same adapter
    (b / "adapter_model.safetensors").write_bytes(b"\x00\x02")
    assert qr.sha256_tree(a) != qr.sha256_tree(b)


def test_skips_and_cuts_are_summarised_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The readers log their skips at every load (three times per lane before): the summary names each once."""
    skip = "tatqa (data/tatqa/tatqa_dataset_dev.json): skipped 123 x gold_rows_not_located\n"
    cut = "the node of item 'x' over leaves [0, 9) is longer than the encoder reads (max_seq_length=512 tokens)\n"
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "train.log").write_text(skip * 3 + cut)
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "evaluate.log").write_text(skip + cut)
    (tmp_path / "lane_f0.log").write_text(skip + cut)  # repeats the lane's own run logs
    qr.skips([tmp_path])
    out = capsys.readouterr().out
    assert out.count("123 x gold_rows_not_located") == 1 and "no gold rows" in out, out
    assert "2 run(s) warned" in out, out


def test_readme_cites_the_committed_record() -> None:
    """The README's duration line names the record's commit, total and steps: it cannot drift from the record."""
    if not qr.COMMITTED.is_file():
        pytest.skip("no committed quickstart record yet")
    rec = json.loads(qr.COMMITTED.read_text())
    readme = (ROOT / "README.md").read_text()
    total = rec["wall_seconds_total"]
    assert f"Measured at {rec['commit'][:7]}" in readme
    assert f"**{total // 60} min {total % 60} s**" in readme
    assert f"all {rec['steps_trained']} steps" in readme
    assert f"`STEPS={rec['steps_trained']}`" in readme
