"""Operation planner: a (rewritten) question + the session's documents → SEARCH / READ operations.

Why it looks like this:

* The plan narrows the search space: a factual question about one of three documents becomes one
  SEARCH on that document; a compound question becomes sub-queries; a comparison becomes one
  SEARCH per document; "summarize" / "overview" becomes READ of the whole document.
* The model sees documents as short handles (D1, D2, …) with title, kind and description, and the
  JSON schema makes ``document`` an enum of the live handles: a 0.5B model cannot invent an id,
  and every backend enforces the schema. Temperature 0: the same question gets the same plan.
* In-context examples live in ``prompts/planner.toml`` and are rendered like the live request.
* Output is validated (unknown handles dropped, empty SEARCH queries get the rewritten query,
  duplicates removed, capped at ``max_operations``); an empty or unusable plan falls back to
  SEARCH of every document with the rewritten query, which is never worse than no plan.
* One deterministic shortcut: a session with exactly one document and a summary request is
  READ of it (no LLM call); every other case takes the LLM path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from engine.agent.config import AgentConfig
from engine.agent.prompts import load
from engine.agent.types import DocumentInfo, Operation, Rewrite
from engine.errors import InvalidRequest
from engine.llm.base import LLM, ChatMessage, SamplingParams, complete

_SUMMARY = re.compile(
    r"\b(summar(y|ies|ise|ize|ized|ised)|overview|outline|gist|tl;?dr|"
    r"(main|key) (points|ideas|topics|takeaways|findings)|"
    r"what (is|are) (this|these|the) (documents?|files?|papers?|reports?|decks?|slides?) about)\b",
    re.IGNORECASE,
)
QUERY_CHARS = 150  # a search query, not an essay
DESCRIPTION_WORDS = 30


def wants_summary(text: str) -> bool:
    return bool(_SUMMARY.search(text))


def handle(i: int) -> str:
    return f"D{i + 1}"


def _field(doc: DocumentInfo | Mapping[str, Any], name: str) -> Any:
    return doc.get(name) if isinstance(doc, Mapping) else getattr(doc, name)


def render_documents(docs: Sequence[DocumentInfo | Mapping[str, Any]]) -> str:
    lines = []
    for i, doc in enumerate(docs):
        title = " ".join(str(_field(doc, "title") or _field(doc, "filename")).split())[:100]
        line = f"{handle(i)}: {title} ({_field(doc, 'kind')}, {_field(doc, 'filename')})"
        if description := _field(doc, "description"):
            words = description.split()
            line += (
                ": "
                + " ".join(words[:DESCRIPTION_WORDS])
                + ("…" if len(words) > DESCRIPTION_WORDS else "")
            )
        lines.append(line)
    return "\n".join(lines)


def render_request(
    docs: Sequence[DocumentInfo | Mapping[str, Any]], question: str, original: str | None = None
) -> str:
    text = f"Documents:\n{render_documents(docs)}\n\nQuestion: {question}"
    if original and original.strip() != question.strip():
        text += f"\n(The user's words: {original})"
    return text


def schema(n_docs: int, max_operations: int) -> dict[str, Any]:
    """``document`` is an enum of the live handles; at most ``max_operations`` operations."""
    return {
        "type": "object",
        "properties": {
            "operations": {
                "type": "array",
                "minItems": 1,
                "maxItems": max(1, max_operations),
                "items": {
                    "type": "object",
                    "properties": {
                        "action": {"enum": ["SEARCH", "READ"]},
                        "document": {"enum": [handle(i) for i in range(n_docs)]},
                        "query": {"type": "string", "maxLength": QUERY_CHARS},
                    },
                    "required": ["action", "document", "query"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["operations"],
        "additionalProperties": False,
    }


def messages_for(docs: Sequence[DocumentInfo], rewrite: Rewrite) -> list[ChatMessage]:
    prompt = load("planner")
    messages = [ChatMessage("system", prompt.system)]
    for ex in prompt.examples:
        messages.append(ChatMessage("user", render_request(ex["documents"], ex["question"])))
        messages.append(ChatMessage("assistant", json.dumps({"operations": ex["operations"]})))
    messages.append(ChatMessage("user", render_request(docs, rewrite.rewritten, rewrite.original)))
    return messages


def validate(
    data: Any, docs: Sequence[DocumentInfo], rewrite: Rewrite, config: AgentConfig
) -> tuple[list[Operation], list[str]]:
    """Operations from the model's JSON, plus notes on what was repaired or dropped."""
    by_handle = {handle(i): d.doc_id for i, d in enumerate(docs)}
    items = data.get("operations") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return [], ["no operations list"]
    ops: list[Operation] = []
    notes: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    for item in items:
        if not isinstance(item, dict):
            notes.append(f"not an object: {item!r}")
            continue
        action, doc_id = item.get("action"), by_handle.get(str(item.get("document")))
        if action not in ("SEARCH", "READ") or doc_id is None:
            notes.append(f"invalid operation dropped: {item!r}")
            continue
        query = " ".join(str(item.get("query") or "").split())[:QUERY_CHARS]
        if action == "READ":
            query = ""
        elif not query:
            query = rewrite.rewritten
            notes.append(f"empty SEARCH query on {item.get('document')}: used the question")
        key = (action, doc_id, query.lower())
        if key in seen:
            notes.append(f"duplicate dropped: {item!r}")
            continue
        seen.add(key)
        ops.append(Operation(action, doc_id, query or None))
    if len(ops) > config.max_operations:
        notes.append(f"capped {len(ops)} operations at {config.max_operations}")
        ops = ops[: config.max_operations]
    return ops, notes


def fallback(docs: Sequence[DocumentInfo], rewrite: Rewrite) -> list[Operation]:
    """SEARCH every document with the rewritten query (deliberately not capped: no document
    should become unreachable because the planner failed)."""
    return [Operation("SEARCH", d.doc_id, rewrite.rewritten) for d in docs]


async def plan(
    llm: LLM, rewrite: Rewrite, docs: Sequence[DocumentInfo], config: AgentConfig
) -> tuple[list[Operation], dict[str, Any]]:
    """The operations for this question, and trace info (raw output, repairs, fallback)."""
    docs = list(docs)
    trace: dict[str, Any] = {"handles": {handle(i): d.doc_id for i, d in enumerate(docs)}}
    if not docs:
        return [], trace | {"fallback": "no documents"}
    if len(docs) == 1 and wants_summary(rewrite.rewritten):
        return [Operation("READ", docs[0].doc_id)], trace | {"shortcut": "one document, summary"}
    max_tokens = 16 + 60 * max(1, config.max_operations)
    params = SamplingParams(
        temperature=0.0,
        max_tokens=max_tokens,
        seed=0,
        json_schema=schema(len(docs), config.max_operations),
    )
    try:
        out = await complete(llm, messages_for(docs, rewrite), params)
    except InvalidRequest as exc:  # e.g. too many documents for the context: still answer
        return fallback(docs, rewrite), trace | {"fallback": f"planner request failed: {exc}"}
    trace["raw"] = out.text
    try:
        data = json.loads(out.text)
    except ValueError:
        reason = "truncated output" if out.finish_reason == "length" else "unparsable output"
        return fallback(docs, rewrite), trace | {"fallback": reason}
    ops, notes = validate(data, docs, rewrite, config)
    if notes:
        trace["repairs"] = notes
    if not ops:
        return fallback(docs, rewrite), trace | {"fallback": "empty plan"}
    return ops, trace
