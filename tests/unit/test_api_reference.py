"""The API reference (docs/api/*.md, rendered by mkdocstrings) covers every public name.

Public: each name in the ``__all__`` of a package below (what ``from canopy_lit.<package> import *`` gives and
what the guides import). A name is covered when a ``::: path`` directive documents it: the name itself (by
the package or by the module defining it), or that package or module, whole or with the name in its
``members`` list. A new public package must be added to PUBLIC_PACKAGES (the last test finds the ones missing).
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_PACKAGES = [
    "canopy_lit",
    "canopy_lit.assets",
    "canopy_lit.data",
    "canopy_lit.encoders",
    "canopy_lit.hierarchy",
    "canopy_lit.llm",
    "canopy_lit.scoring",
    "canopy_lit.refine",
    "canopy_lit.control",
    "canopy_lit.reader",
    "canopy_lit.retrieval",
    "canopy_lit.training",
    "canopy_lit.serve",
    "canopy_lit.carve",
    "canopy_lit.visual",
]
# Packages that export nothing by __all__ and are documented module by module (or are internal wiring).
MODULE_BY_MODULE = {"canopy_lit.adapters", "canopy_lit.integrations", "canopy_lit.report", "canopy_lit.pipeline", "canopy_lit.studies",
                    "canopy_lit.eval", "canopy_lit.schema"}  # fmt: skip

_DIRECTIVE = re.compile(r"^::: *(\S+)\n((?:    .*\n|\n)*)", re.M)


def directives() -> dict[str, list[str] | None]:
    """``path -> members`` (None: the whole object) of every ``:::`` directive of the API pages."""
    out: dict[str, list[str] | None] = {}
    for page in sorted((ROOT / "docs" / "api").glob("*.md")):
        for path, body in _DIRECTIVE.findall(page.read_text(encoding="utf-8") + "\n"):
            options = (yaml.safe_load(body) or {}).get("options", {}) if body.strip() else {}
            members = options.get("members")
            out[path] = None if members is None else list(members)
    return out


def defining_module(package: str, name: str, obj: object) -> list[str]:
    """The modules that may define ``obj``: a class or function's ``__module__``; for a constant, every
    imported submodule of ``package`` holding the same object (which of them assigns it and which imports it
    cannot be told from the object, and which are imported depends on what ran before)."""
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return [obj.__module__]
    return [m for m, mod in sorted(sys.modules.items()) if m.startswith(package + ".") and getattr(mod, name, None) is obj]


def covered(package: str, name: str, modules: list[str], docs: dict[str, list[str] | None]) -> bool:
    owners = [package, *modules]
    if any(f"{o}.{name}" in docs for o in owners):
        return True
    return any(o in docs and (docs[o] is None or name in docs[o]) for o in owners)


def public_names() -> list[tuple[str, str]]:
    return [(p, n) for p in PUBLIC_PACKAGES for n in importlib.import_module(p).__all__]


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_every_public_name_of_the_package_is_in_the_api_reference(package: str) -> None:
    docs = directives()
    mod = importlib.import_module(package)
    missing = [n for n in mod.__all__ if not covered(package, n, defining_module(package, n, getattr(mod, n)), docs)]
    assert not missing, f"{package}: not in docs/api/*.md: {missing}"


def test_every_directive_names_an_importable_object() -> None:
    """A renamed or removed name fails here in the default tier (the strict site build would fail too)."""
    bad = []
    for path, members in directives().items():
        module, _, attr = path.rpartition(".")
        try:
            obj = importlib.import_module(path)
        except ImportError:
            try:
                obj = getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError):
                bad.append(path)
                continue
        bad += [f"{path}.{m}" for m in members or [] if not hasattr(obj, m)]
    assert not bad, bad


def test_the_guard_catches_a_missing_name() -> None:
    docs = directives()
    assert covered("canopy_lit.data", "load_benchmark", ["canopy_lit.data.benchmark"], docs)
    del docs["canopy_lit.data"]
    assert not covered("canopy_lit.data", "load_benchmark", ["canopy_lit.data.benchmark"], docs)


def test_every_package_is_public_or_documented_module_by_module() -> None:
    packages = {"canopy_lit." + p.parent.name for p in (ROOT / "canopy_lit").glob("*/__init__.py")}
    unlisted = sorted(packages - set(PUBLIC_PACKAGES) - MODULE_BY_MODULE)
    assert not unlisted, f"add to PUBLIC_PACKAGES (with an __all__) or MODULE_BY_MODULE: {unlisted}"
    assert not (set(PUBLIC_PACKAGES) | MODULE_BY_MODULE) - packages - {"canopy_lit"}
