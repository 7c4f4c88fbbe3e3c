"""The ingestion benchmark's quick mode runs end to end and reports sane values (no timing
thresholds: speed targets live in the benchmark's table, not in tests)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_benchmark, weights_ready

pytestmark = pytest.mark.slow


@pytest.mark.skipif(not weights_ready(), reason="weights not prepared")
def test_ingest_benchmark_quick(tmp_path):
    stdout = run_benchmark("ingest", "--quick", "--out", tmp_path, timeout=1200)
    assert "time to queryable" in stdout
    report = json.loads((tmp_path / "ingest_quick.json").read_text())
    s = report["summary"]
    assert s["completed"] == s["documents"] >= 6 and not s["failed"]
    q, c = s["time_to_queryable"], s["time_to_completed"]
    assert 0 < q["50"] <= q["90"] <= q["99"] and q["90"] <= c["90"]
    ratio = s["pdf_parse_vs_raw_pypdfium2"]["total_ratio"]
    assert ratio is not None and ratio > 0.5
    assert {d["kind"] for d in report["documents"]} >= {"pdf", "docx", "pptx", "html", "md"}
    assert (tmp_path / "ingest_quick.png").stat().st_size > 1000
