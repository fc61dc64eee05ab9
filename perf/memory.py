"""Peak resident memory (RSS) of the MiniLM smoke training: one process, and the 2-rank CPU DDP check.

    python perf/memory.py [--ddp] [--run-dir DIR] [--out FILE.json] [override ...]

Runs ``train.py experiment=shared_lora trainer=cpu encoder=minilm debug=smoke`` (``--ddp``: ``trainer=ddp
trainer.accelerator=cpu trainer.devices=2``, every rank its own process) in a fresh run folder and reads
the memory of its whole process tree every 50 ms from ``/proc/<pid>/status`` (Linux):

- ``max_rss_gb``: the kernel's peak RSS of the largest process (``wait4`` rusage; what ``/usr/bin/time -v``
  prints as "Maximum resident set size");
- ``ranks_gb``: each process's own peak (``VmHWM``), ``sum_gb`` their sum (an upper bound of what the
  ranks hold at once), ``total_gb`` the largest sampled sum of current RSS over the tree (a lower bound).

In ``perf/run.py`` the entries ``train_memory`` / ``ddp_memory`` compare the peak with the budget of
docs/scaling.md ("Memory"): 3 GB for the single process, 2 x 3 GB for the two ranks (ratio = peak /
budget, target <= 1).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ["experiment=shared_lora", "trainer=cpu", "encoder=minilm", "debug=smoke"]
DDP = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]
BUDGET_GB = 3.0  # per process (docs/scaling.md, "Memory")
GB = 1024**3


def _status_kb(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM (kB) of ``pid``; empty once it has exited."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":", 1)
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def _children() -> dict[int, list[int]]:
    """ppid -> pids of every live process (one pass over /proc)."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the command name may hold spaces and parentheses
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _tree(root: int) -> list[int]:
    children, out, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


class TreeSampler(threading.Thread):
    """Samples the RSS of ``root`` and all its descendants until :meth:`stop`."""

    def __init__(self, root: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.hwm_kb: dict[int, int] = {}  # pid -> its last seen VmHWM (monotone: its peak so far)
        self.total_kb = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            total = 0
            for pid in _tree(self.root):
                st = _status_kb(pid)
                if "VmHWM" in st:
                    self.hwm_kb[pid] = max(self.hwm_kb.get(pid, 0), st["VmHWM"])
                    total += st.get("VmRSS", 0)
            self.total_kb = max(self.total_kb, total)
            self._done.wait(self.interval)

    def stop(self) -> None:
        self._done.set()
        self.join()


def measure(ddp: bool = False, run_dir: str | Path | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    """Run the smoke training once and return its peak memory (GB) and seconds.

    Raises:
        RuntimeError: the run failed (its last output lines are in the message).
    """
    tmp = None
    if run_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="canopy-memory-")
        run_dir = Path(tmp.name) / "run"
    cmd = [sys.executable, "train.py", *SMOKE, *(DDP if ddp else []), f"hydra.run.dir={run_dir}",
           "callbacks.rich_progress_bar=null", *(overrides or [])]
    with tempfile.TemporaryFile(mode="w+") as log:
        t0 = time.perf_counter()
        env = {**os.environ, "HYDRA_FULL_ERROR": "1"}
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not every child this process had
        sampler.stop()
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - t0
        log.seek(0)
        output = log.read()
    if tmp is not None:
        tmp.cleanup()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n" + "\n".join(output.splitlines()[-20:]))
    ranks = sorted((kb * 1024 / GB for kb in sampler.hwm_kb.values()), reverse=True)
    return {
        "max_rss_gb": round(usage.ru_maxrss * 1024 / GB, 3),  # ru_maxrss is in kB on Linux
        "ranks_gb": [round(r, 3) for r in ranks],
        "sum_gb": round(sum(ranks), 3),
        "total_gb": round(sampler.total_kb * 1024 / GB, 3),
        "seconds": round(seconds, 1),
        "command": " ".join(["python train.py", *cmd[2:]]),
    }


def entry(ddp: bool = False) -> dict[str, Any]:
    """``perf/run.py`` entry: the peak against the budget (ratio = peak / budget, target <= 1)."""
    got = measure(ddp)
    peak = got["sum_gb"] if ddp else got["max_rss_gb"]
    budget = BUDGET_GB * (2 if ddp else 1)
    return {"ours": peak, "reference": budget, "ratio": peak / budget, "target": 1.0, "direction": "max",
            "unit": "GB peak RSS (sum over ranks)" if ddp else "GB peak RSS", **got}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ddp", action="store_true", help="the 2-rank CPU DDP check instead of one process")
    ap.add_argument("--run-dir", help="keep the run folder here (metrics.json, csv logs) instead of a temporary one")
    ap.add_argument("--out", help="also write the result as JSON to this file")
    ap.add_argument("overrides", nargs="*", help="extra train.py overrides")
    args = ap.parse_args(argv)
    result = measure(args.ddp, args.run_dir, args.overrides)
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
