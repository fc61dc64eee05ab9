"""W&B helpers for tests: an environment without a key, a sweep trial's argv as ``wandb agent`` builds it,
and the contents of an offline run (``<dir>/wandb/offline-run-*/run-*.wandb``)."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest


def no_key_env(tmp_path: Path) -> dict[str, str]:
    """This process's environment as a machine without W&B credentials sees it: no ``WANDB_*`` variable,
    an empty netrc, no W&B settings (a developer's own key never reaches the test)."""
    netrc = tmp_path / "netrc"
    netrc.touch()
    netrc.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(NETRC=str(netrc), WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"), WANDB_SILENT="true")
    return env


def no_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``no_key_env`` for this process."""
    for key in [k for k in os.environ if k.startswith("WANDB_")]:
        monkeypatch.delenv(key)
    for key, value in no_key_env(tmp_path).items():
        if os.environ.get(key) != value:
            monkeypatch.setenv(key, value)


def agent_argv(
    sweep: Mapping[str, Any], values: Mapping[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> tuple[list[str], dict[str, str]]:
    """A trial's command line and environment, built by wandb's own agent (``wandb_agent.Agent._command_run``,
    what ``wandb agent`` runs for each "run" command of the sweep controller) from the sweep's ``command``
    and the sampled ``values``; nothing is started and no server is asked."""
    from wandb import wandb_agent

    started: dict[str, Any] = {}

    class Captured:
        def __init__(
            self, command: list[str] | None = None, env: dict[str, str] | None = None, **kwargs: Any
        ) -> None:
            started.update(command=command, env=env)

    monkeypatch.setattr(wandb_agent, "AgentProcess", Captured)
    for key, value in {
        "WANDB_DIR": str(tmp_path),
        "WANDB_SWEEP_ID": "testsweep",
        "WANDB_RUN_ID": "",
        "WANDB_SWEEP_PARAM_PATH": "",
    }.items():
        monkeypatch.setenv(key, value)  # restored after the test: _command_run sets some of them
    agent = wandb_agent.Agent(api=None, queue=None, sweep_id="testsweep")
    agent._sweep_command = list(sweep["command"])
    agent._command_run(
        {
            "type": "run",
            "run_id": "trial0",
            "program": sweep["program"],
            "args": {k: {"value": v} for k, v in values.items()},
        }
    )
    return list(started["command"]), dict(started["env"])


@dataclass
class OfflineRun:
    """What an offline W&B run recorded: its run record, logged rows and summary."""

    path: Path
    name: str = ""
    project: str = ""
    group: str = ""
    job_type: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def logged(self, key: str) -> list[Any]:
        return [row[key] for row in self.history if key in row]


_BLOCK, _HEADER = 32 * 1024, 7  # the LevelDB log layout of a .wandb file, after its 7-byte ":W&B" header


def _records(path: Path) -> Iterator[bytes]:
    data, pos, pending = path.read_bytes(), 7, b""
    while pos + _HEADER <= len(data):
        if _BLOCK - pos % _BLOCK < _HEADER:  # a block's tail too short for a header is padding
            pos += _BLOCK - pos % _BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        chunk = data[pos + _HEADER : pos + _HEADER + length]
        pos += _HEADER + length
        if kind == 0:
            continue
        pending = chunk if kind in (1, 2) else pending + chunk  # 1 full, 2 first, 3 middle, 4 last
        if kind in (1, 4):
            yield pending


def _items(items: Any) -> dict[str, Any]:
    """Logged values by key; a logged object (a table, an image) as the dict of its fields."""
    out: dict[str, Any] = {}
    for item in items:
        *parents, last = [item.key] if item.key else list(item.nested_key)
        node = out
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = json.loads(item.value_json)
    return out


def offline_runs(save_dir: Path) -> list[OfflineRun]:
    """Every offline run under ``save_dir/wandb/``, oldest first."""
    from wandb.proto import wandb_internal_pb2 as pb

    runs = []
    for path in sorted(Path(save_dir).glob("wandb/offline-run-*/run-*.wandb")):
        run = OfflineRun(path)
        for data in _records(path):
            record = pb.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run.name, run.project = record.run.display_name, record.run.project
                run.group, run.job_type = record.run.run_group, record.run.job_type
            elif kind == "history":
                run.history.append(_items(record.history.item))
            elif kind == "summary":
                run.summary.update(_items(record.summary.update))
        runs.append(run)
    return runs
