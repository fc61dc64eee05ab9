"""canopy_lit.training.export: a checkpoint's LoRA weights become a loadable adapter (real MiniLM)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from canopy_lit.encoders import load_encoder
from canopy_lit.encoders.text import TextEncoder
from canopy_lit.training.export import PREFIX, export_adapter, main


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    enc = TextEncoder("minilm")
    enc.add_adapter(r=2)
    return enc.save_adapter(tmp_path_factory.mktemp("adapter") / "lora")


def _checkpoint(template: Path, path: Path, shift: float = 0.5, drop: str | None = None) -> dict[str, torch.Tensor]:
    """A checkpoint shaped like a training run's: the module's LoRA weights under ``encoder.model.``."""
    lora = {n: p.detach() + shift for n, p in load_encoder("minilm", adapter=template).lora_state().items()}
    state = {PREFIX + n: v for n, v in lora.items() if n != drop}
    torch.save({"global_step": 300, "state_dict": state}, path)
    return lora


def test_exported_adapter_carries_the_checkpoint_weights(template: Path, tmp_path: Path) -> None:
    want = _checkpoint(template, tmp_path / "last.ckpt")
    step = export_adapter(template, tmp_path / "last.ckpt", tmp_path / "out")
    assert step == 300
    got = load_encoder("minilm", adapter=tmp_path / "out").lora_state()
    assert got.keys() == want.keys() and want
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, msg=name)
    # and they differ from the template's, so the export is not a copy
    base = load_encoder("minilm", adapter=template).lora_state()
    assert any(not torch.equal(base[n], got[n]) for n in got)


def test_checkpoint_of_another_placement_is_refused(template: Path, tmp_path: Path) -> None:
    name = next(iter(load_encoder("minilm", adapter=template).lora_state()))
    _checkpoint(template, tmp_path / "other.ckpt", drop=name)
    with pytest.raises(ValueError, match="do not match adapter"):
        export_adapter(template, tmp_path / "other.ckpt", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_module_entry_point_exports_the_last_checkpoint(template: Path, tmp_path: Path, capsys) -> None:
    # python -m canopy_lit.training.export RUN: RUN/checkpoints/last.ckpt -> RUN/adapter_last
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "adapter").symlink_to(template, target_is_directory=True)
    want = _checkpoint(template, run / "checkpoints" / "last.ckpt")
    main([str(run)])
    got = load_encoder("minilm", adapter=run / "adapter_last").lora_state()
    torch.testing.assert_close(got, want)
    assert "(global step 300) -> " in capsys.readouterr().out
