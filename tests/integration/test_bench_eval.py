"""The evaluation harness end to end: ``benchmarks.eval --quick`` against the shared real server
(same env as the ``live_server`` fixture), report written into a tmp dir; and the gold quotes of
the shipped cases checked against what our ingestion extracts."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import eval as harness
from benchmarks.cases_check import check, load_cases

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def numbers(obj):
    """Every float/int inside a nested structure."""
    if isinstance(obj, dict):
        for v in obj.values():
            yield from numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from numbers(v)
    elif isinstance(obj, int | float) and not isinstance(obj, bool):
        yield obj


def test_quick_eval_writes_a_sane_report(live_server, corpus, tmp_path):
    report = harness.main(
        [
            "--quick",
            "--server",
            live_server.base_url,
            "--corpus",
            str(corpus),
            "--out",
            str(tmp_path),
            "--no-chart",
        ]
    )
    path = tmp_path / "eval_quick.json"
    assert path.exists() and json.loads(path.read_text())["cases"] == report["cases"]
    cases = load_cases(harness.CASES_DIR / "quick.jsonl")
    rows = report["cases"]
    assert [r["id"] for r in rows] == [c["id"] for c in cases]
    assert not [r["error"] for r in rows if r.get("error")]
    for row in rows:
        assert row["answer"].strip()
        for name, value in row["metrics"].items():
            if value is not None and not name.startswith("n_"):
                assert 0.0 <= value <= 1.0, (row["id"], name, value)
        assert row["timings"]["total_s"] > 0
    overall = report["aggregates"]["overall"]
    assert overall["n"] == len(cases) and report["aggregates"]["errors"] == 0
    for name in ("action_accuracy", "resource_recall", "recall@5", "keyword_accuracy"):
        assert overall[name] is not None and 0.0 <= overall[name] <= 1.0, name
    assert all(math.isfinite(x) for x in numbers(report["aggregates"]))


def test_shipped_case_quotes_are_in_extracted_paragraphs(corpus):
    for name in ("quick.jsonl", "dev.jsonl"):
        report = check(load_cases(harness.CASES_DIR / name), corpus)
        assert not {cid: e for cid, e in report.items() if e}, name
