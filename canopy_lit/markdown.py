"""The one markdown table writer of the package, the study scripts and the run summaries."""

from __future__ import annotations

import re
from collections.abc import Sequence

_BARE_PIPE = re.compile(r"(?<!\\)\|")


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``header`` and ``rows`` (cells as text) as a GitHub markdown table, one line each, ending in a newline.

    A bare ``|`` inside a body cell is escaped (``\\|``) so it cannot split the cell; one already escaped is
    left as it is.
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_BARE_PIPE.sub(r"\\|", str(c)) for c in cells) + " |" for cells in rows]
    return "\n".join(lines) + "\n"
