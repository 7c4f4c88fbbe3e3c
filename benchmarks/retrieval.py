"""Retrieval quality on BEIR SciFact: BM25, dense MPNet (fp32, int8) and hybrid fusion.

``python -m benchmarks.retrieval [--quick] [--corpus ../shared/corpus] [--out DIR]``

Everything runs through the engine's own index code, so the numbers describe what the server
does: ``BM25Index``, ``DenseIndex`` (exact below 20k vectors, as in a session) and the fusion
functions ``rrf`` / ``convex`` of ``engine.index.hybrid``, fed the candidate lists
``SessionIndex.search`` would fuse for k=100 (top 400 per side). A check runs
``SessionIndex.search`` itself on the same queries and reports how many rankings agree.

Fusion parameters (RRF k, convex alpha) are also tuned on the *train* qrels (809 claims over the
same corpus) and the tuned values are then scored on test; test is never used to choose them.
Embeddings come from ``benchmarks.embcache`` (fill it first with ``python -m benchmarks.embcache
--scifact``). ``--quick``: 20 test queries, their judged documents and 60 random distractors, texts
cut to 40 words, no tuning: a couple of minutes on 2 cores with an empty cache.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from benchmarks import common, embcache
from benchmarks.retrieval_data import RetrievalData, evaluate, load_scifact, subset
from engine.index import hybrid
from engine.index.bm25 import BM25Index
from engine.index.dense import DenseIndex
from engine.index.hybrid import SessionIndex
from engine.ingest.document import Chunk

K_OUT = 100  # ranking depth: recall@100
CANDIDATES = 4 * K_OUT  # what SessionIndex.search fuses per side for k=100
RRF_GRID = (1, 2, 5, 10, 20, 30, 45, 60, 80, 100, 150, 250)
ALPHA_GRID = tuple(round(float(a), 2) for a in np.arange(0.0, 1.0001, 0.05))
TARGET = 0.72  # issue 5: hybrid nDCG@10
ANCHORS = {  # published nDCG@10 on SciFact test (BEIR paper / Anserini; MTEB for MPNet)
    "bm25": "0.665-0.684",
    "dense_fp32": "0.656",
    "dense_int8": "0.656 (fp32)",
}
Lists = dict[str, tuple[np.ndarray, np.ndarray]]  # query id -> (labels, scores), best first


def default_corpus() -> Path:
    return Path(__file__).resolve().parents[2] / "shared" / "corpus"


def bm25_lists(index: BM25Index, queries: Mapping[str, str], n: int = CANDIDATES) -> Lists:
    return {q: index.search(text, n) for q, text in queries.items()}


def dense_lists(index: DenseIndex, qids: Sequence[str], qvecs: np.ndarray, n: int = CANDIDATES):
    return {q: index.search(v, n) for q, v in zip(qids, qvecs, strict=True)}


def fuse(bm: Lists, de: Lists, how: str, param: float, k: int = K_OUT) -> dict[str, list[int]]:
    """Fused top-k labels per query, exactly as ``SessionIndex.search`` orders them."""
    out = {}
    for q, (b_labels, b_scores) in bm.items():
        d_labels, d_scores = de[q]
        if how == "rrf":
            fused = hybrid.rrf([b_labels.tolist(), d_labels.tolist()], k=int(param))
        else:
            fused = hybrid.convex(
                dict(zip(d_labels.tolist(), d_scores.tolist(), strict=True)),
                dict(zip(b_labels.tolist(), b_scores.tolist(), strict=True)),
                param,
            )
        out[q] = [lb for lb, _ in sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]
    return out


def to_run(ranked: Mapping[str, Sequence[int] | tuple], ids: Sequence[str]) -> dict[str, list]:
    """Labels (or (labels, scores) pairs) to doc ids, top ``K_OUT``."""
    run = {}
    for q, r in ranked.items():
        labels = r[0] if isinstance(r, tuple) else r
        run[q] = [ids[int(lb)] for lb in list(labels)[:K_OUT]]
    return run


def tune(bm: Lists, de: Lists, ids: Sequence[str], qrels) -> dict:
    """Best RRF k and convex alpha by nDCG@10 on the given (train) queries."""
    grid = {
        "rrf": {
            k: evaluate(to_run(fuse(bm, de, "rrf", k), ids), qrels)["ndcg@10"] for k in RRF_GRID
        },
        "convex": {
            a: evaluate(to_run(fuse(bm, de, "convex", a), ids), qrels)["ndcg@10"]
            for a in ALPHA_GRID
        },
    }
    best = {how: max(g, key=lambda p: (g[p], -abs(p - 0.5))) for how, g in grid.items()}
    return {"best": best, "train_ndcg@10": {h: grid[h][best[h]] for h in grid}, "grid": grid}


def pick_for_target(tuned: dict, hybrids: Mapping[str, float]) -> str | None:
    """The configuration judged against the target, chosen without test data: the fusion with
    the better train nDCG@10 on the served (int8) model, else the engine's default (RRF)."""
    variant = "int8" if "int8" in tuned else next(iter(tuned), None)
    if variant is not None:
        train = tuned[variant]["train_ndcg@10"]
        return f"hybrid_{max(train, key=train.get)}_{variant}_tuned"
    for key in ("hybrid_rrf_int8", "hybrid_rrf_fp32"):
        if key in hybrids:
            return key
    return None


def engine_check(data: RetrievalData, vecs: np.ndarray, qvecs: np.ndarray, runs: dict) -> dict:
    """Share of queries whose top-100 from ``SessionIndex.search`` equals the benchmark's."""
    index = SessionIndex(vecs.shape[1], dense_backend="exact")
    chunks = []
    for did, text in data.docs.items():
        chunk = Chunk(did, "small", 0, 0, 0, text, None, 0)
        index.add_document(did, {"small": [chunk]})
        chunks.append(chunk)
    index.add_vectors(chunks, vecs)
    agree = {}
    for how, alpha in (("rrf", 0.5), ("convex", 0.5)):
        same = 0
        for (q, text), v in zip(data.queries.items(), qvecs, strict=True):
            hits = index.search(text, v, k=K_OUT, fusion=how, alpha=alpha)
            same += [h.doc_id for h in hits] == runs[how][q]
        agree[how] = same / max(len(data.queries), 1)
    return agree


def embed(texts: list[str], variant: str, skip_uncached: bool) -> tuple[np.ndarray | None, int]:
    """Document vectors and how many were missing from the cache (None: skipped)."""
    cache = embcache.EmbeddingCache(embcache.model_key(variant))
    missing = len(set(texts)) - len(cache.get_many(texts))
    if missing and skip_uncached:
        print(f"{variant}: {missing} texts not in the embedding cache; variant skipped")
        return None, missing
    return embcache.embed_texts(texts, variant), missing


def plot(data: dict, name: str, out_dir: Path | None) -> Path:
    """nDCG@10, recall@10 and recall@100 per method, with the issue's target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = data["results"]
    methods = list(res)
    metrics = ("ndcg@10", "recall@10", "recall@100")
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(methods) + 1.6), dpi=120)
    h = 0.8 / len(metrics)
    for j, m in enumerate(metrics):
        ys = [i + (j - 1) * h for i in range(len(methods))]
        bars = ax.barh(ys, [res[x][m] for x in methods], h, label=m)
        ax.bar_label(bars, fmt="%.3f", fontsize=7)
    ax.axvline(TARGET, color="red", ls="--", lw=1, label=f"target nDCG@10 {TARGET}")
    ax.set_yticks(range(len(methods)), [res[x]["label"] for x in methods], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.12)
    cfg = data["config"]
    ax.set_title(f"SciFact test: {cfg['queries']} queries, {cfg['docs']} docs", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.06), ncol=4)
    fig.tight_layout()
    path = common.results_dir(out_dir) / f"{name}.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.retrieval", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small seeded subset, no tuning")
    parser.add_argument("--corpus", type=Path, default=default_corpus())
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    parser.add_argument("--variants", default="int8,fp32", help="dense models, comma separated")
    parser.add_argument("--queries", type=int, default=20, help="quick: test queries")
    parser.add_argument("--distractors", type=int, default=60, help="quick: extra documents")
    parser.add_argument("--max-words", type=int, default=40, help="quick: cut texts")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--no-tune", action="store_true", help="skip tuning on train")
    parser.add_argument(
        "--skip-uncached", action="store_true", help="drop a dense variant the cache lacks"
    )
    args = parser.parse_args(argv)
    t_start = time.perf_counter()
    full = load_scifact(args.corpus, "test")
    test = (
        subset(full, args.queries, args.distractors, args.seed, args.max_words)
        if args.quick
        else full
    )
    tune_on = None if (args.quick or args.no_tune) else load_scifact(args.corpus, "train")
    ids = list(test.docs)
    texts = [test.docs[d] for d in ids]
    qids = list(test.queries)

    bm25 = BM25Index()
    bm25.add(range(len(ids)), texts)
    bm = bm25_lists(bm25, test.queries)
    bm_train = bm25_lists(bm25, tune_on.queries) if tune_on else {}
    results: dict[str, dict] = {}

    def record(key: str, label: str, ranked, **extra) -> None:
        results[key] = {"label": label, **evaluate(to_run(ranked, ids), test.qrels), **extra}

    record("bm25", "BM25 (k1=0.9, b=0.4, stemmed)", bm, published=ANCHORS["bm25"])
    plain = BM25Index(stem=False)  # the ablation: what Snowball stemming buys
    plain.add(range(len(ids)), texts)
    record("bm25_unstemmed", "BM25 without stemming", bm25_lists(plain, test.queries))
    timings, tuned, checks, skipped = {}, {}, {}, {}
    for variant in [v.strip() for v in args.variants.split(",") if v.strip()]:
        t0 = time.perf_counter()
        vecs, missing = embed(texts, variant, args.skip_uncached)
        if vecs is None:
            skipped[variant] = f"{missing} of {len(set(texts))} documents not in the cache"
            continue
        qvecs = embcache.embed_texts([test.queries[q] for q in qids], variant)
        timings[f"embed_{variant}_s"] = round(time.perf_counter() - t0, 2)
        dense = DenseIndex(vecs.shape[1], backend="exact")
        dense.add(range(len(ids)), vecs)
        de = dense_lists(dense, qids, qvecs)
        record(f"dense_{variant}", f"dense {variant}", de, published=ANCHORS[f"dense_{variant}"])
        runs = {}
        for how, param, what in (("rrf", hybrid.RRF_K, "k"), ("convex", 0.5, "alpha")):
            fused = fuse(bm, de, how, param)
            runs[how] = to_run(fused, ids)
            record(f"hybrid_{how}_{variant}", f"{how} {variant} ({what}={param})", fused)
        checks[variant] = engine_check(test, vecs, qvecs, runs)
        if tune_on:
            tq = list(tune_on.queries)
            tvecs = embcache.embed_texts([tune_on.queries[q] for q in tq], variant)
            t = tune(bm_train, dense_lists(dense, tq, tvecs), ids, tune_on.qrels)
            tuned[variant] = t
            for how, what in (("rrf", "k"), ("convex", "alpha")):
                p = t["best"][how]
                record(
                    f"hybrid_{how}_{variant}_tuned",
                    f"{how} {variant} ({what}={p}, tuned on train)",
                    fuse(bm, de, how, p),
                    train_ndcg10=t["train_ndcg@10"][how],
                )

    hybrids = {k: r["ndcg@10"] for k, r in results.items() if k.startswith("hybrid")}
    best = max(hybrids, key=hybrids.get) if hybrids else None
    chosen = pick_for_target(tuned, hybrids)
    summary = {
        "target_ndcg@10": TARGET,
        "hybrid_for_target": chosen,  # chosen without looking at test
        "hybrid_for_target_ndcg@10": hybrids.get(chosen),
        "meets_target": bool(chosen and hybrids[chosen] >= TARGET),
        "best_hybrid_on_test": best,  # for information only: picked on test
        "best_hybrid_on_test_ndcg@10": hybrids.get(best),
        "bm25_ndcg@10": results["bm25"]["ndcg@10"],
        "skipped_variants": skipped,
        "engine_path_agreement": checks,
    }
    rows = [
        [r["label"], r["ndcg@10"], r["recall@10"], r["recall@100"], r.get("published", "")]
        for r in results.values()
    ]
    title = f"SciFact test ({len(qids)} queries, {len(ids)} docs{', quick subset' if args.quick else ''})"
    columns = ["method", "nDCG@10", "R@10", "R@100", "published nDCG@10"]
    common.print_table(title, columns, rows, digits=4)
    flat = [
        [k, v] for k, v in summary.items() if k not in ("engine_path_agreement", "skipped_variants")
    ]
    flat += [[f"skipped {v}", why] for v, why in skipped.items()]
    flat += [
        [f"SessionIndex agrees ({v}, {how})", share]
        for v, c in checks.items()
        for how, share in c.items()
    ]
    common.print_table("summary", ["item", "value"], flat, digits=4)
    name = "retrieval_scifact_quick" if args.quick else "retrieval_scifact"
    data = {
        "benchmark": "retrieval_scifact",
        "quick": args.quick,
        "machine": common.machine(),
        "config": {
            "corpus": str(args.corpus),
            "queries": len(qids),
            "docs": len(ids),
            "seed": args.seed if args.quick else None,
            "max_words": args.max_words if args.quick else None,
            "candidates_per_side": CANDIDATES,
            "depth": K_OUT,
            "tuned_on": "train qrels" if tune_on else None,
            "train_queries": len(tune_on.queries) if tune_on else 0,
        },
        "columns": columns,
        "rows": rows,
        "results": results,
        "tuning": {
            v: {**t, "grid": {h: {str(p): s for p, s in g.items()} for h, g in t["grid"].items()}}
            for v, t in tuned.items()
        },
        "summary": summary,
        "timings": {**timings, "total_s": round(time.perf_counter() - t_start, 2)},
    }
    json_path = common.write_json(name, data, args.out)
    png_path = plot(data, name, args.out)
    print(f"wrote {json_path} and {png_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
