"""The package's one dotted-path importer (Hydra's ``_target_`` aside): ``locate("pkg.module.attr")``.

Config keys that name code without being a ``_target_`` block (``data.reader``) and the config check, which
reads a target's signature before anything is built, resolve through it, so a bad path is one line naming it.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any


def locate(path: str, what: str = "") -> Any:
    """The object a dotted path names: a module, or an attribute path inside one (``module.Class.method``).

    Args:
        path: e.g. ``canopy_lit.data.readers.nq.read`` or ``mypkg.readers``.
        what: what the path is for, to open the message with (``"reader"`` -> ``reader 'mypkg.X' ...``).

    Raises:
        ImportError: one line naming ``path``: no module of it imports (and why), a module of it fails on its
            own imports (a missing dependency: named), or the module has no such attribute.
    """
    label = f"{what} {path!r}" if what else repr(path)
    parts = path.split(".")
    missing: ImportError | None = None
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            obj: Any = importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name is not None and (module == err.name or module.startswith(f"{err.name}.")):
                missing = err  # this name is no module (yet): a shorter prefix may be one
                continue
            raise ImportError(f"{label} does not import ({err})") from err
        except ImportError as err:
            raise ImportError(f"{label} does not import ({err})") from err
        break
    else:
        raise ImportError(f"{label} does not import ({missing})")
    for i, name in enumerate(parts[cut:]):
        try:
            obj = getattr(obj, name)
        except AttributeError:
            kind = "module" if inspect.ismodule(obj) else type(obj).__name__
            raise ImportError(f"{label}: {kind} {'.'.join(parts[: cut + i])!r} has no {name!r}") from None
    return obj
