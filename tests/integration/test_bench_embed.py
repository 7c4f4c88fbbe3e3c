"""``python -m benchmarks.embed --quick`` runs end to end and writes sane results (no speed limits)."""

from __future__ import annotations

import json

import pytest

from models import paths
from tests.conftest import run_benchmark

pytestmark = pytest.mark.slow


def test_quick_embed_benchmark(tmp_path):
    if not (paths.encoder_onnx_path() / paths.ONNX_INT8).is_file():
        pytest.skip("encoder weights not prepared: run `brief prepare-models`")
    stdout = run_benchmark("embed", "--quick", "--texts", 12, "--out", tmp_path, timeout=300)
    assert "served/raw" in stdout
    data = json.loads((tmp_path / "embed.json").read_text())
    assert (tmp_path / "embed.png").stat().st_size > 1000

    assert data["config"]["texts"] == 12
    for variant in ("fp32", "int8"):
        r = data["results"][variant]
        assert r["tokens"] > 12 * 10
        assert 0 < r["raw_s"] < 300 and 0 < r["served_s"] < 300
        assert 1 <= r["batches"] <= 12
        assert r["served_vs_raw_min_cos"] > 0.9999  # the batcher returns each caller its own row
    s = data["summary"]
    assert 0 < s["served_over_raw_fp32"] < 10 and 0 < s["int8_speedup_raw"] < 10
    assert 0.95 < s["cosine_int8_vs_fp32_mean"] <= 1.0001
    assert 0.9 < s["cosine_int8_vs_fp32_min"] <= s["cosine_int8_vs_fp32_mean"]
