"""Online ingestion through the real server: time-to-queryable and time-to-completed.

``python -m benchmarks.ingest [--quick] [--server URL] [--financebench N]``

Each document is uploaded alone (files.create → vector_stores.files.create) and polled every
20 ms. Per document it records the client-side time to *queryable* (BM25 + READ ready) and to
*completed* (every search chunk embedded), and the server's own stage times (parse, chunk, index,
embed). Beside it, in the same process and on the same PDFs, it times our PDF parser against raw
pypdfium2 text extraction: that ratio is the comparison that survives a noisy machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from benchmarks.common import bar_chart, machine, print_table, write_json
from benchmarks.live import LiveServer

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
KINDS = {".pdf", ".docx", ".pptx", ".html", ".md"}
STRESS = {"DA-619p.pdf", "pdf2image-memory-error-test-400p.pdf", "handbook-872p.docx"}
QUICK = [
    "documents/docling/pdf/multi_page.pdf",
    "documents/unstructured/pdf/reliance.pdf",
    "documents/docling/docx/word_sample.docx",
    "documents/docling/pptx/powerpoint_sample.pptx",
    "documents/unstructured/html/example-10k-1p.html",
    "documents/docling/md/wiki.md",
]


def pick_documents(corpus: Path, quick: bool, financebench: int) -> list[Path]:
    if quick:
        docs = [corpus / rel for rel in QUICK if (corpus / rel).exists()]
    else:
        docs = sorted(
            p
            for p in (corpus / "documents").rglob("*")
            if p.suffix.lower() in KINDS and p.name not in STRESS and "groundtruth" not in p.parts
        )
    pdfs = sorted((corpus / "qa/financebench/pdfs").glob("*.pdf"), key=lambda p: p.stat().st_size)
    if pdfs and financebench:
        step = max(len(pdfs) // financebench, 1)
        docs += pdfs[::step][:financebench]
    return docs


def ingest_one(client, vs_id: str, path: Path, timeout: float, corpus: Path) -> dict:
    t0 = time.perf_counter()
    with path.open("rb") as fh:
        f = client.files.create(file=(path.name, fh), purpose="assistants")
    t_uploaded = time.perf_counter() - t0
    client.vector_stores.files.create(vector_store_id=vs_id, file_id=f.id)
    queryable = completed = None
    vf = None
    while time.perf_counter() - t0 < timeout:
        vf = client.vector_stores.files.retrieve(vector_store_id=vs_id, file_id=f.id)
        stages = (vf.model_extra or {}).get("stages") or {}
        now = time.perf_counter() - t0
        if queryable is None and ("queryable_s" in stages or vf.status != "in_progress"):
            queryable = now
        if vf.status != "in_progress":
            completed = now
            break
        time.sleep(0.02)
    extra = vf.model_extra or {}
    doc = extra.get("document") or {}
    return {
        "file": str(path.relative_to(corpus)) if path.is_relative_to(corpus) else path.name,
        "kind": doc.get("kind") or path.suffix[1:],
        "bytes": path.stat().st_size,
        "pages": doc.get("pages"),
        "paragraphs": doc.get("paragraphs"),
        "status": vf.status,
        "error": vf.last_error.message if vf.last_error else None,
        "upload_s": t_uploaded,
        "queryable_s": queryable,
        "completed_s": completed,
        "server_stages": extra.get("stages") or {},
    }


def parse_ratio(pdfs: list[Path], repeats: int) -> list[dict]:
    """Our PDF parse (pypdfium2 fast path + paragraph rebuilding) vs raw pypdfium2 text."""
    import pypdfium2 as pdfium

    from engine.ingest.convert import parse

    def raw(data: bytes) -> int:
        pdf = pdfium.PdfDocument(data)
        n = 0
        for i in range(len(pdf)):
            page = pdf[i]
            tp = page.get_textpage()
            n += len(tp.get_text_range())
            tp.close()
            page.close()
        pdf.close()
        return n

    rows = []
    for p in pdfs:
        data = p.read_bytes()
        try:
            parse(data, p.name, kind="pdf")
        except Exception:
            continue  # encrypted / no text layer: nothing to compare
        t_raw, t_ours = [], []
        for _ in range(repeats):  # interleaved, so noise hits both sides alike
            t = time.perf_counter()
            raw(data)
            t_raw.append(time.perf_counter() - t)
            t = time.perf_counter()
            doc = parse(data, p.name, kind="pdf")
            t_ours.append(time.perf_counter() - t)
        rows.append(
            {
                "file": p.name,
                "pages": doc.pages,
                "raw_s": min(t_raw),
                "ours_s": min(t_ours),
                "ratio": min(t_ours) / max(min(t_raw), 1e-9),
            }
        )
    return rows


def pct(values: list[float], q: float) -> float:
    vals = [v for v in values if v is not None]
    return float(np.percentile(vals, q)) if vals else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a handful of documents (tests)")
    ap.add_argument("--server", help="use this running server instead of starting one")
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--financebench", type=int, default=None, help="FinanceBench PDFs to add")
    ap.add_argument("--timeout", type=float, default=900.0, help="per-document completion wait")
    ap.add_argument("--out", type=Path, default=None, help="results folder")
    args = ap.parse_args(argv)
    import openai

    fb = args.financebench if args.financebench is not None else (1 if args.quick else 6)
    docs = pick_documents(args.corpus, args.quick, fb)
    # Descriptions use the LLM in the background; they are timed but are not part of completion.
    server = None if args.server else LiveServer({"BRIEF_DESCRIBE_DOCUMENTS": "false"}).start()
    base = args.server or server.base_url
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    rows = []
    try:
        for path in docs:
            vs = client.vector_stores.create(name=f"bench {path.name}")
            rows.append(ingest_one(client, vs.id, path, args.timeout, args.corpus))
            client.vector_stores.delete(vs.id)
    finally:
        if server:
            server.stop()
    pdfs = [d for d in docs if d.suffix.lower() == ".pdf"]
    ratios = parse_ratio(pdfs, repeats=1 if args.quick else 3)
    report(rows, ratios, args)
    return 0


def report(rows: list[dict], ratios: list[dict], args) -> None:
    ok = [r for r in rows if r["status"] == "completed"]
    small = [r for r in ok if (r["pages"] or 1) <= 20]
    q = [r["queryable_s"] for r in ok]
    c = [r["completed_s"] for r in ok]
    c20 = [r["completed_s"] for r in small]
    stage_names = ["parsed_s", "chunked_s", "queryable_s", "embedded_s"]
    summary = {
        "documents": len(rows),
        "completed": len(ok),
        "failed": [r["file"] for r in rows if r["status"] != "completed"],
        "time_to_queryable": {p: pct(q, p) for p in (50, 90, 99)},
        "time_to_completed": {p: pct(c, p) for p in (50, 90, 99)},
        "time_to_completed_le20pages": {p: pct(c20, p) for p in (50, 90, 99)},
        "server_stage": {
            name: {p: pct([r["server_stages"].get(name) for r in ok], p) for p in (50, 90, 99)}
            for name in stage_names
        },
        "pages_per_s": sum(r["pages"] or 0 for r in ok)
        / max(sum(r["server_stages"].get("parsed_s", 0) for r in ok if r["pages"]), 1e-9),
        "pdf_parse_vs_raw_pypdfium2": {
            "median_ratio": statistics.median([x["ratio"] for x in ratios]) if ratios else None,
            "total_ratio": sum(x["ours_s"] for x in ratios)
            / max(sum(x["raw_s"] for x in ratios), 1e-9)
            if ratios
            else None,
        },
    }
    print_table(
        "Ingestion through the server (seconds)",
        ["metric", "P50", "P90", "P99"],
        [
            ["time to queryable (client)", *summary["time_to_queryable"].values()],
            ["time to completed (client)", *summary["time_to_completed"].values()],
            ["time to completed, <=20 pages", *summary["time_to_completed_le20pages"].values()],
            *[[f"server: {n}", *summary["server_stage"][n].values()] for n in stage_names],
        ],
        digits=3,
    )
    print_table(
        "Per document",
        ["file", "kind", "pages", "paras", "queryable s", "completed s", "status"],
        [
            [
                r["file"][-45:],
                r["kind"],
                r["pages"] or "-",
                r["paragraphs"] or 0,
                r["queryable_s"] or float("nan"),
                r["completed_s"] or float("nan"),
                r["status"],
            ]
            for r in rows
        ],
        digits=3,
    )
    print_table(
        "PDF parse: ours vs raw pypdfium2 text (same files, same process)",
        ["file", "pages", "raw s", "ours s", "ratio"],
        [[x["file"][-40:], x["pages"], x["raw_s"], x["ours_s"], x["ratio"]] for x in ratios],
        digits=3,
    )
    pr = summary["pdf_parse_vs_raw_pypdfium2"]
    print(
        f"pages/s (parse): {summary['pages_per_s']:.1f}   PDF parse ratio: median "
        f"{pr['median_ratio']}, total {pr['total_ratio']}"
    )
    name = "ingest_quick" if args.quick else "ingest"
    write_json(
        name,
        {"machine": machine(), "summary": summary, "documents": rows, "pdf_parse": ratios},
        args.out,
    )
    bar_chart(
        name,
        ["P50", "P90", "P99"],
        {
            "queryable": list(summary["time_to_queryable"].values()),
            "completed": list(summary["time_to_completed"].values()),
            "completed <=20p": list(summary["time_to_completed_le20pages"].values()),
        },
        ylabel="seconds",
        title=f"Ingestion latency, {len(ok)} documents",
        out_dir=args.out,
        note=f"PDF parse / raw pypdfium2: {pr['total_ratio']:.2f}x" if ratios else None,
    )


if __name__ == "__main__":
    raise SystemExit(main())
