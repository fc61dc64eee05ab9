"""Each ``configs/data/*.yaml`` names the function that reads it (``data.reader``), the entry of the benchmark
registry (``canopy_lit.data.BENCHMARKS``, the library's catalogue of names), so the config shows the code it runs
and a reader of one's own is the same key; the two cannot drift, and reading through either gives one benchmark."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose
from omegaconf import OmegaConf

from canopy_lit.data import BENCHMARKS, load_split
from canopy_lit.dotted import locate

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "data"


def _data(*overrides: str) -> dict:
    cfg = compose("evaluate", overrides=[f"paths.root_dir={ROOT}", *overrides])
    return OmegaConf.to_container(cfg.data, resolve=True)


@pytest.mark.parametrize("option", sorted(p.stem for p in CONFIGS.glob("*.yaml")))
def test_each_data_config_names_its_registered_reader(hydra_ctx, option: str) -> None:
    data = compose("evaluate", overrides=[f"data={option}"]).data
    assert data.reader == BENCHMARKS[data.name].reader, option
    assert callable(locate(data.reader))


@pytest.mark.parametrize("option", ["hotpotqa", "tatqa"])
def test_reading_through_the_config_is_reading_through_the_registry(hydra_ctx, option: str) -> None:
    data = _data(f"data={option}")
    bench, questions = load_split(**data)
    by_name, by_name_questions = load_split(**{**data, "reader": None})
    assert [q.id for q in questions] == [q.id for q in by_name_questions] and questions
    assert list(bench.items) == list(by_name.items) and bench.meta == by_name.meta


def test_a_label_reads_with_the_configured_reader_and_a_near_miss_is_a_typo(hydra_ctx) -> None:
    from canopy_lit.schema import ConfigError, validate_eval_config

    def problems(*overrides: str) -> list[str]:
        try:
            validate_eval_config(compose("evaluate", overrides=list(overrides)))
        except ConfigError as err:
            return [p for p in err.problems if p.startswith("data.")]
        return []

    assert problems("data=hotpotqa", "data.name=2wikimultihopqa") == []
    assert problems("data=custom", "data.name=my_benchmark") == []  # a label of one's own
    (typo,) = problems("data=tatqa", "data.name=tatq")
    assert typo.startswith("data.name must be one of") and "(did you mean tatqa?)" in typo
    bench, _ = load_split(**_data("data=hotpotqa", "data.name=my_hotpot"))
    assert bench.name == "my_hotpot" and next(iter(bench.items)).startswith("my_hotpot:")
