"""Map-reduce summaries through the real server vs the raw llama.cpp backend, same prompts.

``python -m benchmarks.mapreduce [--quick] [--server URL] [--out DIR]``

Each document is uploaded into its own session (vector store) with the official ``openai`` SDK,
ingestion is awaited, and "Summarize this document" is asked with ``brief_trace``. The trace says
which paragraphs went into which split and what the reducer read; from that the benchmark rebuilds
every LLM call of the turn with the agent's own prompt code (``mapreduce.Splitter``, the prompt
renderers) and replays it on a ``llama_cpp.Llama`` in this process, right after the server's turn.
Same prompts (checked against the traced token counts), so the tokens/s ratio is what the
server adds. A second server (``mapper_concurrency=1``) shows what parallel mappers buy.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from benchmarks.common import bar_chart, machine, print_table, write_json
from benchmarks.live import LiveServer

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
DOCUMENTS = [
    "documents/docling/pdf/multi_page.pdf",  # 5 pages
    "documents/papermage/2023.eacl-main.121.pdf",  # 20 pages
    "qa/financebench/pdfs/MGMRESORTS_2023Q2_10Q.pdf",  # 62 pages
]
QUESTION = "Summarize this document"
# Quick mode keeps the code path (two splits → two mappers → reducer) at a tenth of the cost.
QUICK_AGENT = {"split_tokens": 600, "max_splits": 2, "mapper_tokens": 48, "answer_tokens": 64}


def agent_settings(quick: bool, overrides: dict[str, int | None]) -> dict[str, Any]:
    """The agent budgets the servers run with: the server's defaults, then quick, then flags."""
    from server.settings import Settings

    s = Settings()
    base = {
        "split_tokens": s.agent_split_tokens,
        "max_splits": s.agent_max_splits,
        "mapper_tokens": s.agent_mapper_tokens,
        "answer_tokens": s.agent_answer_tokens,
        "mapper_concurrency": s.agent_mapper_concurrency,
    }
    given = {k: v for k, v in overrides.items() if v is not None}
    return base | (QUICK_AGENT if quick else {}) | given


def server_env(agent: dict[str, Any], concurrency: int) -> dict[str, str]:
    # No background LLM descriptions: they would compete with the turn being timed.
    env = {f"BRIEF_AGENT_{k.upper()}": str(v) for k, v in agent.items()}
    return env | {
        "BRIEF_AGENT_MAPPER_CONCURRENCY": str(concurrency),
        "BRIEF_DESCRIBE_DOCUMENTS": "0",
    }


class RawLlama:
    """``llama_cpp.Llama`` built as ``engine/llm/llamacpp.py`` builds it, called directly."""

    def __init__(self) -> None:
        import llama_cpp

        from server.settings import Settings

        s = Settings()
        threads = s.llm_threads or os.cpu_count() or 1
        self.lib = llama_cpp
        self.llama = llama_cpp.Llama(
            model_path=s.resolved_llm_model(),
            n_ctx=s.llm_context,
            n_batch=s.llm_batch,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
        )
        self.llama.chat_format = "chat_template.default"  # the GGUF's own template, as served

    def count_tokens(self, text: str) -> int:
        return len(self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def call(self, messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
        """One chat completion with the agent's sampling; llama's perf counters split the time
        into prompt evaluation (only the part not already in the KV cache) and decoding."""
        ctx = self.llama._ctx.ctx
        self.lib.llama_perf_context_reset(ctx)
        t = time.perf_counter()
        out = self.llama.create_chat_completion(
            messages=messages, temperature=0.0, top_p=1.0, seed=0, max_tokens=max_tokens
        )
        seconds = time.perf_counter() - t
        perf = self.lib.llama_perf_context(ctx)
        return {
            "seconds": seconds,
            "prompt_tokens": out["usage"]["prompt_tokens"],
            "completion_tokens": out["usage"]["completion_tokens"],
            "prefill_s": perf.t_p_eval_ms / 1000,
            "prefill_tokens": perf.n_p_eval,  # prompt tokens actually evaluated (not cached)
            "decode_s": perf.t_eval_ms / 1000,
        }


def rebuild_calls(
    trace: dict, doc: dict, file_id: str, paragraphs: dict, agent: dict, count
) -> list[dict]:
    """The turn's generation calls (messages, max_tokens, traced tokens), rebuilt from the trace
    with the agent's own splitter and prompt renderers."""
    from engine.agent.mapreduce import Splitter
    from engine.agent.prompts import load
    from engine.agent.prompts import render as r
    from engine.agent.types import DocumentInfo, Evidence, Operation
    from engine.llm.base import ChatMessage

    info = DocumentInfo(
        file_id,
        doc["filename"],
        doc.get("title") or doc["filename"],
        doc["kind"],
        doc.get("description"),
        doc.get("pages"),
        doc.get("paragraphs") or 0,
    )
    by_id, names = {file_id: info}, r.handles([info])
    ops = [Operation(o["action"], o["document"], o.get("query")) for o in trace["operations"]]
    rw = trace["rewrite"]
    question = r.question_block(rw["original"], rw["rewritten"])
    direct = trace["path"] == "direct"
    prompt = r.example_messages(load("answer" if direct else "mapper"))
    budget = trace["splitting"]["budget"]
    calls = []
    for i, sp in enumerate(trace["splits"]):
        labels = [n for a, b in sp["labels"] for n in range(a, b + 1)]
        pids = sp["paragraphs"][file_id]  # one document per session here
        items = [(lab, Evidence(file_id, paragraphs[p], 1.0, "read", 0)) for lab, p in zip(labels, pids, strict=True)]  # fmt: skip
        (split,) = list(Splitter(items, budget, count, 1, "stop", docs=[info]))
        user = r.evidence_request(ops, by_id, names, split.text, question)
        served = trace["reducer"] if direct else trace["mappers"][i]
        calls.append(
            {
                "role": "direct" if direct else "mapper",
                "messages": [*prompt, ChatMessage("user", user)],
                "max_tokens": agent["answer_tokens" if direct else "mapper_tokens"],
                "split_tokens_match": split.tokens == sp["tokens"],
                "server": {k: served.get(k) for k in ("prompt_tokens", "completion_tokens")},
            }
        )
    red = trace.get("reducer") or {}
    if not direct and red.get("input"):
        calls.append(
            {
                "role": "reducer",
                "messages": [
                    *r.example_messages(load("reducer")),
                    ChatMessage("user", red["input"]),
                ],  # fmt: skip
                "max_tokens": agent["answer_tokens"],
                "split_tokens_match": True,
                "server": {k: red.get(k) for k in ("prompt_tokens", "completion_tokens")},
            }
        )
    return calls


def uncapped_splits(paragraphs: dict, budget: int, count) -> int:
    """Mapper calls a READ of the whole document would need without the ``max_splits`` cap."""
    from engine.agent.mapreduce import Splitter
    from engine.agent.types import Evidence

    items = [(i + 1, Evidence("d", p, 1.0, "read", 0)) for i, p in enumerate(paragraphs.values())]
    return sum(1 for _ in Splitter(items, budget, count, 10**6, "skip_similar"))


def replay(raw: RawLlama, calls: list[dict]) -> dict[str, Any]:
    """Run the rebuilt calls in the server's order on the raw backend."""
    out = []
    for c in calls:
        msgs = [{"role": m.role, "content": m.content} for m in c["messages"]]
        res = raw.call(msgs, c["max_tokens"])
        res |= {"role": c["role"], "server": c["server"]}
        res["same_prompt"] = c["split_tokens_match"] and (
            res["prompt_tokens"] == c["server"]["prompt_tokens"]
        )
        out.append(res)
    tot = {k: sum(c[k] for c in out) for k in ("seconds", "prefill_s", "decode_s")}
    tot |= {k: sum(c[k] for c in out) for k in ("prompt_tokens", "completion_tokens")}
    tot["prefill_tokens"] = sum(c["prefill_tokens"] for c in out)
    tok = tot["prompt_tokens"] + tot["completion_tokens"]
    tot["tokens_per_s"] = tok / max(tot["seconds"], 1e-9)
    tot["same_prompts"] = all(c["same_prompt"] for c in out)
    return {"calls": out, **tot}


def ingest(client, path: Path) -> tuple[str, str, dict, dict]:
    """A new session holding ``path``, fully ingested: (session, file id, metadata, paragraphs)."""
    from engine.ingest.document import Paragraph

    vs = client.vector_stores.create(name=f"bench {path.name}")
    with path.open("rb") as fh:
        f = client.files.create(file=(path.name, fh), purpose="assistants")
    vf = client.vector_stores.files.create_and_poll(
        file_id=f.id, vector_store_id=vs.id, poll_interval_ms=200
    )
    if vf.status != "completed":
        raise RuntimeError(f"{path.name}: ingestion {vf.status}: {vf.last_error}")
    page = client.vector_stores.files.content(file_id=f.id, vector_store_id=vs.id)
    paras = {}
    for item in page.data:
        x = item.model_extra or {}
        paras[x["paragraph"]] = Paragraph(x["paragraph"], item.text, x.get("page"), (), x["kind"])
    return vs.id, f.id, (vf.model_extra or {}).get("document") or {}, paras


def summarise(client, model: str, vs_id: str) -> dict[str, Any]:
    """One briefing turn; the client-side wall time and what the trace says about the work."""
    t = time.perf_counter()
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": QUESTION}],
        extra_body={"session_id": vs_id, "brief_trace": True},
    )
    wall = time.perf_counter() - t
    tr = r.model_extra["brief_trace"]
    tokens = r.usage.prompt_tokens + r.usage.completion_tokens
    sp = tr.get("splitting") or {}
    return {
        "wall_s": wall,
        "path": tr["path"],
        "splits": len(tr["splits"]),
        "mapper_calls": len(tr["mappers"]),
        "llm_calls": tr.get("llm_calls"),
        "dropped_at_cap": (sp.get("dropped_at_cap") or {}).get("count", 0),
        "skipped_similar": len(sp.get("skipped_similar") or []),
        "prompt_tokens": r.usage.prompt_tokens,
        "completion_tokens": r.usage.completion_tokens,
        "tokens_per_s": tokens / wall,
        "timings": tr.get("timings", {}) | {"generation": tr.get("generation_timings", {})},
        "mappers": [
            {k: m[k] for k in ("split", "start_s", "end_s", "prompt_tokens", "completion_tokens")}
            for m in tr["mappers"]
        ],
        "reducer": {k: v for k, v in tr["reducer"].items() if k != "input"},
        "answer_chars": len(r.choices[0].message.content or ""),
        "_trace": tr,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    import openai

    budgets = {k: getattr(args, k) for k in QUICK_AGENT}
    agent = agent_settings(args.quick and not args.server, budgets)  # --server: BRIEF_* env
    default_c = agent["mapper_concurrency"]
    if args.server:
        configs, servers = {"server": args.server}, []
    else:
        wanted = [default_c] if args.quick or default_c == 1 else [default_c, 1]
        servers = [LiveServer(server_env(agent, c)) for c in wanted]
        configs = {f"concurrency={c}": s.base_url for c, s in zip(wanted, servers, strict=True)}
    docs = [args.corpus / d for d in (DOCUMENTS[:1] if args.quick else DOCUMENTS)]
    rows: list[dict[str, Any]] = []
    result = {"machine": machine(), "argv": args.argv, "question": QUESTION, "agent": agent}
    result["documents"] = rows
    try:
        for s in servers:
            s.start()
        clients = {
            name: openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=7200)
            for name, url in configs.items()
        }
        model = next(
            m.id for m in next(iter(clients.values())).models.list() if "mpnet" not in m.id
        )
        raw = RawLlama()
        for path in docs:
            row: dict[str, Any] = {"file": path.name, "configs": {}}
            for k, (name, client) in enumerate(clients.items()):
                if k > 0 and len(rows) >= args.sequential_docs:
                    continue
                vs_id, file_id, meta, paras = ingest(client, path)
                row |= {"pages": meta.get("pages"), "paragraphs": meta.get("paragraphs")}
                res = summarise(client, model, vs_id)
                trace = res.pop("_trace")
                row["configs"][name] = res
                client.vector_stores.delete(vs_id)
                print(f"{path.name} [{name}]: {res['splits']} splits, {res['wall_s']:.1f} s")
                if k == 0:  # the raw backend replays the first config's calls, right after it
                    calls = rebuild_calls(trace, meta, file_id, paras, agent, raw.count_tokens)
                    row["raw"] = replay(raw, calls)
                    budget = trace["splitting"]["budget"]
                    row["splits_uncapped"] = uncapped_splits(paras, budget, raw.count_tokens)
                    row["splits_uncapped_at_1800"] = uncapped_splits(paras, 1800, raw.count_tokens)
                    print(f"{path.name} [raw llama.cpp]: {row['raw']['seconds']:.1f} s")
            first = next(iter(row["configs"].values()))
            row["ratio_server_vs_raw"] = first["tokens_per_s"] / row["raw"]["tokens_per_s"]
            rows.append(row)
            write_json(out_name(args), result | {"complete": False}, args.out)  # survive a stop
    finally:
        for s in servers:
            s.stop()
    return result | {"complete": True}


def out_name(args: argparse.Namespace) -> str:
    return "mapreduce_quick" if args.quick else "mapreduce"


def report(result: dict[str, Any], args: argparse.Namespace) -> None:
    rows = result["documents"]
    names = list(dict.fromkeys(n for d in rows for n in d["configs"]))
    seq = "concurrency=1" if "concurrency=1" in names and len(names) > 1 else None
    console = Console(width=200)
    main_rows = []
    for d in rows:
        c, raw = d["configs"][names[0]], d["raw"]
        cells = [d["file"][:28], d["pages"], c["splits"], d["splits_uncapped"]]
        cells += [d["splits_uncapped_at_1800"], c["mapper_calls"]]
        cells += [c["prompt_tokens"], c["completion_tokens"], c["wall_s"], raw["seconds"]]
        cells += [c["tokens_per_s"], raw["tokens_per_s"], d["ratio_server_vs_raw"]]
        if seq and seq in d["configs"]:
            d["ratio_parallel_vs_sequential_wall"] = c["wall_s"] / d["configs"][seq]["wall_s"]
            cells += [d["configs"][seq]["wall_s"], d["ratio_parallel_vs_sequential_wall"]]
        elif seq:
            cells += ["-", "-"]
        main_rows.append(cells)
    cols = "document|pages|splits|uncapped|@1800|mappers|tok in|tok out|server s|raw s".split("|")
    cols += ["server tok/s", "raw tok/s", "server/raw"]
    if seq:
        cols += ["c=1 server s", f"{names[0]} / c=1"]
    title = f"Summaries through the server ({names[0]}) vs raw llama.cpp"
    print_table(title, cols, main_rows, console)
    where = []
    for d in rows:
        c, raw = d["configs"][names[0]], d["raw"]
        t, g = c["timings"], c["timings"].get("generation", {})
        red = [x for x in raw["calls"] if x["role"] == "reducer"]
        where.append(
            [
                d["file"][:28],
                t.get("retrieve_s", 0.0),
                g.get("split_s", float("nan")),
                g.get("map_s", float("nan")),
                g.get("total_s", 0.0) - g.get("map_s", 0.0) if "map_s" in g else float("nan"),
                raw["prefill_s"],
                raw["decode_s"],
                sum(x["seconds"] for x in red),
                c["wall_s"] - raw["seconds"],
                raw["prefill_tokens"] / max(raw["prompt_tokens"], 1),
                "yes" if raw["same_prompts"] else "NO",
            ]
        )
    print_table(
        "Where the time goes (seconds; raw = the same calls on llama_cpp.Llama)",
        ["document", "retrieve", "split (srv)", "map (srv)", "reduce (srv)", "raw prefill"]
        + ["raw decode", "raw reducer", "server - raw", "uncached prompt", "same prompts"],
        where,
        console,
    )
    name = out_name(args)
    write_json(name, result, args.out)
    tps = [[d["configs"].get(n, {}).get("tokens_per_s", float("nan")) for d in rows] for n in names]
    series = {f"server {n}": v for n, v in zip(names, tps, strict=True)}
    series["raw llama.cpp"] = [d["raw"]["tokens_per_s"] for d in rows]
    ratios = ", ".join(f"{d['ratio_server_vs_raw']:.2f}" for d in rows)
    bar_chart(
        name,
        [
            f"{d['file'][:18]}\n{d['pages']} p, {d['configs'][names[0]]['splits']} splits"
            for d in rows
        ],
        series,
        ylabel="LLM tokens (in + out) / s",
        title="Summaries: map-reduce through the server vs raw llama.cpp",
        out_dir=args.out,
        note=f"server/raw tokens/s: {ratios} (same prompts, same process run)",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the 5-page document, small budgets")
    ap.add_argument("--server", help="use this running server instead of starting them")
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--out", type=Path, default=None, help="results folder")
    for flag in ("split-tokens", "max-splits", "mapper-tokens", "answer-tokens"):
        ap.add_argument(f"--{flag}", type=int, default=None, help="agent budget for the servers")
    ap.add_argument("--sequential-docs", type=int, default=99, help="also with concurrency=1")
    args = ap.parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]
    report(run(args), args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
