"""A local wheelhouse with one hand-made wheel, for asset-registry tests through the real ``pip download``."""

from __future__ import annotations

import zipfile
from pathlib import Path


def make_wheelhouse(root: Path, payload: bytes) -> Path:
    """``root`` holding one minimal valid wheel, fake-model-part1==0.1.0 (dist-info METADATA / WHEEL / RECORD),
    that carries ``payload`` as its member ``fake_model_part1/data/part01.bin``."""
    root.mkdir(parents=True)
    info = "fake_model_part1-0.1.0.dist-info"
    files = {
        "fake_model_part1/data/part01.bin": payload,
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: fake-model-part1\nVersion: 0.1.0\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = ("".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n").encode()
    with zipfile.ZipFile(root / "fake_model_part1-0.1.0-py3-none-any.whl", "w") as zf:
        for n, data in files.items():
            zf.writestr(n, data)
    return root
