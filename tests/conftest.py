"""Shared fixtures: the corpus, prepared weights, and a real server on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from models import paths

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("BRIEF_CORPUS", ROOT.parent / "shared" / "corpus"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def weights_ready() -> bool:
    onnx = paths.encoder_onnx_path()
    return paths.llm_gguf_path().exists() and (onnx / paths.ONNX_FP32).exists()


requires_weights = pytest.mark.skipif(
    not weights_ready(), reason="weights not prepared: run `make models` (brief prepare-models)"
)


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.exists():
        pytest.skip(f"corpus not found at {CORPUS}")
    return CORPUS


class LiveServer:
    """A real `python -m server` process on loopback (the same entry point as `make serve`)."""

    def __init__(self, env: dict[str, str] | None = None, log_path: Path | None = None):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path or Path(f"/tmp/brief-test-server-{self.port}.log")
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 180.0) -> LiveServer:
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server", "--port", str(self.port), "--log-level", "warning"],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log()}")
            try:
                if httpx.get(self.base_url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"server did not become healthy in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture(scope="session")
def live_server() -> Iterator[LiveServer]:
    """One real server with the real default models, shared by the integration tests."""
    if not weights_ready():
        pytest.skip("weights not prepared: run `make models`")
    server = LiveServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def client(live_server: LiveServer):
    import openai

    return openai.OpenAI(base_url=live_server.base_url + "/v1", api_key="unused", max_retries=0)
