"""Evidence-page retrieval on FinanceBench: long real filings (10-K, 10-Q, 8-K, earnings).

``python -m benchmarks.financebench [--quick] [--limit N] [--max-docs N] [--budget SECONDS]``

For every question whose PDF is in ``qa/financebench/pdfs``, the filing goes through our own
ingestion (pypdfium2 path → paragraphs with pages → small/large chunks, token budgets counted by
the encoder's untruncated tokenizer, as the server does) into a ``SessionIndex`` holding that one
document, i.e. a user who uploads the filing and asks the question. A question scores a hit at k
when one of its evidence pages (0-indexed in the dataset; ours are 1-based) is among the pages
spanned by the top-k small chunks. Methods: BM25, dense (int8 MPNet, the served model) and
hybrid with each fusion, at the engine's defaults.

Why a budget: embedding a whole 10-K costs minutes on a 2-core CPU. Documents are taken smallest
first (by pages); BM25 covers every question, dense and hybrid cover the documents whose
uncached embedding fits ``--budget`` seconds (vectors are cached in ``benchmarks.embcache``, so a
later run goes further). Each method reports its own n, and BM25 is also scored on the dense
subset so the comparison is like for like.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

from benchmarks import common, embcache
from engine.index.dense import DenseIndex
from engine.index.hybrid import SessionIndex
from engine.ingest.chunking import build_chunks
from engine.ingest.convert import DocumentParser
from models import paths

KS = (1, 5, 10)
VARIANT = "int8"  # the served encoder
LABELS = {  # plot order: BM25 on the dense subset stands next to the dense methods
    "bm25": "BM25\n(all)",
    "bm25_on_dense_subset": "BM25\n(dense subset)",
    "dense": "dense\nint8",
    "hybrid_rrf": "hybrid\nRRF",
    "hybrid_convex": "hybrid\nconvex",
}
FB = Path("qa") / "financebench"


def default_corpus() -> Path:
    return Path(__file__).resolve().parents[2] / "shared" / "corpus"


def load_questions(corpus: Path) -> tuple[list[dict], dict[str, int]]:
    """Questions whose evidence documents are all present, and each document's page count."""
    import pypdfium2 as pdfium

    root = corpus / FB
    present = {p.stem for p in (root / "pdfs").glob("*.pdf")}
    questions = []
    with (root / "financebench_open_source.jsonl").open() as fh:
        for line in fh:
            q = json.loads(line)
            if q["doc_name"] in present and all(e["doc_name"] in present for e in q["evidence"]):
                questions.append(q)
    pages = {}
    for name in sorted({q["doc_name"] for q in questions}):
        pdf = pdfium.PdfDocument(str(root / "pdfs" / f"{name}.pdf"))
        pages[name] = len(pdf)
        pdf.close()
    return questions, pages


def token_counter():
    """Untruncated MPNet token counts for chunk budgets (server.context.token_counter)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(paths.encoder_onnx_path() / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()

    def count_batch(texts: list[str]) -> list[int]:
        return [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]

    return (lambda text: count_batch([text])[0]), count_batch


def chunk_pages(doc, chunk) -> set[int]:
    return {p.page for p in doc.paragraphs[chunk.start : chunk.end + 1] if p.page is not None}


def score(question: dict, doc, ranked: list, doc_name: str) -> dict:
    """First rank (1-based) whose chunk covers an evidence page, and the pages retrieved."""
    evidence = {
        e["evidence_page_num"] + 1 for e in question["evidence"] if e["doc_name"] == doc_name
    }
    first = None
    pages = []
    for rank, chunk in enumerate(ranked, 1):
        cp = chunk_pages(doc, chunk)
        pages.append(sorted(cp))
        if first is None and cp & evidence:
            first = rank
    return {"first_hit": first, "evidence_pages": sorted(evidence), "top_pages": pages[:10]}


def summarize(rows: list[dict]) -> dict:
    n = len(rows)
    out = {"n": n, "docs": len({r["doc"] for r in rows})}
    for k in KS:
        out[f"hit@{k}"] = sum(1 for r in rows if r["first_hit"] and r["first_hit"] <= k) / max(n, 1)
    out["mrr@10"] = sum(1 / r["first_hit"] for r in rows if r["first_hit"]) / max(n, 1)
    return out


def plot(data: dict, out_dir: Path | None, name: str) -> Path:
    res = data["summary"]
    groups = [m for m in LABELS if res.get(m, {}).get("n")]
    series = {f"hit@{k}": [100 * res[m][f"hit@{k}"] for m in groups] for k in KS}
    labels = [f"{LABELS[m]}\nn={res[m]['n']}, {res[m]['docs']} docs" for m in groups]
    return common.bar_chart(
        name,
        labels,
        series,
        ylabel="% questions with an evidence page in top k",
        title="FinanceBench: evidence page among top-k small chunks",
        out_dir=out_dir,
        note=f"{data['machine']['cpu']} x{data['machine']['cpus']}; encoder {VARIANT}",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.financebench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the 3 smallest documents only")
    parser.add_argument("--corpus", type=Path, default=default_corpus())
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    parser.add_argument("--limit", type=int, default=None, help="at most N questions")
    parser.add_argument("--max-docs", type=int, default=None, help="the N smallest documents")
    parser.add_argument(
        "--budget", type=float, default=900.0, help="seconds of uncached embedding for dense"
    )
    parser.add_argument("--dense-max-docs", type=int, default=None, help="cap dense documents")
    parser.add_argument("--tokens-per-s", type=float, default=200.0, help="first speed guess")
    args = parser.parse_args(argv)
    max_docs = args.max_docs or (3 if args.quick else None)

    questions, pages = load_questions(args.corpus)
    order = sorted(pages, key=lambda d: (pages[d], d))[:max_docs]
    rank = {d: i for i, d in enumerate(order)}
    questions = sorted(
        (q for q in questions if q["doc_name"] in rank),
        key=lambda q: (rank[q["doc_name"]], q["financebench_id"]),
    )[: args.limit]
    by_doc: dict[str, list[dict]] = defaultdict(list)
    for q in questions:
        by_doc[q["doc_name"]].append(q)

    count, count_batch = token_counter()
    parser_ = DocumentParser(pdf_backend="pypdfium2")
    cache = embcache.EmbeddingCache(embcache.model_key(VARIANT))
    rows: dict[str, list[dict]] = {m: [] for m in LABELS}
    docs_info, speed = [], args.tokens_per_s
    spent = 0.0
    for name in order:
        if name not in by_doc:
            continue
        t0 = time.perf_counter()
        data = (args.corpus / FB / "pdfs" / f"{name}.pdf").read_bytes()
        doc = parser_.parse(data, f"{name}.pdf", kind="pdf")
        chunks = build_chunks(name, doc.paragraphs, count, count_batch=count_batch)
        index = SessionIndex()
        index.add_document(name, chunks)
        small = chunks["small"]
        info = {
            "doc": name,
            "pages": pages[name],
            "paragraphs": len(doc.paragraphs),
            "small_chunks": len(small),
            "small_tokens": sum(c.n_tokens for c in small),
            "parse_index_s": round(time.perf_counter() - t0, 2),
            "questions": len(by_doc[name]),
        }
        # Dense when the uncached part fits the remaining budget (smallest documents first).
        texts = [c.text for c in small]
        have = cache.get_many(texts)
        todo_tokens = sum(c.n_tokens for c in small if embcache.text_key(c.text) not in have)
        n_dense = sum(1 for d in docs_info if d["dense"])
        fits = todo_tokens / speed <= args.budget - spent
        info["dense"] = bool(
            fits and (args.dense_max_docs is None or n_dense < args.dense_max_docs)
        )
        qvecs = dense = None
        if info["dense"]:
            t1 = time.perf_counter()
            vecs = embcache.embed_texts(texts, VARIANT, progress=False)
            took = time.perf_counter() - t1
            if todo_tokens > 2000:  # learn the real speed from sizeable work only
                speed = todo_tokens / took
            spent += took if todo_tokens else 0.0
            info["embed_s"], info["embedded_tokens"] = round(took, 2), todo_tokens
            index.add_vectors(small, vecs)
            dense = DenseIndex(vecs.shape[1], backend="exact")
            dense.add(range(len(small)), vecs)
            qvecs = embcache.embed_texts([q["question"] for q in by_doc[name]], VARIANT, False)
        for i, q in enumerate(by_doc[name]):
            base = {"id": q["financebench_id"], "doc": name, "type": q["question_type"]}
            hits = index.search(q["question"], None, k=10)
            bm = {**base, **score(q, doc, [h.chunk for h in hits], name)}
            rows["bm25"].append(bm)
            if dense is None:
                continue
            rows["bm25_on_dense_subset"].append(bm)
            labels, _ = dense.search(qvecs[i], 10)
            rows["dense"].append({**base, **score(q, doc, [small[lb] for lb in labels], name)})
            for fusion in ("rrf", "convex"):
                hits = index.search(q["question"], qvecs[i], k=10, fusion=fusion)
                ranked = [h.chunk for h in hits]
                rows[f"hybrid_{fusion}"].append({**base, **score(q, doc, ranked, name)})
        docs_info.append(info)
        print(
            f"{name}: {info['pages']} pages, {len(small)} chunks, "
            f"{len(by_doc[name])} questions, dense={info['dense']}",
            flush=True,
        )

    summary = {m: summarize(r) for m, r in rows.items()}
    columns = ["method", "questions", "documents", "hit@1", "hit@5", "hit@10", "MRR@10"]
    table = [
        [m, s["n"], s["docs"], s["hit@1"], s["hit@5"], s["hit@10"], s["mrr@10"]]
        for m, s in summary.items()
    ]
    common.print_table("FinanceBench evidence-page retrieval", columns, table, digits=3)
    out = {
        "benchmark": "financebench",
        "quick": args.quick,
        "machine": common.machine(),
        "config": {
            "corpus": str(args.corpus),
            "questions": len(questions),
            "documents": len(by_doc),
            "budget_s": args.budget,
            "embedding_spent_s": round(spent, 1),
            "encoder": VARIANT,
            "level": "small",
            "fusion": "engine defaults (rrf k=60, convex alpha=0.5)",
            "order": "documents by page count, smallest first",
        },
        "columns": columns,
        "rows": table,
        "summary": summary,
        "documents": docs_info,
        "per_question": rows,
    }
    name = "financebench_quick" if args.quick else "financebench"
    json_path = common.write_json(name, out, args.out)
    png_path = plot(out, args.out, name)
    print(f"wrote {json_path} and {png_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
