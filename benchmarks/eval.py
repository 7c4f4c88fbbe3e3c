"""Evaluation harness: run briefing cases against a real server and score every stage.

``python -m benchmarks.eval --cases benchmarks/cases/dev.jsonl --corpus ../shared/corpus``
``[--server URL] [--limit N] [--grader heuristic|llm] [--out DIR] [--quick]``

Each case is driven the way a user drives the server, with the official ``openai`` SDK: create a
session (vector store), upload the case's documents, replay the earlier turns as chat turns
(the server rebuilds history from the request's messages), ask the question with
``brief_trace``, delete the session. The trace gives the plan, the retrieved paragraph ids with
scores and the stage timings; paragraph texts come from the file-content endpoint, so quotes
are matched against exactly what the server holds. Metrics live in ``benchmarks.eval_metrics``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from benchmarks import eval_metrics as m
from benchmarks.cases_check import load_cases
from benchmarks.common import bar_chart, machine, print_table, results_dir, write_json
from benchmarks.live import ROOT, LiveServer

CASES_DIR = Path(__file__).resolve().parent / "cases"
QUICK_ENV = {"BRIEF_AGENT_SPLIT_TOKENS": "1000", "BRIEF_AGENT_ANSWER_TOKENS": "160"}
STAGES = ("rewrite_s", "plan_s", "retrieve_s", "first_token_s", "generate_s", "total_s")
GRADE_ENUM = {"type": "string", "enum": ["Yes", "Somewhat", "No"]}
ANSWER_PROMPT = """You grade an answer written from documents.
Question: {question}
Reference answer: {reference}
Passages the answer could use:
{passages}
Answer to grade: {answer}

completeness: does the answer give everything the reference answer gives? (Yes/Somewhat/No)
groundedness: is every claim of the answer supported by the passages? (Yes/Somewhat/No)
Reply with JSON only."""
VERDICTS = {"type": "object", "properties": {"verdicts": {"type": "array", "items": GRADE_ENUM}}}
CITATION_PROMPT = """For each numbered pair, does the passage support the sentence? Answer Yes,
Somewhat or No for each pair, in order.
{pairs}
Reply with JSON only: {{"verdicts": [...]}} with {n} verdicts."""


class LLMGrader:
    """A judge on any OpenAI-compatible endpoint (by default the server under test)."""

    def __init__(self, client: Any, model: str, max_chars: int = 3000):
        self.client, self.model, self.max_chars = client, model, max_chars

    def _json(self, prompt: str, schema: dict[str, Any]) -> dict[str, Any]:
        r = self.client.chat.completions.create(
            model=self.model,
            messages=[{"role": "user", "content": prompt}],
            temperature=0,
            max_tokens=96,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "grade", "schema": schema},
            },
        )
        try:
            return json.loads(r.choices[0].message.content or "{}")
        except json.JSONDecodeError:
            return {}

    def grade_answer(
        self, case: dict[str, Any], answer: str, passages: list[str]
    ) -> dict[str, float | None]:
        text = "\n".join(f"- {p}" for p in passages)[: self.max_chars] or "(none)"
        prompt = ANSWER_PROMPT.format(
            question=case["question"],
            reference=case["answer"],
            passages=text,
            answer=m.strip_markers(answer),
        )
        props = {"completeness": GRADE_ENUM, "groundedness": GRADE_ENUM}
        out = self._json(prompt, {"type": "object", "properties": props, "required": list(props)})
        return {k: m.grade_value(out.get(k)) for k in props}

    def grade_citations(self, pairs: list[tuple[str, str]]) -> float | None:
        if not pairs:
            return None
        pairs = pairs[:6]
        listing = "\n".join(
            f"{i}. Sentence: {s}\n   Passage: {p[:500]}" for i, (s, p) in enumerate(pairs, 1)
        )
        out = self._json(CITATION_PROMPT.format(pairs=listing, n=len(pairs)), VERDICTS)
        return m.mean(m.grade_value(v) for v in (out.get("verdicts") or [])[: len(pairs)])


class Runner:
    """Runs cases one by one against one server."""

    def __init__(
        self, base_url: str, corpus: Path, args: argparse.Namespace, grader: LLMGrader | None
    ):
        import openai

        self.base_url, self.corpus, self.args, self.grader = base_url, corpus, args, grader
        self.client = openai.OpenAI(
            base_url=base_url + "/v1", api_key=args.api_key, max_retries=0, timeout=1800
        )
        self.http = httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {args.api_key}"}, timeout=60
        )
        self.model = next(x.id for x in self.client.models.list().data if "mpnet" not in x.id)

    def chat(self, vs_id: str, messages: list[dict[str, str]], trace: bool) -> dict[str, Any]:
        raw = self.client.chat.completions.with_raw_response.create(
            model=self.model,
            messages=messages,
            extra_body={"session_id": vs_id, "brief_trace": trace},
        )
        return raw.http_response.json()  # plain dicts: annotations and brief_trace as sent

    def upload(self, vs_id: str, docs: list[str]) -> dict[str, str]:
        ids: dict[str, str] = {}
        for doc in docs:
            with (self.corpus / doc).open("rb") as fh:
                f = self.client.vector_stores.files.upload_and_poll(
                    vector_store_id=vs_id, file=fh, poll_interval_ms=250
                )
            if f.status != "completed":
                raise RuntimeError(f"ingestion of {doc} failed: {f.last_error}")
            ids[f.id] = doc
        if self.args.describe:  # the planner reads the LLM-written description: wait like a user
            deadline = time.monotonic() + self.args.describe_timeout
            for fid in ids:
                while time.monotonic() < deadline:
                    f = self.client.vector_stores.files.retrieve(vector_store_id=vs_id, file_id=fid)
                    stages = (f.model_extra or {}).get("stages") or {}
                    if {"described_s", "describe_error", "describe_skipped"} & set(stages):
                        break
                    time.sleep(0.5)
        return ids

    def paragraphs(self, vs_id: str, file_id: str) -> dict[int, tuple[str, int | None]]:
        r = self.http.get(f"/v1/vector_stores/{vs_id}/files/{file_id}/content")
        r.raise_for_status()
        return {p["paragraph"]: (p["text"], p["page"]) for p in r.json()["data"]}

    def run(self, case: dict[str, Any]) -> dict[str, Any]:
        row: dict[str, Any] = {"id": case["id"], "kind": case["kind"], "metrics": {}, "timings": {}}
        vs = self.client.vector_stores.create(name=f"eval {case['id']}")
        try:
            t0 = time.perf_counter()
            ids = self.upload(vs.id, case["documents"])
            row["timings"]["ingest_s"] = round(time.perf_counter() - t0, 3)
            texts = {fid: self.paragraphs(vs.id, fid) for fid in ids}
            messages: list[dict[str, str]] = []
            for turn in case["turns"]:
                prior = self.chat(
                    vs.id, [*messages, {"role": "user", "content": turn}], trace=False
                )
                reply = prior["choices"][0]["message"]["content"] or ""
                messages += [
                    {"role": "user", "content": turn},
                    {"role": "assistant", "content": reply},
                ]
            t0 = time.perf_counter()
            resp = self.chat(
                vs.id, [*messages, {"role": "user", "content": case["question"]}], trace=True
            )
            row["timings"]["client_s"] = round(time.perf_counter() - t0, 3)
            self.score(case, row, resp, ids, texts)
        finally:
            self.client.vector_stores.delete(vs.id)
        return row

    def score(
        self,
        case: dict[str, Any],
        row: dict[str, Any],
        resp: dict[str, Any],
        ids: dict[str, str],
        texts: dict,
    ) -> None:
        msg = resp["choices"][0]["message"]
        answer, trace = msg.get("content") or "", resp.get("brief_trace") or {}
        anns = [a for a in msg.get("annotations") or [] if a.get("type") == "file_citation"]
        row |= {
            "answer": answer,
            "rewrite": trace.get("rewrite"),  # rewritten query, skipped_llm, used turns
            "path": trace.get("path"),
            # what each stage did (plan, routing, mapper notes, reducer input), to read a
            # failure without rerunning it; chunk-level hits are left out (paragraphs stay)
            "trace": trace
            | {
                "retrieved": [
                    {k: v for k, v in r.items() if k != "hits"} for r in trace.get("retrieved", [])
                ]
            },
        }
        ops = [
            (o["action"], ids.get(o["document"], o["document"]))
            for o in trace.get("operations", [])
        ]
        row["operations"] = [list(o) for o in ops]

        def para(fid: str, pid: int, score: float = 0.0) -> m.Para:
            text, page = texts.get(fid, {}).get(pid, ("", None))
            return m.Para(ids.get(fid, fid), pid, score, text, page)

        retrieved = [
            para(d, p, s) for ctx in trace.get("retrieved", []) for d, p, s, *_ in ctx["paragraphs"]
        ]
        ranked = m.rank(retrieved)
        cited, citations = [], []
        for a in anns:
            fc = a["file_citation"]
            lo, hi = fc["paragraphs"]
            block = [para(fc["file_id"], p) for p in range(lo, hi + 1)]
            cited += block
            citations.append(
                (a["index"], ids.get(fc["file_id"], ""), " ".join(p.text for p in block))
            )
        met = row["metrics"]
        met |= m.planner_metrics(case["gold_operations"], ops)
        met |= m.retrieval_metrics(case["gold_evidence"], ranked, self.args.k)
        met |= m.citation_metrics(
            answer, citations, case["gold_evidence"], cited, self.args.citation_threshold
        )
        met["keyword_accuracy"] = m.keyword_accuracy(answer, case["answer_keywords"])
        refused = float(m.abstained(answer))
        met["abstention" if case["kind"] == "unanswerable" else "false_abstention"] = refused
        if self.grader is not None:
            passages = [t for _, _, t in citations] or [p.text for p in ranked[:8]]
            met |= self.grader.grade_answer(case, answer, passages)
            pairs = [(m.cited_sentence(answer, i), t) for i, _, t in citations]
            met["citation_correct_llm"] = self.grader.grade_citations(pairs)
        timings = trace.get("timings") or {}
        row["timings"] |= {s: timings[s] for s in STAGES if isinstance(timings.get(s), int | float)}
        row["llm_calls"] = trace.get("llm_calls")


def table_groups(k: Sequence[int]) -> list[tuple[str, list[tuple[str, str]]]]:
    """The printed tables: (title, [(metric key, column label)]), every metric of the report."""
    at_k = [(f"{w}@{n}", f"ev {w[0].upper()}@{n}") for n in k for w in ("recall", "precision")]
    return [
        (
            "Planner and retrieval",
            [("action_accuracy", "act"), ("resource_precision", "res P"),
             ("resource_recall", "res R"), ("op_recall", "op R"), *at_k,
             ("recall@all", "ev R@all"), ("page_match", "page ok"), ("n_retrieved", "# paras")],
        ),
        (
            "Citations and answers",
            [("citation_correct", "cit ok"), ("citation_correct_llm", "cit ok LLM"),
             ("citation_support", "cit support"), ("citation_recall", "cit R"),
             ("n_citations", "# cites"), ("keyword_accuracy", "kw"), ("completeness", "compl"),
             ("groundedness", "ground"), ("abstention", "abst"),
             ("false_abstention", "false abst")],
        ),
    ]  # fmt: skip


def show(agg: dict[str, Any], console: Console, k: Sequence[int] = (5, 10)) -> None:
    """Every metric, overall and per kind (– = not applicable to the kind, or not graded)."""
    groups = [*agg["by_kind"].items(), ("overall", agg["overall"])]
    for title, metrics in table_groups(k):
        keys = [(key, lb) for key, lb in metrics if any(g.get(key) is not None for _, g in groups)]
        rows = [
            [name, g["n"], *(g.get(key) if g.get(key) is not None else "–" for key, _ in keys)]
            for name, g in groups
        ]
        print_table(
            f"{title} (mean per case)", ["kind", "n", *(lb for _, lb in keys)], rows, console
        )
    lat = agg["overall"]["latency"]
    print_table(
        "Latency per stage, seconds (all cases)", ["stage", "median", "p90"],
        [[s, v["median"], v["p90"]] for s, v in lat.items()], console,
    )  # fmt: skip


CHART = {
    "resource R": "resource_recall",
    "evidence R@all": "recall@all",
    "citation R": "citation_recall",
    "keywords": "keyword_accuracy",
    "abstention": "abstention",
}


def chart(name: str, agg: dict[str, Any], note: str, out: Path | None) -> Path:
    """Main metrics per kind as % (a metric that does not apply to a kind has no bar)."""
    groups = list(agg["by_kind"])
    series = {
        lb: [None if (v := agg["by_kind"][g].get(k)) is None else 100 * v for g in groups]
        for lb, k in CHART.items()
    }
    return bar_chart(
        name, groups, series, "% (mean per case)", "Briefing evaluation by kind", out, note
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=Path)
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument("--server", help="use this running server instead of starting one")
    ap.add_argument("--api-key", default="unused")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--interleave", action="store_true", help="round-robin cases over kinds")
    ap.add_argument("--grader", choices=["heuristic", "llm"], default="heuristic")
    ap.add_argument(
        "--grader-url", help="OpenAI-compatible /v1 URL (default: the server under test)"
    )
    ap.add_argument("--grader-model")
    ap.add_argument("--grader-key", default="unused")
    ap.add_argument("--out", type=Path, help="output folder (default benchmarks/results)")
    ap.add_argument("--name", help="report name (default eval_<cases file stem>)")
    ap.add_argument("--k", type=lambda s: [int(x) for x in s.split(",")], default=[5, 10])
    ap.add_argument(
        "--citation-threshold", type=float, default=0.4, help="n-gram support (server default)"
    )
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE for the started server")
    ap.add_argument(
        "--no-describe", dest="describe", action="store_false", help="skip LLM descriptions"
    )
    ap.add_argument("--describe-timeout", type=float, default=300.0)
    ap.add_argument(
        "--quick", action="store_true", help="3 cheap cases, small budgets, no descriptions"
    )
    ap.add_argument("--chart", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument(
        "--resume",
        action="store_true",
        help="keep the finished cases of the report already in the output folder, run the rest",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.cases = args.cases or CASES_DIR / "quick.jsonl"
        args.env = [f"{k}={v}" for k, v in QUICK_ENV.items()] + args.env
        args.describe = False
    if args.cases is None:
        ap.error("--cases is required (or --quick)")
    return args


def interleave(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Round-robin over kinds, so that ``--limit`` (or a run stopped early) covers every kind."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for c in cases:
        by_kind.setdefault(c["kind"], []).append(c)
    queues = list(by_kind.values())
    return [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]


def resumed(name: str, cases: list[dict[str, Any]], args: argparse.Namespace) -> list[dict]:
    """The error-free rows of the earlier report ``name`` for cases still in ``cases``, graded
    the same way (a heuristic row has no LLM grades to mix with LLM-graded ones)."""
    path = results_dir(args.out) / f"{name}.json"
    if not path.exists():
        return []
    old = json.loads(path.read_text())
    if old.get("config", {}).get("grader") != args.grader:
        raise SystemExit(f"--resume: {path} was graded by '{old['config'].get('grader')}'")
    wanted = {c["id"] for c in cases}
    return [r for r in old.get("cases", []) if r["id"] in wanted and not r.get("error")]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    # A log file is not a terminal: rich would squeeze the 13-column tables into 80 columns.
    console = Console() if sys.stdout.isatty() else Console(width=200)
    cases = load_cases(args.cases)
    cases = (interleave(cases) if args.interleave else cases)[: args.limit]
    env = dict(e.split("=", 1) for e in args.env)
    if not args.describe:
        env["BRIEF_DESCRIBE_DOCUMENTS"] = "false"
    name = args.name or f"eval_{args.cases.stem}"
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    report: dict[str, Any] = {"config": config | {"server_env": env, "cases_total": len(cases)}}
    report["machine"] = machine()
    server = None if args.server else LiveServer(env).start()
    base_url = args.server.rstrip("/").removesuffix("/v1") if args.server else server.base_url
    rows = resumed(name, cases, args) if args.resume else []
    if rows:
        report["config"]["resumed_cases"] = len(rows)
        console.print(f"resuming: {len(rows)} finished cases kept from the earlier report")
    done = {r["id"] for r in rows}
    try:
        grader = None
        if args.grader == "llm":
            import openai

            gclient = openai.OpenAI(
                base_url=args.grader_url or base_url + "/v1", api_key=args.grader_key, timeout=600
            )
            model = args.grader_model or next(
                x.id for x in gclient.models.list().data if "mpnet" not in x.id
            )
            grader = LLMGrader(gclient, model)
        runner = Runner(base_url, args.corpus, args, grader)
        report["config"]["model"] = runner.model
        for i, case in enumerate(cases, 1):
            if case["id"] in done:
                continue
            t0 = time.perf_counter()
            try:
                row = runner.run(case)
            except Exception as exc:  # noqa: BLE001 - one failing case must not end the run
                row = {
                    "id": case["id"],
                    "kind": case["kind"],
                    "error": f"{type(exc).__name__}: {exc}",
                }
            row["wall_s"] = round(time.perf_counter() - t0, 2)
            rows.append(row)
            status = row.get("error") or (
                f"kw={row['metrics'].get('keyword_accuracy')} ops={row.get('operations')}"
            )
            console.print(f"[{i}/{len(cases)}] {case['id']} ({row['wall_s']}s): {status}")
            # written after every case: a long run stopped early still leaves a report
            write_json(name, report | {"aggregates": m.aggregate(rows), "cases": rows}, args.out)
    finally:
        if server is not None:
            server.stop()
    agg = m.aggregate(rows)
    report |= {"aggregates": agg, "cases": rows}
    path = write_json(name, report, args.out)
    show(agg, console, args.k)
    if args.chart and agg["by_kind"]:
        chart(
            name,
            agg,
            f"{report['config'].get('model')}; n={len(rows)}; {args.cases.name}",
            args.out,
        )
    console.print(f"report: {path} ({results_dir(args.out)})")
    return report


if __name__ == "__main__":
    main()
