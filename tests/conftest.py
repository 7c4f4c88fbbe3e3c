"""Shared fixtures: the corpus, prepared weights, and a real server on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.live import LiveServer, free_port  # noqa: F401 (re-exported for tests)
from models import paths

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("BRIEF_CORPUS", ROOT.parent / "shared" / "corpus"))


def weights_ready() -> bool:
    onnx = paths.encoder_onnx_path()
    return paths.llm_gguf_path().exists() and (onnx / paths.ONNX_FP32).exists()


def run_benchmark(name: str, *args: object, timeout: float = 600) -> str:
    """``python -m benchmarks.<name> *args`` from the repo root, as a user runs it; its stdout.
    A non-zero exit fails the test with the tail of the benchmark's stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


requires_weights = pytest.mark.skipif(
    not weights_ready(), reason="weights not prepared: run `make models` (brief prepare-models)"
)


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.exists():
        pytest.skip(f"corpus not found at {CORPUS}")
    return CORPUS


@pytest.fixture(scope="session")
def live_server() -> Iterator[LiveServer]:
    """One real server with the real default models, shared by the integration tests."""
    if not weights_ready():
        if os.environ.get("CI"):  # CI prepares the weights first; a skip there would hide a bug
            pytest.fail("weights not prepared although CI ran `make models`")
        pytest.skip("weights not prepared: run `make models`")
    # Smaller generation budgets than the defaults keep a CPU test run short; the code paths
    # are the same (the map-reduce path has its own server in test_brief_sdk.py).
    server = LiveServer({"BRIEF_AGENT_SPLIT_TOKENS": "1000", "BRIEF_AGENT_ANSWER_TOKENS": "160"})
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def client(live_server: LiveServer):
    import openai

    return openai.OpenAI(base_url=live_server.base_url + "/v1", api_key="unused", max_retries=0)
