"""The multi-node training recipe (scripts/slurm/train_multinode.sbatch) is checked against the real configs.

The script runs under bash with stand-ins for ``srun`` (starts the task command once per rank with that rank's
SLURM variables) and for the Python interpreter (records its argv and exits), so what each rank would receive
is exactly what the script builds. Those overrides are composed with the real configs, validated, and the
Trainer is built under the SLURM variables of a rank on the second node: Lightning's SLURM environment must give
it its world size, ranks and node. Invalid settings are refused by the config check with one line each, and
``trainer.num_nodes > 1`` outside any cluster launcher (which would wait forever) is refused by ``train.py``
itself with exit 2 before anything loads.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from evaluate_runner import ROOT, run_script
from hydra import compose
from hydra.utils import instantiate
from omegaconf import open_dict

from canopy_lit.schema import ConfigError, check_train_run, validate_train_config

SCRIPT = ROOT / "scripts" / "slurm" / "train_multinode.sbatch"
NODES, PER_NODE = 2, 8
# Variables srun sets in each task (Lightning's SLURMEnvironment reads them); the job id names the run folder.
JOB = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "canopy-train", "SLURM_NNODES": str(NODES),
       "SLURM_NTASKS_PER_NODE": str(PER_NODE), "SLURM_NTASKS": str(NODES * PER_NODE),
       "SLURM_NODELIST": "gpu[07-08]"}  # fmt: skip
LAUNCHERS = ("SLURM_", "TORCHELASTIC_", "NODE_RANK", "GROUP_RANK", "LSB_", "OMPI_", "PMI_")

FAKE_SRUN = """#!/usr/bin/env bash
# srun stand-in: the task command once per rank (ranks 0 and 9: node 0 and node 1), highest status wins.
status=0
for rank in 0 9; do
  SLURM_PROCID=$rank SLURM_LOCALID=$((rank % SLURM_NTASKS_PER_NODE)) SLURM_NODEID=$((rank / SLURM_NTASKS_PER_NODE)) \\
    "${@:2}" || { s=$?; [ $s -gt $status ] && status=$s; }
done
echo "srun $1" >> "$RECORD/calls"
exit $status
"""
FAKE_PYTHON = """#!/usr/bin/env bash
printf '%s\\n' "$@" > "$RECORD/rank$SLURM_PROCID"
exit "${FAKE_STATUS:-0}"
"""
FAKE_SCONTROL = """#!/usr/bin/env bash
echo "scontrol $*" >> "$RECORD/calls"
"""


def _tool(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def run_recipe(tmp_path: Path, *args: str, status: int = 0) -> tuple[subprocess.CompletedProcess, dict[int, list[str]]]:
    return run_recipe_script(SCRIPT, tmp_path, *args, status=status)


def run_recipe_script(
    script: Path, tmp_path: Path, *args: str, status: int = 0
) -> tuple[subprocess.CompletedProcess, dict[int, list[str]]]:
    """Run an sbatch script as SLURM would on the first node; returns the result and each rank's argv."""
    bin_dir, record = tmp_path / "bin", tmp_path / "record"
    bin_dir.mkdir(exist_ok=True)
    record.mkdir(exist_ok=True)
    for f in record.iterdir():
        f.unlink()
    _tool(bin_dir, "srun", FAKE_SRUN)
    _tool(bin_dir, "scontrol", FAKE_SCONTROL)
    python = _tool(bin_dir, "fake-python", FAKE_PYTHON)
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHERS)}
    env.update(JOB, PATH=f"{bin_dir}:{env['PATH']}", PYTHON=str(python), RECORD=str(record),
               SLURM_SUBMIT_DIR=str(ROOT), FAKE_STATUS=str(status))  # fmt: skip
    res = subprocess.run(["bash", str(script), *args], env=env, capture_output=True, text=True, timeout=60)
    argv = {int(p.name.removeprefix("rank")): p.read_text().splitlines() for p in record.glob("rank*")}
    return res, argv


@pytest.fixture
def slurm_rank(monkeypatch: pytest.MonkeyPatch):
    """This process as one srun task of the job: rank 9, the second node's local rank 1."""
    for key in [k for k in os.environ if k.startswith(LAUNCHERS)]:
        monkeypatch.delenv(key)
    for key, value in {**JOB, "SLURM_PROCID": "9", "SLURM_LOCALID": "1", "SLURM_NODEID": "1"}.items():
        monkeypatch.setenv(key, value)
    # Lightning writes MASTER_ADDR / MASTER_PORT into os.environ when it resolves them: undone after the test
    monkeypatch.setenv("MASTER_ADDR", "unset")
    monkeypatch.delenv("MASTER_ADDR")
    monkeypatch.setenv("MASTER_PORT", "29517")


def test_the_script_starts_every_rank_with_the_recipe_from_the_allocation(tmp_path: Path) -> None:
    res, argv = run_recipe(tmp_path, "encoder=minilm")
    assert res.returncode == 0, res.stderr
    assert sorted(argv) == [0, 9]
    assert argv[0][0] == "train.py"
    overrides = argv[0][1:]
    assert overrides[:6] == ["experiment=shared_lora", "trainer=ddp", f"trainer.num_nodes={NODES}",
                             f"trainer.devices={PER_NODE}", "hydra.run.dir=outputs/train/runs/slurm-4242",
                             "ckpt_path=last"]  # fmt: skip
    assert overrides[6:] == ["encoder=minilm"]  # the script's own arguments reach every rank
    # Rank 0 writes .hydra/ and train.log; every other rank logs apart and writes no .hydra/ of its own.
    assert argv[9] == argv[0] + ["hydra.output_subdir=null", "hydra.job.name=train_rank9"]
    assert (tmp_path / "record" / "calls").read_text().splitlines() == ["srun --kill-on-bad-exit=1"]


def test_a_stopped_run_requeues_its_job_and_an_outside_start_is_refused(tmp_path: Path) -> None:
    res, _ = run_recipe(tmp_path, status=143)  # SIGTERM before the time limit: last.ckpt saved, exit 143
    assert res.returncode == 143
    assert "scontrol requeue 4242" in (tmp_path / "record" / "calls").read_text().splitlines()
    res, _ = run_recipe(tmp_path, status=1)  # a failure is not requeued
    assert res.returncode == 1 and "scontrol" not in (tmp_path / "record" / "calls").read_text()
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHERS)}
    res = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "submit with sbatch" in res.stderr


def test_each_rank_gets_its_place_in_the_trainer(tmp_path: Path, hydra_ctx, slurm_rank) -> None:
    from lightning.fabric.plugins.environments import SLURMEnvironment
    from lightning.pytorch.strategies import DDPStrategy

    _, argv = run_recipe(tmp_path, "encoder=minilm")
    cfg = compose("train", overrides=argv[9][1:], return_hydra_config=True)
    assert cfg.hydra.run.dir == "outputs/train/runs/slurm-4242" and cfg.ckpt_path == "last"
    assert cfg.trainer.num_nodes == NODES and cfg.trainer.devices == PER_NODE
    assert cfg.trainer.accelerator == "gpu" and cfg.trainer.precision == "bf16-mixed"
    assert cfg.trainer.strategy._target_ == "lightning.pytorch.strategies.DDPStrategy"
    check_train_run(cfg)  # valid, and consistent with the job's allocation
    # No GPU here: the same Trainer kwargs on CPU processes (DDP and the cluster environment do not change).
    with open_dict(cfg):
        cfg.trainer.accelerator, cfg.trainer.default_root_dir = "cpu", str(tmp_path / "run")
    trainer = instantiate(cfg.trainer, callbacks=[], logger=False, enable_progress_bar=False)
    assert isinstance(trainer.strategy, DDPStrategy)
    assert isinstance(trainer.strategy.cluster_environment, SLURMEnvironment)
    assert (trainer.num_nodes, trainer.num_devices, trainer.world_size) == (NODES, PER_NODE, NODES * PER_NODE)
    assert (trainer.global_rank, trainer.local_rank, trainer.node_rank) == (9, 1, 1)
    assert trainer.strategy.cluster_environment.main_address == "gpu07"  # the first node is rank 0's
    # Lightning's own check at launch agrees with the config check.
    trainer.strategy.cluster_environment.validate_settings(trainer.num_devices, trainer.num_nodes)


def trainer_problems(*overrides: str) -> list[str]:
    try:
        check_train_run(compose("train", overrides=["experiment=quickstart", *overrides]))
    except ConfigError as err:
        return [p for p in err.problems if p.startswith("trainer.")]
    return []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["trainer.num_nodes=0"], "trainer.num_nodes must be an integer >= 1, got 0"),
        (["trainer.num_nodes=two"], "trainer.num_nodes must be an integer >= 1, got 'two'"),
        (["trainer.devices=0"], "trainer.devices must be -1 or an integer >= 1"),
        (["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=-1"],
         "trainer.devices=-1 (every GPU) needs trainer.accelerator=gpu; on a CPU give the number of processes"),
        (["trainer.num_nodes=2", "+trainer.strategy=single_device"],
         "trainer.num_nodes=2 needs a distributed strategy (trainer=ddp), got trainer.strategy=single_device"),
    ],
)
def test_an_invalid_trainer_is_one_line_naming_the_key(hydra_ctx, overrides: list[str], message: str) -> None:
    problems = trainer_problems(*overrides)
    assert len(problems) == 1 and problems[0].startswith(message), problems
    with pytest.raises(ConfigError):
        validate_train_config(compose("train", overrides=["experiment=quickstart", *overrides]))


def test_the_slurm_allocation_and_the_trainer_must_agree(hydra_ctx, slurm_rank) -> None:
    assert trainer_problems("trainer=ddp", "trainer.num_nodes=2", "trainer.devices=8") == []
    assert trainer_problems("trainer=ddp", "trainer.num_nodes=2", "trainer.devices=4") == [
        "trainer.devices=4 but the SLURM job starts 8 tasks per node (--ntasks-per-node): set trainer.devices=8, "
        "one process per device"
    ]
    assert trainer_problems("trainer=ddp", "trainer.num_nodes=3", "trainer.devices=8") == [
        "trainer.num_nodes=3 but the SLURM job has 2 nodes (--nodes): set trainer.num_nodes=2"
    ]


def test_several_machines_without_a_launcher_exit_2_before_anything_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in os.environ if k.startswith(LAUNCHERS)]:
        monkeypatch.delenv(key)
    out = run_script("train.py", tmp_path / "run", "experiment=quickstart", "trainer=ddp", "trainer.accelerator=cpu",
                     "trainer.num_nodes=2")  # fmt: skip
    assert out.status == 2, out.stderr[-2000:]
    lines = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    assert lines == [
        "error: trainer.num_nodes=2 but no cluster launcher started this process (srun in a SLURM job, torchrun, "
        "or NODE_RANK and MASTER_ADDR set on every machine): each machine would wait for the others forever; "
        "on SLURM: sbatch --nodes=N scripts/slurm/train_multinode.sbatch"
    ], out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_node_rank_by_hand_is_a_launcher_too(hydra_ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    # Lightning's own environment reads NODE_RANK and MASTER_ADDR, set on every machine by hand
    for key in [k for k in os.environ if k.startswith(LAUNCHERS)]:
        monkeypatch.delenv(key)
    assert trainer_problems("trainer=ddp", "trainer.accelerator=cpu", "trainer.num_nodes=2") != []
    monkeypatch.setenv("NODE_RANK", "1")
    assert trainer_problems("trainer=ddp", "trainer.accelerator=cpu", "trainer.num_nodes=2") == []


FAKE_SRUN_PARALLEL = """#!/usr/bin/env bash
# srun stand-in: every rank at once (one task per "node" here), highest status wins.
shift
pids=()
for ((rank = 0; rank < SLURM_NTASKS; rank++)); do
  SLURM_PROCID=$rank SLURM_LOCALID=0 SLURM_NODEID=$rank "$@" > "$RECORD/out$rank" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || { s=$?; [ $s -gt $status ] && status=$s; }; done
exit $status
"""


@pytest.mark.slow
def test_the_recipe_trains_as_two_slurm_nodes_on_cpu(tmp_path: Path) -> None:
    """The script end to end with real ranks: two CPU processes posing as two one-task nodes (gloo DDP), the
    real train.py and MiniLM on a few bundled questions, one shared run folder."""
    import socket
    import sys

    bin_dir, record, run_dir = tmp_path / "bin", tmp_path / "record", tmp_path / "run"
    bin_dir.mkdir()
    record.mkdir()
    _tool(bin_dir, "srun", FAKE_SRUN_PARALLEL)
    _tool(bin_dir, "scontrol", FAKE_SCONTROL)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHERS)}
    env.update({"SLURM_JOB_ID": "4243", "SLURM_JOB_NAME": "canopy-train", "SLURM_NNODES": "2",
                "SLURM_NTASKS_PER_NODE": "1", "SLURM_NTASKS": "2", "SLURM_NODELIST": "localhost",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "PATH": f"{bin_dir}:{env['PATH']}",
                "PYTHON": sys.executable, "RECORD": str(record), "SLURM_SUBMIT_DIR": str(ROOT),
                "RUN_DIR": str(run_dir), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})  # fmt: skip
    small = "{hotpotqa: {max_questions: {train: 4, val: 2, test: 2}}}"
    args = ["trainer.accelerator=cpu", "encoder=minilm", "encoder.max_seq_length=64", "debug=fdr", "threads=1",
            "datamodule.benchmarks=[hotpotqa]", "datamodule.zero_shot=[]", f"++datamodule.options={small}",
            "datamodule.batch_size=4"]  # fmt: skip
    res = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=600)
    # the whole log is searched and only its tail shown: how much precedes a line depends on the path lengths
    # in its warnings, so a fixed tail can miss it (it did on a checkout at a longer path)
    logs = {p.name: p.read_text() for p in record.glob("out*")}
    tails = {name: text[-3000:] for name, text in logs.items()}
    assert res.returncode == 0, (res.stderr, tails)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert 0.0 <= metrics["test/decision_accuracy"] <= 1.0
    assert (run_dir / "adapter" / "adapter_model.safetensors").is_file()
    # one run folder: rank 0's config and log, rank 1's log beside it
    assert (run_dir / ".hydra" / "config.yaml").is_file() and (run_dir / "train.log").is_file()
    assert (run_dir / "train_rank1.log").is_file()
    assert "MEMBER: 1/2" in logs["out0"] and "MEMBER: 2/2" in logs["out1"], tails


def test_the_corpus_encoding_script_gives_every_rank_its_slice_of_the_allocation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurm_rank
) -> None:
    """scripts/slurm/index_corpus.sbatch: what each rank receives is a valid ``python -m canopy_lit.retrieval
    index`` command line whose Trainer arguments (read by the real CLI) place that rank in the job."""
    import lightning as L
    from lightning.fabric.plugins.environments import SLURMEnvironment

    import canopy_lit.encoders
    import canopy_lit.retrieval.retriever
    from canopy_lit.retrieval.__main__ import main

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "eiffel", "title": "Eiffel Tower", "text": "The tower was completed in 1889."}\n')
    script = ROOT / "scripts" / "slurm" / "index_corpus.sbatch"
    res, argv = run_recipe_script(script, tmp_path, "--corpus", str(corpus), "--cache-dir", str(tmp_path / "cache"))
    assert res.returncode == 0, res.stderr
    assert sorted(argv) == [0, 9] and argv[0] == argv[9]  # the ranks differ only by SLURM's variables
    assert argv[0][:3] == ["-m", "canopy_lit.retrieval", "index"]

    built: dict = {}

    class Built:
        index = "index"

    def fake_build(encoder, names, **kwargs):  # the CLI's call, recorded instead of encoding
        built.update(kwargs)
        return Built()

    monkeypatch.setattr(canopy_lit.encoders, "load_encoder", lambda backbone, **kw: "encoder")
    monkeypatch.setattr(canopy_lit.retrieval.retriever, "build_retriever", fake_build)
    assert main(argv[9][2:]) == 0
    kwargs = built["trainer_kwargs"]
    assert kwargs == {"accelerator": "gpu", "strategy": "ddp", "devices": PER_NODE, "num_nodes": NODES}
    trainer = L.Trainer(**{**kwargs, "accelerator": "cpu"}, logger=False, enable_progress_bar=False,
                        default_root_dir=str(tmp_path))  # fmt: skip
    assert isinstance(trainer.strategy.cluster_environment, SLURMEnvironment)
    assert (trainer.world_size, trainer.global_rank, trainer.node_rank) == (NODES * PER_NODE, 9, 1)
