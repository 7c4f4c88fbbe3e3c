"""Query rewriting quality: our rewriter against human rewrites, next to copying the question.

``python -m benchmarks.rewriting [--quick] [--limit N] [--corpus DIR] [--out DIR]``;
``--rescore OLD.json`` scores and summarises the stored rewrites of a run again (no LLM);
``--replay OLD.json`` passes the run's stored LLM outputs through the current rewriter's
post-processing (``rewriter.resolve``: substitution, checks), so a change there is measured on
the same model outputs without paying for the LLM again.

Why: retrieval and planning see only the rewritten query, so a rewrite that drops or invents
words costs answers. We run ``engine.agent.rewriter.rewrite_traced`` exactly as the agent does
(LLM from ``Settings()`` via the registry, ``AgentConfig`` from the settings, same history window)
on two sets with human rewrites, and score each rewrite against the human one by token F1,
ROUGE-L and cosine of the served int8 encoder's embeddings. The baseline is the question itself.

* CANARD dev (QuAC dialogs): ``History`` is the article title, the section, then alternating
  question/answer strings. Title and section (which the human rewriters saw) become a first turn
  ``Turn(title, section)``; each question/answer pair one ``Turn``.
* mtRAG (human): rewrites are in ``retrieval_tasks/*/*_rewrite.jsonl``; the conversations with
  the agent's answers exist only for the tasks in ``reference_subset_with_human_evaluations.json``
  (150 with a rewrite). MTRAG-UN (``mtrag_un/``) has no human rewrites, so it is not used.

All of CANARD dev would take hours with a 0.5B model on 2 shared cores, so the full run is a
seeded sample: the first 200 CANARD examples of one seeded shuffle and all 150 mtRAG ones
(``--quick``: the first 10 of the same orders, so quick results are a subset of the full run).
Only questions the rewriter sends to the LLM cost time (~15 s each here with one llama.cpp
thread; two threads on the shared cores measured ~90 s, hence ``--llm-threads 1``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from tqdm import tqdm

from benchmarks import common
from benchmarks.text_metrics import rouge_l, token_f1, tokens
from engine.agent.types import Turn
from engine.llm.base import LLM, ChatMessage, Delta, SamplingParams, Usage

SEED = 5
FULL = {"canard": 200, "mtrag": 200}  # mtRAG has 150 usable: all of it
QUICK = 10
CANARD_DEV = Path("conversational/canard/dev.json")
MTRAG = Path("conversational/mtrag")
SUBSETS = ("all", "human_changed", "human_same")
METRICS = ("f1", "rouge_l", "cosine", "exact")


@dataclass(frozen=True)
class Example:
    dataset: str
    id: str
    question: str
    history: tuple[Turn, ...]
    human: str

    @property
    def human_changed(self) -> bool:
        """The human rewrite differs from the question beyond case and punctuation."""
        return tokens(self.human) != tokens(self.question)


def default_corpus() -> Path:
    """``$BRIEF_CORPUS`` (as the tests use) or ``../shared/corpus``."""
    return Path(os.environ.get("BRIEF_CORPUS") or common.RESULTS_DIR.parents[2] / "shared/corpus")


def load_canard(corpus: Path) -> list[Example]:
    out = []
    for row in json.loads((corpus / CANARD_DEV).read_text()):
        title, section, *rest = row["History"]
        turns = [Turn(title, section)] + [
            Turn(q, a) for q, a in zip(rest[::2], rest[1::2], strict=True)
        ]
        ex_id = f"{row['QuAC_dialog_id']}#{row['Question_no']}"
        out.append(Example("canard", ex_id, row["Question"], tuple(turns), row["Rewrite"]))
    return out


def load_mtrag(corpus: Path) -> list[Example]:
    root = corpus / MTRAG
    human = {}
    for path in sorted((root / "retrieval_tasks").glob("*/*_rewrite.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            human[row["_id"]] = row["text"].removeprefix("|user|:").strip()
    export = json.loads((root / "reference_subset_with_human_evaluations.json").read_text())
    out = {}
    for task in export["tasks"]:
        *past, last = task["input"]
        if task["task_id"] not in human or last["speaker"] != "user":
            continue
        pairs = zip(past[::2], past[1::2], strict=True)
        history = tuple(Turn(u["text"].strip(), a["text"].strip()) for u, a in pairs)
        question = last["text"].strip()
        out[task["task_id"]] = Example(
            "mtrag", task["task_id"], question, history, human[task["task_id"]]
        )
    return list(out.values())


def sample(examples: Sequence[Example], n: int, seed: int = SEED) -> list[Example]:
    """The first ``n`` of one seeded shuffle, so smaller samples are prefixes of larger ones."""
    order = random.Random(seed).sample(range(len(examples)), len(examples))
    return [examples[i] for i in order[:n]]


class UsageTap:
    """The real LLM, passed through; keeps the usage of the last call (the rewriter drops it)."""

    def __init__(self, llm: LLM):
        self.llm, self.model_name, self.last = llm, llm.model_name, Usage()

    @property
    def context_length(self) -> int:
        return self.llm.context_length

    async def stream(
        self, messages: Sequence[ChatMessage], params: SamplingParams
    ) -> AsyncIterator[Delta]:
        async for delta in self.llm.stream(messages, params):
            if delta.usage:
                self.last = delta.usage
            yield delta

    def count_tokens(self, text: str) -> int:
        return self.llm.count_tokens(text)


async def run_rewriter(
    examples: Sequence[Example], llm_threads: int | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One ``rewrite_traced`` per example, timed; returns records and what was run."""
    from engine.agent.rewriter import rewrite_traced
    from engine.llm.registry import build_llm
    from server.settings import Settings

    settings = Settings(**({"llm_threads": llm_threads} if llm_threads else {}))
    config, llm = settings.agent_config(), build_llm(settings)
    await llm.start()
    tap, records = UsageTap(llm), []
    try:
        for ex in tqdm(examples, desc="rewrite", file=sys.stderr):
            tap.last = Usage()
            start = time.perf_counter()
            rw, trace = await rewrite_traced(tap, ex.question, ex.history, config)  # type: ignore[arg-type]
            records.append(
                {
                    "dataset": ex.dataset,
                    "id": ex.id,
                    "question": ex.question,
                    "human": ex.human,
                    "rewrite": rw.rewritten,
                    "human_changed": ex.human_changed,
                    "history_turns": len(ex.history),
                    "skipped_llm": rw.skipped_llm,
                    "fallback": trace.get("fallback"),
                    "substituted": "substituted" in trace,
                    "raw": trace.get("raw"),
                    "seconds": time.perf_counter() - start,
                    "prompt_tokens": tap.last.prompt_tokens,
                    "completion_tokens": tap.last.completion_tokens,
                }
            )
    finally:
        await llm.close()
    run = {
        "llm": llm.model_name,
        "backend": settings.llm_backend,
        "llm_threads": settings.llm_threads,
        "agent": asdict(config),
    }
    return records, run


def add_scores(records: list[dict[str, Any]], variant: str = "int8") -> None:
    """Per record: F1, ROUGE-L, cosine, exact match of ours and the baseline vs the human."""
    from benchmarks.embcache import embed_texts

    texts = sorted({r[k] for r in records for k in ("question", "human", "rewrite")})
    vectors = embed_texts(texts, variant, progress=False)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vec = dict(zip(texts, vectors, strict=True))
    for r in records:
        for side, text in (("ours", r["rewrite"]), ("baseline", r["question"])):
            r[side] = {
                "f1": token_f1(text, r["human"]),
                "rouge_l": rouge_l(text, r["human"]),
                "cosine": float(vec[text] @ vec[r["human"]]),
                "exact": float(tokens(text) == tokens(r["human"])),
            }


def _mean(values: Sequence[float]) -> float:
    return float(statistics.fmean(values)) if values else float("nan")


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    called = [r for r in records if not r["skipped_llm"]]
    scores = {}
    for subset in SUBSETS:
        rows = [
            r for r in records
            if subset == "all" or r["human_changed"] == (subset == "human_changed")
        ]  # fmt: skip
        scores[subset] = {
            "n": len(rows),
            **{
                side: {m: _mean([r[side][m] for r in rows]) for m in METRICS}
                for side in ("ours", "baseline")
            },  # fmt: skip
            "ours_f1_better": sum(r["ours"]["f1"] > r["baseline"]["f1"] for r in rows),
            "ours_f1_worse": sum(r["ours"]["f1"] < r["baseline"]["f1"] for r in rows),
        }
    return {
        "examples": len(records),
        "human_changed": sum(r["human_changed"] for r in records),
        "llm_calls": len(called),
        "skipped_llm": len(records) - len(called),
        "skip_rate": (len(records) - len(called)) / max(len(records), 1),
        "skipped_but_human_changed": sum(r["skipped_llm"] and r["human_changed"] for r in records),
        "rewritten": sum(tokens(r["rewrite"]) != tokens(r["question"]) for r in records),
        "llm_kept_question": sum(
            tokens(r["rewrite"]) == tokens(r["question"]) and not r["fallback"] for r in called
        ),
        "fallbacks": dict(Counter(r["fallback"] for r in called if r["fallback"])),
        "substituted": sum(r["substituted"] for r in records),
        "llm_latency_mean_s": _mean([r["seconds"] for r in called]),
        "llm_latency_median_s": common.median([r["seconds"] for r in called]),
        "prompt_tokens_mean": _mean([r["prompt_tokens"] for r in called]),
        "completion_tokens_mean": _mean([r["completion_tokens"] for r in called]),
        "scores": scores,
    }


def tables(
    summary: dict[str, dict[str, Any]],
) -> tuple[list[str], list[list[Any]], list[str], list[list[Any]]]:
    score_cols = ["set", "subset", "n"] + [
        f"{m} {s}" for m in ("F1", "ROUGE-L", "cos", "exact") for s in ("ours", "copy")
    ]
    score_rows, run_rows = [], []
    for ds, s in summary.items():
        for subset in SUBSETS:
            sc = s["scores"][subset]
            score_rows.append(
                [ds, subset, sc["n"]]
                + [sc[side][m] for m in METRICS for side in ("ours", "baseline")]
            )
        run_rows.append(
            [ds, s["examples"], s["human_changed"], s["llm_calls"], s["skip_rate"],
             s["skipped_but_human_changed"], s["rewritten"], s["llm_kept_question"],
             sum(s["fallbacks"].values()),
             s["llm_latency_mean_s"], s["llm_latency_median_s"], s["prompt_tokens_mean"],
             s["completion_tokens_mean"]]
        )  # fmt: skip
    run_cols = ["set", "n", "human changed", "LLM calls", "skip rate", "skipped but changed",
                "rewritten", "LLM kept question", "fallbacks", "LLM s mean", "LLM s median", "prompt tok", "gen tok"]  # fmt: skip
    return score_cols, score_rows, run_cols, run_rows


def plot(name: str, data: dict[str, Any], out_dir: Path | None) -> Path:
    """Ours vs copy-the-question per set and metric (all examples), scores x 100."""
    groups, series = [], {"our rewriter": [], "copy question": []}
    for ds, s in data["summary"].items():
        for m, label in (("f1", "F1"), ("rouge_l", "ROUGE-L"), ("cosine", "cos")):
            groups.append(f"{ds}\n{label}")
            series["our rewriter"].append(100 * s["scores"]["all"]["ours"][m])
            series["copy question"].append(100 * s["scores"]["all"]["baseline"][m])
    cfg, m = data["config"], data["machine"]
    sizes = ", ".join(f"{k} {v}" for k, v in cfg["sizes"].items())
    note = (f"{cfg['llm']} on {m['cpu']} x{m['cpus']}; seeded sample (seed {cfg['seed']}): {sizes}; "
            f"vs human rewrites")  # fmt: skip
    return common.bar_chart(
        name, groups, series, "score x 100", "query rewriting vs human rewrites", out_dir, note
    )


async def collect(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the rewriter on the seeded samples; returns records and the run's config."""
    corpus = args.corpus or default_corpus()
    wanted = {k: (QUICK if args.quick else n) for k, n in FULL.items()}
    if args.limit is not None:
        wanted = {k: min(n, args.limit) for k, n in wanted.items()}
    loaded = {"canard": load_canard(corpus), "mtrag": load_mtrag(corpus)}
    examples = [ex for k, xs in loaded.items() for ex in sample(xs, wanted[k], args.seed)]
    with common.stopwatch() as elapsed:
        records, run_info = await run_rewriter(examples, args.llm_threads or None)
    config = {
        "seed": args.seed,
        "population": {k: len(xs) for k, xs in loaded.items()},
        "corpus": str(corpus),
        "rewrite_seconds_total": elapsed(),
        **run_info,
        "encoder": "all-mpnet-base-v2 ONNX int8",
        "tokens": "lowercased, punctuation -> space (benchmarks/text_metrics.py)",
        "human_changed": "human rewrite tokens != question tokens",
        "canard_history": "Turn(title, section) then one Turn per question/answer pair",
        "mtrag_source": "mtrag retrieval_tasks *_rewrite.jsonl + conversations of "
        "reference_subset_with_human_evaluations.json (MTRAG-UN has no human rewrites)",
    }
    return records, {"quick": args.quick, "machine": common.machine(), "config": config}


def report(records: list[dict[str, Any]], meta: dict[str, Any], out: Path | None) -> None:
    """Score, print the tables, write ``rewriting[_quick].json`` and ``.png``."""
    add_scores(records)
    datasets = list(dict.fromkeys(r["dataset"] for r in records))
    summary = {ds: summarize([r for r in records if r["dataset"] == ds]) for ds in datasets}
    cfg = meta["config"] | {"sizes": {ds: s["examples"] for ds, s in summary.items()}}
    data = {"benchmark": "rewriting", **meta, "config": cfg, "summary": summary}
    score_cols, score_rows, run_cols, run_rows = tables(summary)
    data["tables"] = {"scores": {"columns": score_cols, "rows": score_rows},
                      "runs": {"columns": run_cols, "rows": run_rows}}  # fmt: skip
    data["examples"] = records
    console = Console(width=160)  # wide tables stay readable in logs (not a terminal)
    sizes = ", ".join(f"{k} {v}/{cfg['population'][k]}" for k, v in cfg["sizes"].items())
    title = f"rewrite vs human rewrite (seed {cfg['seed']}; {sizes}); copy = the question as is"
    common.print_table(title, score_cols, score_rows, console, digits=3)
    common.print_table(f"rewriter runs ({cfg['llm']})", run_cols, run_rows, console)
    name = "rewriting_quick" if meta["quick"] else "rewriting"
    json_path = common.write_json(name, data, out)
    png_path = plot(name, data, out)
    print(f"wrote {json_path} and {png_path}")


def replay(records: list[dict[str, Any]], config: dict[str, Any], corpus: Path) -> int:
    """Re-resolve the stored LLM outputs of ``records`` in place; returns how many changed.

    The cue check runs before the LLM, so a record the run sent to the LLM still is one."""
    from engine.agent.rewriter import needs_rewrite, recent, resolve

    loaded = {"canard": load_canard(corpus), "mtrag": load_mtrag(corpus)}
    by_id = {(ex.dataset, ex.id): ex for xs in loaded.values() for ex in xs}
    keep = config["agent"]["history_turns"]
    changed = 0
    for r in records:
        if r["skipped_llm"] or r.get("raw") is None:
            continue
        ex = by_id[(r["dataset"], r["id"])]
        query = ex.question.strip()
        window = recent(ex.history, keep)
        assert needs_rewrite(query, window), f"{r['id']}: the cue check changed, rerun the LLM"
        rw, trace = resolve(r["raw"], query, ex.history, keep)
        changed += rw.rewritten != r["rewrite"]
        r |= {"rewrite": rw.rewritten, "fallback": trace.get("fallback"),
              "substituted": "substituted" in trace}  # fmt: skip
    return changed


async def run(args: argparse.Namespace) -> int:
    if args.rescore or args.replay:  # the rewrites of an earlier run, scored again
        old = json.loads((args.rescore or args.replay).read_text())
        drop = ("ours", "baseline")
        records = [{k: v for k, v in r.items() if k not in drop} for r in old["examples"]]
        meta = {k: old[k] for k in ("quick", "machine", "config")}
        if args.replay:
            changed = replay(records, meta["config"], args.corpus or default_corpus())
            meta["config"] |= {"replayed": {"from": old["machine"]["time"], "changed": changed}}
            print(
                f"replayed the stored LLM outputs of {len(records)} examples: {changed} rewrites changed"
            )
    else:
        records, meta = await collect(args)
    report(records, meta, args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.rewriting", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help=f"{QUICK} examples per set (~2 min)")
    parser.add_argument("--limit", type=int, default=None, help="at most N examples per set")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--corpus", type=Path, default=None, help="the shared corpus folder")
    parser.add_argument(
        "--llm-threads",
        type=int,
        default=1,
        help="llama.cpp threads (0: the server default, all cores). 1 because on a shared "
        "2-core machine 2 threads measured ~100 s per rewrite against ~13 s for 1",
    )
    parser.add_argument(
        "--rescore", type=Path, default=None, help="rescore the rewrites of an earlier JSON"
    )
    parser.add_argument(
        "--replay",
        type=Path,
        default=None,
        help="re-resolve the stored LLM outputs of an earlier JSON with the current rewriter",
    )
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
