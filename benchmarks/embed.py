"""Embedding throughput: raw onnxruntime vs the served path (dynamic batcher), fp32 vs int8.

``python -m benchmarks.embed [--quick]``. For each model (fp32, int8) and on the same real
paragraphs (BEIR SciFact abstracts), side by side in one run:

* raw: the model called directly on batches of exactly the shapes the batcher would form
  (sorted by length, same size and token budget; ``plan_batches``), tokenisation included;
* served: the same texts through ``BatchedEncoder``, one single-text caller per paragraph, all
  concurrent (``asyncio.gather``), as the HTTP server sees them.

Reported: texts/s and tokens/s; served/raw (the batcher's overhead, target >= 0.9); int8/fp32
speed-up; cosine of int8 vs fp32 embeddings (mean, min); served vs raw embeddings (must agree).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

import numpy as np

from benchmarks import common
from engine.encoder.batcher import BatchedEncoder, plan_batches
from models import paths

SCIFACT = Path("retrieval") / "beir_scifact" / "corpus.jsonl"


def default_corpus() -> Path:
    """SciFact under ``$BRIEF_CORPUS`` (as the tests use) or ``../shared/corpus``."""
    root = (
        os.environ.get("BRIEF_CORPUS") or Path(__file__).resolve().parents[2] / "shared" / "corpus"
    )
    return Path(root) / SCIFACT


def load_texts(n: int, corpus: Path | None = None, max_words: int | None = None) -> list[str]:
    """The first ``n`` non-empty SciFact abstracts (deterministic), optionally cut to
    ``max_words`` words (the quick mode uses paragraph-sized pieces to stay under a minute)."""
    texts = []
    with (corpus or default_corpus()).open() as fh:
        for line in fh:
            text = json.loads(line).get("text", "").strip()
            if max_words:
                text = " ".join(text.split()[:max_words])
            if text:
                texts.append(text)
            if len(texts) == n:
                break
    return texts


def run_raw(model, texts: list[str], batch_size: int, budget: int) -> tuple[float, np.ndarray]:
    out = np.zeros((len(texts), model.dimension), dtype=np.float32)
    with common.stopwatch() as elapsed:
        tokens = model.tokenize(texts)
        for idx in plan_batches([len(t) for t in tokens], batch_size, budget):
            out[idx] = model.embed_tokens([tokens[i] for i in idx])
    return elapsed(), out


async def run_served(model, texts: list[str], batch_size: int, budget: int, wait_ms: float):
    encoder = BatchedEncoder(
        model, max_batch_size=batch_size, max_batch_tokens=budget, max_wait_ms=wait_ms,
        max_queue=max(2048, len(texts)),
    )  # fmt: skip
    await encoder.start()
    try:
        with common.stopwatch() as elapsed:
            rows = await asyncio.gather(*(encoder.embed([t]) for t in texts))
        return elapsed(), np.concatenate(rows), encoder.stats
    finally:
        await encoder.close()


def bench_model(model, texts, args, reps: int) -> dict:
    """Alternate raw and served ``reps`` times; keep each side's best (least disturbed) run."""
    raw_s, served_s = [], []
    raw_vecs = served_vecs = stats = None
    for rep in range(reps):
        order = ("raw", "served") if rep % 2 == 0 else ("served", "raw")
        for side in order:
            if side == "raw":
                seconds, raw_vecs = run_raw(model, texts, args.batch_size, args.max_tokens)
                raw_s.append(seconds)
            else:
                seconds, served_vecs, stats = asyncio.run(
                    run_served(model, texts, args.batch_size, args.max_tokens, args.wait_ms)
                )
                served_s.append(seconds)
    return {
        "raw_s": min(raw_s),
        "served_s": min(served_s),
        "raw_runs_s": raw_s,
        "served_runs_s": served_s,
        "batches": stats.batches,
        "largest_batch": stats.largest_batch,
        "served_vs_raw_min_cos": float(np.min(np.sum(raw_vecs * served_vecs, axis=1))),
        "vectors": raw_vecs,
    }


def plot(data: dict, out_dir: Path | None = None) -> Path:
    """tokens/s of raw vs served for fp32 and int8 (re-plottable from the JSON alone)."""
    res, cfg, m = data["results"], data["config"], data["machine"]
    series = {
        label: [res[v]["tokens"] / res[v][key] for v in ("fp32", "int8")]
        for label, key in (("raw onnxruntime", "raw_s"), ("served (batcher)", "served_s"))
    }
    s = data["summary"]
    return common.bar_chart(
        "embed",
        ["fp32", "int8"],
        series,
        ylabel="tokens / s",
        title=f"all-mpnet-base-v2 ONNX: {cfg['texts']} SciFact texts, {res['fp32']['tokens']} tokens",
        out_dir=out_dir,
        note=f"{m['cpu']} x{m['cpus']}, best of {cfg['reps']}; served/raw "
        f"{s['served_over_raw_fp32']:.2f} (fp32) {s['served_over_raw_int8']:.2f} (int8); "
        f"int8/fp32 {s['int8_speedup_served']:.2f}x; cos int8~fp32 {s['cosine_int8_vs_fp32_mean']:.3f}",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.embed", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="few texts, one repetition (~1 min)")
    parser.add_argument("--texts", type=int, default=None, help="number of paragraphs")
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--max-words", type=int, default=None, help="cut texts (quick: 60)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=8192, help="batch token budget")
    parser.add_argument("--wait-ms", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    parser.add_argument("--corpus", type=Path, default=None, help="a BEIR corpus.jsonl")
    args = parser.parse_args(argv)
    n_texts = args.texts or (24 if args.quick else 64)
    reps = args.reps or (1 if args.quick else 2)

    onnx_dir = paths.encoder_onnx_path(args.model_dir)
    if not (onnx_dir / paths.ONNX_INT8).is_file():
        print(f"no prepared encoder at {onnx_dir}; run `brief prepare-models`", file=sys.stderr)
        return 2
    from engine.encoder.onnx import OnnxEmbeddingModel

    max_words = args.max_words or (60 if args.quick else None)
    texts = load_texts(n_texts, args.corpus, max_words)
    rows, results = [], {}
    for variant, quantized in (("fp32", False), ("int8", True)):
        model = OnnxEmbeddingModel(onnx_dir, quantized=quantized, threads=args.threads)
        model.warmup()
        n_tokens = sum(len(t) for t in model.tokenize(texts))
        r = bench_model(model, texts, args, reps)
        r["tokens"] = n_tokens
        results[variant] = r
        for side in ("raw", "served"):
            s = r[f"{side}_s"]
            ratio = r["raw_s"] / r["served_s"] if side == "served" else 1.0
            rows.append(
                [variant, side, len(texts), n_tokens, s, len(texts) / s, n_tokens / s, ratio]
            )
        del model

    fp32, int8 = results["fp32"], results["int8"]
    cos = np.sum(fp32.pop("vectors") * int8.pop("vectors"), axis=1)
    summary = {
        "served_over_raw_fp32": fp32["raw_s"] / fp32["served_s"],
        "served_over_raw_int8": int8["raw_s"] / int8["served_s"],
        "int8_speedup_raw": fp32["raw_s"] / int8["raw_s"],
        "int8_speedup_served": fp32["served_s"] / int8["served_s"],
        "cosine_int8_vs_fp32_mean": float(cos.mean()),
        "cosine_int8_vs_fp32_min": float(cos.min()),
        "served_vs_raw_min_cos": min(fp32["served_vs_raw_min_cos"], int8["served_vs_raw_min_cos"]),
    }
    columns = ["model", "path", "texts", "tokens", "seconds", "texts/s", "tokens/s", "served/raw"]
    common.print_table(
        f"embedding throughput ({len(texts)} SciFact abstracts, best of {reps})", columns, rows
    )
    common.print_table(
        "summary", ["metric", "value"], [[k, v] for k, v in summary.items()], digits=4
    )

    data = {
        "benchmark": "embed",
        "quick": args.quick,
        "machine": common.machine(),
        "config": {
            "texts": len(texts),
            "reps": reps,
            "max_words": max_words,
            "batch_size": args.batch_size,
            "max_batch_tokens": args.max_tokens,
            "max_wait_ms": args.wait_ms,
            "threads": args.threads,
            "corpus": str(args.corpus or default_corpus()),
        },
        "columns": columns,
        "rows": rows,
        "results": results,
        "summary": summary,
    }
    json_path = common.write_json("embed", data, args.out)
    png_path = plot(data, args.out)
    print(f"wrote {json_path} and {png_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
