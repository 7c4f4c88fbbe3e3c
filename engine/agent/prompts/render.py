"""How generation prompts show documents, operations, paragraphs and notes to the model.

One set of functions renders both the live request and the in-context examples of the prompt
files, so the examples always show exactly the format the model is asked to follow. Documents
are shown by the same short handles as in the planner (D1, D2, … in session order), and every
paragraph as one line ``[label] text`` under a header naming its document, kind and page: the
labels are what the model cites.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from engine.agent.prompts import PromptFile
from engine.agent.types import DocumentInfo, Operation
from engine.llm.base import ChatMessage

CITE = "Cite the labels, like [2]."  # the last words the model reads before answering
TITLE_CHARS = 60
DESCRIPTION_WORDS = 25


def handles(docs: Sequence[DocumentInfo]) -> dict[str, str]:
    """doc_id → D1, D2, … in session order (the planner uses the same numbering)."""
    return {d.doc_id: f"D{i + 1}" for i, d in enumerate(docs)}


def _title(doc: DocumentInfo | None, doc_id: str) -> str:
    if doc is None:
        return doc_id
    title = " ".join((doc.title or doc.filename).split())
    return title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 1] + "…"


def doc_header(handle: str, doc: DocumentInfo | None, page: int | None, doc_id: str = "") -> str:
    kind = doc.kind if doc is not None else "document"
    where = f"{kind}, page {page}" if page is not None else kind
    return f"## {handle}: {_title(doc, doc_id)} ({where})\n"


def paragraph_line(label: int, text: str, cut: bool = False) -> str:
    return f"[{label}] {' '.join(text.split())}{' …' if cut else ''}\n"


def render_paragraphs(
    lines: Iterable[tuple[int, str, int | None, str]],
    docs: Mapping[str, DocumentInfo],
    names: Mapping[str, str],
) -> str:
    """``(label, doc_id, page, text)`` lines with a header whenever the document or page changes."""
    out, current = [], None
    for label, doc_id, page, text in lines:
        if (doc_id, page) != current:
            out.append(doc_header(names.get(doc_id, "D?"), docs.get(doc_id), page, doc_id))
            current = (doc_id, page)
        out.append(paragraph_line(label, text))
    return "".join(out)


def task_block(
    operations: Sequence[Operation], docs: Mapping[str, DocumentInfo], names: Mapping[str, str]
) -> str:
    """The documents the plan touches (with descriptions) and the plan itself."""
    involved = list(dict.fromkeys(op.document for op in operations))
    lines = ["Documents:"]
    for doc_id in involved:
        doc = docs.get(doc_id)
        line = f"{names.get(doc_id, 'D?')}: {_title(doc, doc_id)} ({doc.kind if doc else '?'})"
        if doc is not None and doc.description:
            line += ": " + " ".join(doc.description.split()[:DESCRIPTION_WORDS])
        lines.append(line)
    steps = [
        f'SEARCH {names.get(op.document, "D?")} for "{op.query}"'
        if op.action == "SEARCH"
        else f"READ {names.get(op.document, 'D?')}"
        for op in operations
    ]
    lines.append("Plan: " + "; ".join(steps))
    return "\n".join(lines)


def question_block(original: str, rewritten: str) -> str:
    text = f"Question: {original}"
    if rewritten.strip() != original.strip():
        text += f"\nStandalone question: {rewritten}"
    return text


def sources_line(
    runs: Sequence[tuple[str, int, int]],
    docs: Mapping[str, DocumentInfo],
    names: Mapping[str, str],
) -> str:
    """``(doc_id, first label, last label)`` runs → "D1 (pdf) [1]-[6]; D3 (pptx) [7]"."""
    parts = []
    for doc_id, first, last in runs:
        doc = docs.get(doc_id)
        span = f"[{first}]" if first == last else f"[{first}]-[{last}]"
        parts.append(f"{names.get(doc_id, 'D?')} ({doc.kind if doc else '?'}) {span}")
    return "; ".join(parts)


def notes_block(parts: Sequence[tuple[int, str, str]]) -> str:
    """``(split number, sources line, notes)`` → the reducer's view of the mappers' outputs."""
    return "\n\n".join(f"Part {n}, from {sources}:\n{notes.strip()}" for n, sources, notes in parts)


# -- in-context examples ---------------------------------------------------------------------
def _example_docs(ex: Mapping[str, Any]) -> tuple[list[DocumentInfo], list[Operation]]:
    docs = [
        DocumentInfo(
            f"example-{i}",
            d.get("filename", d["title"]),
            d["title"],
            d["kind"],
            d.get("description"),
        )
        for i, d in enumerate(ex["documents"])
    ]
    ops = [
        Operation(o["action"], docs[o["document"]].doc_id, o.get("query") or None)
        for o in ex["operations"]
    ]
    return docs, ops


def example_messages(prompt: PromptFile) -> list[ChatMessage]:
    """System text plus each example as a user/assistant pair, rendered like live requests."""
    messages = [ChatMessage("system", prompt.system)]
    for ex in prompt.examples:
        docs, ops = _example_docs(ex)
        by_id, names = {d.doc_id: d for d in docs}, handles(docs)
        question = question_block(ex["question"], ex["question"])
        if "parts" in ex:
            parts = [
                (
                    n,
                    sources_line(
                        [
                            (docs[s["document"]].doc_id, s["first"], s["last"])
                            for s in part["sources"]
                        ],
                        by_id,
                        names,
                    ),
                    part["notes"],
                )
                for n, part in enumerate(ex["parts"], start=1)
            ]
            user = reducer_request(ops, by_id, names, parts, question)
        else:
            lines = [
                (p["label"], docs[p["document"]].doc_id, p.get("page"), p["text"])
                for p in ex["paragraphs"]
            ]
            user = evidence_request(
                ops, by_id, names, render_paragraphs(lines, by_id, names), question
            )
        messages += [ChatMessage("user", user), ChatMessage("assistant", ex["answer"].strip())]
    return messages


def evidence_request(
    operations: Sequence[Operation],
    docs: Mapping[str, DocumentInfo],
    names: Mapping[str, str],
    paragraphs: str,
    question: str,
) -> str:
    """The user message of a direct answer or a mapper: task, paragraphs, then the question."""
    return f"{task_block(operations, docs, names)}\n\nParagraphs:\n{paragraphs}\n{question}\n{CITE}"


def reducer_request(
    operations: Sequence[Operation],
    docs: Mapping[str, DocumentInfo],
    names: Mapping[str, str],
    parts: Sequence[tuple[int, str, str]],
    question: str,
) -> str:
    notes = notes_block(parts)
    return f"{task_block(operations, docs, names)}\n\nNotes:\n{notes}\n\n{question}\n{CITE}"
