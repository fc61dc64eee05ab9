"""The readers' tokenizers ship with the package (issue 48, item 6): counting evidence tokens needs no model
file, and the shipped tokenizer gives the ids the GGUF's own metadata gives, on real bundled texts."""

from __future__ import annotations

from pathlib import Path

import pytest

from canopy_lit.assets import REGISTRY, cache_home
from canopy_lit.data import load_benchmark
from canopy_lit.llm import tokenizers
from canopy_lit.llm.tokenizers import SHIPPED, load_tokenizer, shipped_tokenizer

ROOT = Path(__file__).resolve().parents[2]


def _bundled_texts(n: int = 120) -> list[str]:
    texts = []
    for bench in ("hotpotqa", "tatqa"):
        b = load_benchmark(bench)
        for item in list(b.items.values())[: n // 2]:
            table = getattr(item, "table", None)
            texts.append(f"{item.title}\n{item.text or ''}{table or ''}")
        texts += [q.text for q in b.questions[:20]]
    return texts + ["", "  ", "naïve café — 3.2 million (5.3)%", "def f(x):\n\treturn x**2"]


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_tokenizer_equals_the_gguf_metadata_tokenizer(name: str) -> None:
    gguf = cache_home() / REGISTRY[name].filename
    if not gguf.is_file():
        pytest.skip(f"{name}: its GGUF is not fetched here (python -m canopy_lit.assets fetch {name})")
    from_gguf = load_tokenizer(str(gguf))  # a path: the GGUF's metadata, as before
    shipped = shipped_tokenizer(name)
    texts = _bundled_texts()
    assert len(texts) > 100
    assert [shipped(t) for t in texts] == [from_gguf(t) for t in texts]


def test_an_asset_name_counts_without_its_model_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CANOPY_LIT_HOME", str(tmp_path))  # an empty asset cache: no GGUF anywhere
    monkeypatch.setenv("CANOPY_LIT_OFFLINE", "1")
    ids = load_tokenizer("qwen2.5-1.5b")("Paris lies on the Seine.")
    assert 4 <= len(ids) <= 8 and all(isinstance(i, int) for i in ids)
    assert not any(tmp_path.iterdir())  # nothing fetched


def test_a_changed_shipped_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tokenizers._FILES / "smollm2-135m.tokenizer.json.gz"
    (tmp_path / src.name).write_bytes(src.read_bytes()[:-8] + b"\0" * 8)
    monkeypatch.setattr(tokenizers, "_FILES", tmp_path)
    with pytest.raises(ValueError, match="changed"):
        shipped_tokenizer("smollm2-135m")

