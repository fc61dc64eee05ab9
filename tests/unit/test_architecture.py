"""Architecture rules that keep the house plan true, read statically from the source (``ast``, nothing imported).

Each rule takes a source tree root (the folder that holds ``canopy_lit/``) and returns its violations, so it
is checked on the real package and shown to fail on a small package written with one deliberate violation.
- reports never import the pipeline, directly or through a chain of module-level imports;
- only the composition roots (``pipeline/build.py``, ``carve/build.py``) and ``train.py`` call Hydra's ``instantiate``;
- the library imports nothing from ``experiments/`` or ``perf/`` (by module name or by a path inserted);
- no import cycle among the package's modules at module level;
- no cycle among its folders, imports inside functions included (entry points ``__main__.py`` aside);
- no module imports another module's private (``_name``) definition.
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "canopy_lit"
INSTANTIATE_ALLOWED = ("canopy_lit/pipeline/build.py", "canopy_lit/carve/build.py", "canopy_lit/train.py")
OUTSIDE_CODE = ("experiments", "perf")
# Hydra's ``call`` is an alias of ``instantiate``
HYDRA_BUILDERS = {"instantiate", "call"}
# calls that make code importable from a path: their string arguments must not point into OUTSIDE_CODE
PATH_LOADERS = {"insert", "append", "extend", "addsitedir", "run_path", "spec_from_file_location", "import_module",
                "__import__", "SourceFileLoader"}  # fmt: skip


def package_modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``root/canopy_lit``."""
    modules = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


@cache
def _parse_text(text: str, filename: str) -> ast.Module:
    return ast.parse(text, filename=filename)


def _parse(path: Path) -> ast.Module:
    return _parse_text(path.read_text(encoding="utf-8"), str(path))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def module_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported: outside functions and ``if TYPE_CHECKING:`` blocks."""
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imported_modules(root: Path, module: str, modules: dict[str, Path]) -> set[str]:
    """Package modules that ``module`` imports at module level (a submodule named by ``from pkg import sub``
    counts as ``pkg.sub``, a name defined in ``pkg`` as ``pkg``)."""
    is_package = modules[module].name == "__init__.py"
    out: set[str] = set()
    for node in module_level_imports(_parse(modules[module])):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
            continue
        source = _absolute(module, is_package, node)
        for alias in node.names:
            sub = f"{source}.{alias.name}"
            if sub in modules:
                out.add(sub)
            elif source in modules:
                out.add(source)
    return out - {module}


def _with_parents(name: str) -> Iterator[str]:
    """Importing ``a.b.c`` runs ``a/__init__``, ``a/b/__init__`` and ``a/b/c``."""
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        yield ".".join(parts[:i])


def import_chain(start: str, goal_prefix: str, graph: dict[str, set[str]]) -> list[str] | None:
    """The shortest chain in ``graph`` from ``start`` to a module under ``goal_prefix``, or None."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for m in frontier:
            for n in sorted(graph[m]):
                if n in previous or n == start:
                    continue
                previous[n] = m
                if n == goal_prefix or n.startswith(goal_prefix + "."):
                    chain = [n]
                    while chain[-1] != start:
                        chain.append(previous[chain[-1]])
                    return chain[::-1]
                nxt.append(n)
        frontier = nxt
    return None


def reports_import_pipeline(root: Path) -> list[str]:
    """Rule: nothing under ``canopy_lit/report`` reaches ``canopy_lit.pipeline`` through module-level imports."""
    modules = package_modules(root)
    # importing a module runs its parent packages' __init__ too
    graph = {m: {p for n in imported_modules(root, m, modules) for p in _with_parents(n) if p in modules}
             for m in modules}  # fmt: skip
    out = []
    for module in (m for m in modules if m == f"{PACKAGE}.report" or m.startswith(f"{PACKAGE}.report.")):
        chain = import_chain(module, f"{PACKAGE}.pipeline", graph)
        if chain:
            out.append(" -> ".join(chain))
    return out


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def instantiate_calls(root: Path) -> list[str]:
    """Rule: Hydra's ``instantiate`` (or its alias ``call``) is called only in ``INSTANTIATE_ALLOWED``."""
    out: list[tuple[str, int, str]] = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in INSTANTIATE_ALLOWED:
            continue
        tree = _parse(path)
        names: set[str] = set()  # local names bound to the builder itself
        modules: set[str] = {"hydra.utils"}  # local dotted names bound to hydra.utils (hydra.utils.x always works)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "hydra.utils":
                names |= {a.asname or a.name for a in node.names if a.name in HYDRA_BUILDERS}
            elif isinstance(node, ast.ImportFrom) and node.module == "hydra":
                modules |= {a.asname or a.name for a in node.names if a.name == "utils"}
            elif isinstance(node, ast.Import):
                modules |= {a.asname for a in node.names if a.name == "hydra.utils" and a.asname}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if (isinstance(func, ast.Name) and func.id in names) or (
                isinstance(func, ast.Attribute) and func.attr in HYDRA_BUILDERS and _dotted(func.value) in modules
            ):
                out.append((rel, node.lineno, f"{rel}:{node.lineno}: {ast.unparse(func)}(...)"))
    return [text for *_, text in sorted(out)]


def _points_outside(text: str) -> bool:
    parts = text.replace("\\", "/").replace(".", "/").split("/")
    return any(p in OUTSIDE_CODE for p in parts)


def outside_code_imports(root: Path) -> list[str]:
    """Rule: no import (anywhere in a module) of ``experiments``/``perf``, and no path loader pointed there."""
    out = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            elif isinstance(node, ast.Call) and _dotted(node.func).rpartition(".")[2] in PATH_LOADERS:
                strings = [c.value for a in node.args for c in ast.walk(a)
                           if isinstance(c, ast.Constant) and isinstance(c.value, str)]  # fmt: skip
                if any(_points_outside(s) for s in strings):
                    out.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
                continue
            else:
                continue
            out += [f"{rel}:{node.lineno}: imports {n}" for n in names if n.split(".")[0] in OUTSIDE_CODE]
    return out


def _strong_components(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    return out


def import_cycles(root: Path) -> list[str]:
    """Rule: the module-level import graph of the package has no cycle."""
    modules = package_modules(root)
    graph = {m: sorted(imported_modules(root, m, modules)) for m in modules}
    return [" <-> ".join(c) for c in _strong_components(graph)]


def every_import(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import of a module, inside functions too (they run on use), except ``if TYPE_CHECKING:`` ones."""
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
        else:
            todo.extend(ast.iter_child_nodes(node))


def _unit(module: str) -> str:
    """A module's folder: ``canopy_lit.eval.harness`` -> ``eval``; a top-level module is its own unit."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def folder_cycles(root: Path) -> list[str]:
    """Rule: no cycle among the package's folders (and top-level modules), counting imports inside functions.

    A file-level graph without cycles can still tie two folders together (``pipeline/build.py`` importing
    ``carve`` while ``carve/pipeline.py`` imported ``pipeline.build``), so neither can be read, tested or
    moved without the other. Entry points (a package's ``__main__.py``) are programs, like ``evaluate.py``:
    they may import from any folder, and their imports are left out.
    """
    modules = package_modules(root)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        if path.name == "__main__.py" or not _unit(module):
            continue
        is_package = path.name == "__init__.py"
        for node in every_import(_parse(path)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [_absolute(module, is_package, node)]
            for name in names:
                if name.startswith(PACKAGE + ".") and _unit(name) != _unit(module):
                    graph.setdefault(_unit(module), set()).add(_unit(name))
    return [" <-> ".join(c) for c in _strong_components({k: sorted(v) for k, v in graph.items()})]


def private_imports(root: Path) -> list[str]:
    """Rule: no module imports another module's private name (``from canopy_lit.x import _helper``): a helper
    two modules share is part of an interface and gets a public name; a private one may change without notice."""
    modules = package_modules(root)
    out = []
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = _parse(path)
        bound: dict[str, str] = {}  # local name -> the package module it is bound to
        for node in every_import(tree):
            if isinstance(node, ast.Import):
                bound |= {a.asname: a.name for a in node.names if a.asname and a.name in modules}
                continue
            source = _absolute(module, is_package, node)
            if not (source == PACKAGE or source.startswith(PACKAGE + ".")):
                continue
            for a in node.names:
                if _private(a.name):
                    out.append(f"{module}: {source}.{a.name}")
                elif f"{source}.{a.name}" in modules:
                    bound[a.asname or a.name] = f"{source}.{a.name}"
        # ``custom._string(...)`` on a module bound above reaches into it just the same
        out += [f"{module}: {bound[n.value.id]}.{n.attr}" for n in ast.walk(tree)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in bound
                and _private(n.attr)]  # fmt: skip
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


RULES = {"reports never import the pipeline": reports_import_pipeline,
         "only the composition roots and train.py instantiate": instantiate_calls,
         "nothing from experiments/ or perf/": outside_code_imports,
         "no import cycle": import_cycles,
         "no cycle among folders": folder_cycles,
         "no private name imported across modules": private_imports}  # fmt: skip


@pytest.mark.parametrize("rule", RULES, ids=list(RULES))
def test_the_package_keeps_the_rule(rule: str) -> None:
    violations = RULES[rule](ROOT)
    assert not violations, f"{rule}: " + "; ".join(violations)


def _fake_package(root: Path, files: dict[str, str]) -> Path:
    """A tiny ``canopy_lit`` under ``root``: a report, a pipeline loop and build module, plus ``files``."""
    base = {"__init__.py": "", "report/__init__.py": "", "report/tables.py": "import json\n",
            "pipeline/__init__.py": "", "pipeline/loop.py": "X = 1\n",
            "pipeline/build.py": "from hydra.utils import instantiate\n\ndef build(c):\n    return instantiate(c)\n",
            "eval/__init__.py": "", "eval/metrics.py": "import math\n"}  # fmt: skip
    for rel, text in {**base, **files}.items():
        path = root / PACKAGE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


VIOLATIONS = {
    "reports never import the pipeline": [
        {"report/tables.py": "from canopy_lit.pipeline import loop\n"},
        {"report/tables.py": "from canopy_lit.eval.metrics import f\n",  # a chain through eval
         "eval/metrics.py": "from ..pipeline.loop import X\n\ndef f():\n    return X\n"},
        {"report/tables.py": "import canopy_lit.eval.metrics\n",  # a chain through a package __init__
         "eval/__init__.py": "import canopy_lit.pipeline\n"},
    ],
    "only the composition roots and train.py instantiate": [
        {"eval/metrics.py": "from hydra.utils import instantiate\n\ndef f(c):\n    return instantiate(c)\n"},
        {"eval/metrics.py": "import hydra\n\ndef f(c):\n    return hydra.utils.instantiate(c)\n"},
        {"eval/metrics.py": "from hydra import utils as hu\n\ndef f(c):\n    return hu.call(c)\n"},
        {"eval/metrics.py": "def f(c):\n    from hydra.utils import instantiate as make\n\n    return make(c)\n"},
    ],
    "nothing from experiments/ or perf/": [
        {"eval/metrics.py": "from experiments.export_adapter import main\n"},
        {"eval/metrics.py": "def f():\n    import perf.timings\n"},
        {"eval/metrics.py": "import sys\n\nsys.path.insert(0, str(ROOT / 'experiments'))\n"},
        {"eval/metrics.py": "import importlib\n\nm = importlib.import_module('perf.encode')\n"},
    ],
    "no import cycle": [
        {"eval/metrics.py": "from canopy_lit.report import tables\n",
         "report/tables.py": "import canopy_lit.eval.metrics\n"},
        {"eval/metrics.py": "from canopy_lit.pipeline.loop import X\n",
         "pipeline/loop.py": "from . import build\n", "pipeline/build.py": "from ..eval import metrics\n"},
    ],
    "no cycle among folders": [
        # acyclic file by file, but pipeline -> eval -> pipeline as folders (the carve <-> pipeline.build case)
        {"pipeline/build.py": "from canopy_lit.eval import metrics\n", "eval/runner.py": "from canopy_lit.pipeline import loop\n"},
        # an import inside a function ties the folders too (the schema <-> data case)
        {"report/tables.py": "def f():\n    from canopy_lit.eval import metrics\n",
         "eval/metrics.py": "from canopy_lit.report import tables\n"},
    ],
}
VIOLATIONS["no private name imported across modules"] = [
    {"eval/metrics.py": "from canopy_lit.pipeline.loop import _helper\n"},
    {"eval/metrics.py": "def f():\n    from ..pipeline.loop import X, _helper\n"},  # relative, inside a function
    {"eval/metrics.py": "from canopy_lit.pipeline import loop\n\nY = loop._helper\n"},  # through the module
]
CASES = [(rule, i) for rule, cases in VIOLATIONS.items() for i in range(len(cases))]


@pytest.mark.parametrize(("rule", "case"), CASES, ids=[f"{r}-{i}" for r, i in CASES])
def test_the_rule_fails_on_a_deliberate_violation(tmp_path: Path, rule: str, case: int) -> None:
    clean = _fake_package(tmp_path / "clean", {})
    assert not RULES[rule](clean), "the fake package without the violation keeps every rule"
    assert RULES[rule](_fake_package(tmp_path / "broken", VIOLATIONS[rule][case]))


def test_a_violation_injected_into_a_copy_of_the_real_package_is_caught(tmp_path: Path) -> None:
    shutil.copytree(ROOT / PACKAGE, tmp_path / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    tables = tmp_path / PACKAGE / "report" / "tables.py"
    tables.write_text(tables.read_text(encoding="utf-8") + "\nfrom canopy_lit.pipeline import loop  # noqa\n")
    assert any(v.startswith("canopy_lit.report.tables -> canopy_lit.pipeline") for v in reports_import_pipeline(tmp_path))


# Definitions nothing in the library, its configs or its entry points used (tests only exercised them)
REMOVED = {"canopy_lit/hierarchy/__init__.py": {"build_tree"}, "canopy_lit/llm/base.py": {"first_token_probs", "to_list"},
           "canopy_lit/visual/messages.py": {"count_image_parts"}}  # fmt: skip


def test_unused_definitions_stay_out() -> None:
    for rel, names in REMOVED.items():
        defined = {n.name for n in ast.walk(_parse(ROOT / rel)) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        assert not defined & names, f"{rel} defines {sorted(defined & names)}, which nothing uses"


def test_refiners_carry_no_unused_name_attribute() -> None:
    """Run labels come from the config's ``_target_`` (``eval.records``), so a refiner needs no ``name``."""
    classes = [n for path in sorted((ROOT / PACKAGE / "refine").glob("*.py")) for n in _parse(path).body
               if isinstance(n, ast.ClassDef)]  # fmt: skip
    assert {"ParentRelativeRefiner", "FlatMatchedRefiner", "LongLLMLinguaRefiner"} <= {c.name for c in classes}
    named = [c.name for c in classes for s in c.body if isinstance(s, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == "name" for t in s.targets)]  # fmt: skip
    assert not named, f"refiners with a `name` nothing reads: {named}"


def test_an_entry_point_may_import_from_above_its_folder(tmp_path: Path) -> None:
    """``python -m canopy_lit.report merge-shards`` runs the evaluation's merge: a program, not a folder edge."""
    root = _fake_package(tmp_path, {"report/__main__.py": "def main():\n    from canopy_lit.pipeline import build\n",
                                    "pipeline/build.py": "from canopy_lit.report import tables\n"})
    assert folder_cycles(root) == []
    (root / PACKAGE / "report" / "tables.py").write_text("from canopy_lit.pipeline import build\n")
    assert folder_cycles(root) == ["pipeline <-> report"]
