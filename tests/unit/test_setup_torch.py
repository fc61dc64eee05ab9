"""``scripts/setup.sh --dry-run``: where torch comes from, by GPU presence, index reachability and overrides.

``nvidia-smi`` is a stub on PATH (present and answering = a GPU); the CPU wheel index is a loopback
HTTP server listing ``torch/`` or a closed port, so no test touches the network or installs anything.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "setup.sh"
CLOSED = "http://127.0.0.1:9/whl/cpu"  # nothing listens: the index does not answer


@pytest.fixture(scope="module")
def cpu_index(tmp_path_factory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("index")
    (root / "whl" / "cpu" / "torch").mkdir(parents=True)
    (root / "whl" / "cpu" / "torch" / "index.html").write_text("<a>torch-2.13.0+cpu-cp311-linux_x86_64.whl</a>")
    handler = partial(SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
    server.shutdown()
    server.server_close()


def dry_run(tmp_path: Path, *, gpu: bool, index: str, **env: str) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "nvidia-smi"
    stub.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100'\nexit 0\n" if gpu else "#!/bin/sh\nexit 9\n")
    stub.chmod(0o755)
    full = {k: v for k, v in os.environ.items() if k not in ("TORCH_INDEX_URL", "CANOPY_TORCH")}
    full.update(PATH=f"{bin_dir}:{os.environ['PATH']}", CPU_TORCH_INDEX=index, **env)
    out = subprocess.run(["bash", str(SETUP), "--dry-run"], env=full, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_script_parses() -> None:
    assert subprocess.run(["bash", "-n", str(SETUP)], capture_output=True).returncode == 0


def test_no_gpu_and_a_cpu_index_that_answers_installs_the_cpu_wheel(tmp_path: Path, cpu_index: str) -> None:
    assert dry_run(tmp_path, gpu=False, index=cpu_index) == f"torch: pip install torch==2.13.0 --index-url {cpu_index}"


def test_no_gpu_and_no_cpu_index_falls_back_to_the_configured_index(tmp_path: Path) -> None:
    assert dry_run(tmp_path, gpu=False, index=CLOSED) == "torch: pip install torch==2.13.0 (configured package index)"


def test_gpu_machine_keeps_the_configured_index_unless_cpu_is_asked(tmp_path: Path, cpu_index: str) -> None:
    assert dry_run(tmp_path, gpu=True, index=cpu_index) == "torch: pip install torch==2.13.0 (configured package index)"
    assert dry_run(tmp_path, gpu=True, index=cpu_index, CANOPY_TORCH="cpu").endswith(f"--index-url {cpu_index}")


def test_overrides_win(tmp_path: Path, cpu_index: str) -> None:
    forced = "http://mirror.example/simple"
    assert dry_run(tmp_path, gpu=False, index=cpu_index, TORCH_INDEX_URL=forced).endswith(f"--index-url {forced}")
    assert dry_run(tmp_path, gpu=False, index=cpu_index, CANOPY_TORCH="skip") == "torch: skipped (CANOPY_TORCH=skip)"
