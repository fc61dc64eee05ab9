"""Import layers: no circles through data/ or report/, evaluation never imports reporting, encoders never the hierarchy."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from canopy_lit.data.base import BENCHMARKS

PKG = Path(__file__).resolve().parents[2] / "canopy_lit"


def _module(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in PKG.rglob("*.py")}


def _owner(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str, top_level_only: bool = False) -> set[str]:
    """Project modules that ``module`` imports (anywhere in it, or only at module level)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in tree.body if top_level_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        out |= {o for n in names if n.startswith("canopy_lit") and (o := _owner(n)) and o != module}
    return out


def reaches(start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        for n in imports(m):
            if n == goal:
                return True
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return False


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(("canopy_lit.data", "canopy_lit.report"))))
def test_no_import_circle_through_data_or_report(module: str) -> None:
    back = [n for n in imports(module) if n != module and not module.startswith(n + ".") and reaches(n, module)]
    assert not back, f"{module} imports {back}, which import {module} back"


def test_evaluation_does_not_import_reporting() -> None:
    offenders = {m: sorted(n for n in imports(m) if n.startswith("canopy_lit.report"))
                 for m in MODULES if m.startswith("canopy_lit.eval")}  # fmt: skip
    assert not {m: v for m, v in offenders.items() if v}


def test_encoders_do_not_import_the_hierarchy_at_module_level() -> None:
    for m in (m for m in MODULES if m.startswith("canopy_lit.encoders")):
        assert not {n for n in imports(m, top_level_only=True) if n.startswith("canopy_lit.hierarchy")}, m


def test_node_input_lives_in_types_and_is_re_exported() -> None:
    from canopy_lit import types
    from canopy_lit.hierarchy import Frame, NodeInput

    assert NodeInput is types.NodeInput and Frame is types.Frame


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_registered_reader_resolves(name: str) -> None:
    read = BENCHMARKS[name].read_fn()
    assert callable(read) and next(iter(inspect.signature(read).parameters)) == "path"
