"""Check evaluation cases against the text our own ingestion extracts.

``python -m benchmarks.cases_check benchmarks/cases/dev.jsonl --corpus ../shared/corpus``

A gold quote only measures retrieval if the server can return it: each must appear (after the
whitespace normalisation the harness uses) inside one paragraph that ``engine.ingest`` extracts
from the document, on the stated page (``null`` = any page / no pages). The schema is checked
too, since other people's case files share it. Exit status 1 when any case fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console

from benchmarks.eval_metrics import KINDS, contains

FIELDS = {
    "id": str,
    "kind": str,
    "documents": list,
    "turns": list,
    "question": str,
    "gold_operations": list,
    "gold_evidence": list,
    "answer": str,
    "answer_keywords": list,
}
ROOT = Path(__file__).resolve().parents[1]


def load_cases(path: Path) -> list[dict[str, Any]]:
    cases = []
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                cases.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not JSON: {exc}") from exc
    return cases


def schema_errors(case: dict[str, Any]) -> list[str]:
    errors = [
        f"field '{k}' missing or not {t.__name__}"
        for k, t in FIELDS.items()
        if not isinstance(case.get(k), t)
    ]
    if errors:
        return errors
    if case["kind"] not in KINDS:
        errors.append(f"kind '{case['kind']}' not one of {KINDS}")
    docs = set(case["documents"])
    for op in case["gold_operations"]:
        if op.get("action") not in ("SEARCH", "READ") or op.get("document") not in docs:
            errors.append(f"bad gold operation {op}")
    for ev in case["gold_evidence"]:
        if ev.get("document") not in docs or not str(ev.get("quote", "")).strip():
            errors.append(f"bad gold evidence {ev}")
        elif ev.get("page") is not None and not isinstance(ev["page"], int):
            errors.append(f"page must be int or null: {ev}")
    if (case["kind"] == "unanswerable") != (not case["gold_evidence"]):
        errors.append("unanswerable cases (and only they) have no gold evidence")
    if case["kind"] == "multi_turn" and not case["turns"]:
        errors.append("a multi_turn case needs earlier turns")
    return errors


def check(cases: Iterable[dict[str, Any]], corpus: Path) -> dict[str, list[str]]:
    """Errors per case id (empty list: the case is fine). Each document is parsed once."""
    from engine.ingest.convert import DocumentParser

    parser = DocumentParser()
    parsed: dict[str, Any] = {}
    report: dict[str, list[str]] = {}
    for case in cases:
        cid = str(case.get("id"))
        errors = schema_errors(case)
        if cid in report:
            errors.append("duplicate id")
        if not errors:
            for doc in case["documents"]:
                if doc not in parsed:
                    path = corpus / doc
                    if not path.is_file():
                        parsed[doc] = None
                    else:
                        parsed[doc] = parser.parse(path.read_bytes(), path.name).paragraphs
                if parsed[doc] is None:
                    errors.append(f"document not found: {doc}")
            for ev in case["gold_evidence"] if not errors else []:
                paras = [p for p in parsed[ev["document"]] if contains(p.text, ev["quote"])]
                if not paras:
                    errors.append(
                        f"quote not in any paragraph of {ev['document']}: {ev['quote']!r}"
                    )
                elif ev["page"] is not None and all(p.page != ev["page"] for p in paras):
                    pages = sorted({p.page for p in paras}, key=str)
                    errors.append(
                        f"quote {ev['quote'][:40]!r} is on page(s) {pages}, not {ev['page']}"
                    )
        report[cid] = errors
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", type=Path, nargs="+")
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    args = ap.parse_args(argv)
    console = Console()
    failed = 0
    for path in args.cases:
        report = check(load_cases(path), args.corpus)
        for cid, errors in report.items():
            for e in errors:
                console.print(f"[red]FAIL[/red] {path.name} {cid}: {e}")
        bad = sum(bool(e) for e in report.values())
        failed += bad
        console.print(f"{path}: {len(report) - bad}/{len(report)} cases OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
