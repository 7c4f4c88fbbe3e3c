"""Citations: check the generator's paragraph ids against the text, then turn them into refs.

The generator shows evidence as ``[label] text`` lines (labels from ``label_evidence``) and the
LLM cites labels: ``[3]``, ``[3-5]``, ``[3, 7]``, ``[3][4]``. A small model gets ids wrong, so
nothing it cites is trusted. Per sentence:

1. parse and remove its markers;
2. keep a cited paragraph whose ``support`` (n-gram recall, below) reaches ``min_overlap``;
   cited paragraphs that each reach half of it and *together* reach it are kept too (a sentence
   that combines two paragraphs);
3. replace a cited id that fails (or does not exist) by the best-supporting labelled paragraph
   that reaches ``min_overlap`` and covers words not yet covered, preferring the same document
   and nearby labels; an unmarked sentence gets the best paragraph above ``add_overlap`` (0.6);
4. collate the labels into ranges, split where the document changes or paragraph ids are not
   consecutive (a range never covers a paragraph that was not shown and checked);
5. dedupe: a range cited by the previous sentence is not repeated.

A claim without support stays uncited rather than pointing somewhere wrong. Output markers are
``[1]``, ``[2]``, … by first appearance, before the sentence's final punctuation;
``Citation.index`` is the marker's offset in the output. ``CitationStream.feed`` returns whole
sentences only (ended by ``.!?`` + whitespace + not lower case, or a line break), so any split
into deltas gives the same output as ``attach``; a ``screen`` may leave sentences out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from engine.agent.types import Citation, Context, DocumentInfo, Evidence
from engine.index.bm25 import STOPWORDS

ADD_OVERLAP = 0.6  # support needed to add a citation to a sentence the LLM left unmarked
MIN_TERMS = 2  # content words a sentence needs before its support means anything
ADD_MIN_TERMS = 3
NEAR_BONUS = 0.05  # ranking bonus for a replacement in the same document / within NEAR labels
NEAR = 2
QUOTE_CHARS = 160
MAX_MARKER_LABELS = 50  # a range like [1-1000] is not a citation

# Words that carry no claim, incl. how answers talk about their sources ("according to the
# document"), so that they neither create nor dilute support.
_EXTRA_STOPWORDS = frozenset(
    """about above after again all also am any because been before being below between both
    can could did do does doing down during each few further had having here how just may
    might more most must no nor not only other over own same should some than too under until
    up very would yet however thus therefore overall while within without via upon
    according document documents passage paragraph paragraphs source sources context text
    mentioned mentions stated says said""".split()
)
_STOP = STOPWORDS | _EXTRA_STOPWORDS
_TOKEN = re.compile(r"\w+(?:[.,]\d+)*")  # numbers keep their decimals / thousands
MARKER = re.compile(  # a citation marker as the model writes it; grounding.py skips these too
    r"\[\s*(?:(?:paragraphs?|paras?|p|sources?|refs?)\.?\s*)?"
    r"(\d+(?:\s*(?:[-–—,;]|and)\s*\d+)*)\s*\]",
    re.IGNORECASE,
)
_MARKER_WITH_SPACE = re.compile(r"[ \t]*" + MARKER.pattern, re.IGNORECASE)
_TERMINAL = ".!?…"
_CLOSERS = "\"'”’)»"
# A '.' after these never ends a sentence ("e.g. Word", "Fig. 3"); etc., Inc., Corp. often do.
_ABBREVIATIONS = frozenset(
    """e.g i.e vs cf fig figs eq eqs no nos vol pp p al approx incl mr mrs ms dr prof st jr sr
    jan feb mar apr jun jul aug sep sept oct nov dec dept univ sec ch art""".split()
)


# --- n-gram support ------------------------------------------------------------------------
def _stem(token: str) -> str:
    """A crude suffix stripper (plural, -ed, -ing, final e) applied to both sides alike."""
    if token[0].isdigit() or len(token) <= 3:
        return token
    if token.endswith("ies") and len(token) > 4:
        return token[:-3] + "y"
    for suffix in ("ing", "ed", "s"):
        if token.endswith(suffix) and len(token) - len(suffix) >= 3 and not token.endswith("ss"):
            token = token[: -len(suffix)]
            break
    return token[:-1] if token.endswith("e") and len(token) > 4 else token


def _terms(text: str) -> list[str]:
    out = []
    for raw in _TOKEN.findall(MARKER.sub(" ", text.lower())):
        token = raw.replace(",", "") if raw[0].isdigit() else raw
        if token in _STOP or (len(token) == 1 and not token.isdigit()):
            continue
        out.append(_stem(token))
    return out


def _grams(text: str) -> frozenset[tuple[str, ...]]:
    """Content-word unigrams and bigrams (bigrams over the content words, stopwords skipped)."""
    terms = _terms(text)
    return frozenset([(t,) for t in terms] + list(zip(terms, terms[1:], strict=False)))


def support(sentence: str, paragraph_text: str) -> float:
    """How much of the sentence the paragraph contains: the fraction of the sentence's
    content-word unigrams and bigrams (stopwords removed, light stemming, numbers kept as
    tokens) that occur in the paragraph. Recall of the sentence, not similarity, so a long
    paragraph is not penalised for saying more; bigrams reward shared phrases over shared
    vocabulary. 0 for a sentence without content words."""
    s = _grams(sentence)
    return len(s & _grams(paragraph_text)) / len(s) if s else 0.0


# --- labels and ranges ---------------------------------------------------------------------
def label_evidence(
    contexts_or_evidence: Iterable[Context | Evidence],
) -> list[tuple[int, Evidence]]:
    """Global labels 1..N for the evidence of a turn: grouped by document (in order of first
    appearance), in paragraph order within a document, each paragraph once. So consecutive
    paragraphs of a document get consecutive labels and ``[3-5]`` reads as a passage."""
    by_doc: dict[str, dict[int, Evidence]] = {}
    for item in contexts_or_evidence:
        for ev in item.evidence if isinstance(item, Context) else [item]:
            by_doc.setdefault(ev.doc_id, {}).setdefault(ev.paragraph.id, ev)
    ordered = [ev for doc in by_doc.values() for _, ev in sorted(doc.items())]
    return list(enumerate(ordered, start=1))


def collate(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge overlapping or adjacent inclusive ranges (reversed ones are turned round), sorted:
    ``[(10, 10), (8, 13), (9, 12)] -> [(8, 13)]``, ``[(3, 3), (4, 4)] -> [(3, 4)]``."""
    merged: list[list[int]] = []
    for a, b in sorted((min(a, b), max(a, b)) for a, b in ranges):
        if merged and a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def _cited(body: str) -> list[int]:
    """Labels cited by the markers of a sentence ("[3-5]", "[3, 7]", reversed ranges too)."""
    cited: list[int] = []
    for m in MARKER.finditer(body):
        for part in re.split(r"\s*(?:[,;]|and)\s*", m.group(1)):
            bounds = sorted(int(x) for x in re.split(r"\s*[-–—]\s*", part.strip()) if x)
            if bounds:
                a, b = bounds[0], bounds[-1]
                cited.extend(range(a, b + 1) if b - a < MAX_MARKER_LABELS else (a, b))
    return cited


# --- sentence splitting --------------------------------------------------------------------
def _is_abbreviation(text: str) -> bool:
    """Whether a '.' closing ``text`` belongs to an abbreviation or an initial."""
    m = re.search(r"(?:\b\w\.)*\b(\w+)$", text[-24:])
    if m is None:
        return False
    last = m.group(1)
    return m.group(0).lower() in _ABBREVIATIONS or (len(last) == 1 and last.isalpha())


def _after_terminal(buf: str, start: int, i: int, final: bool) -> int | None:
    """End of the sentence whose terminal punctuation is at ``i`` (after trailing markers), -1
    if it is not a sentence end, None if the text so far cannot tell."""
    n, j = len(buf), i
    while j < n and buf[j] in _TERMINAL:
        j += 1
    while j < n and buf[j] in _CLOSERS:
        j += 1
    if j == n:
        return n if final else None
    if buf[j] != "[" and not buf[j].isspace():
        return -1  # 3.5, e.g., U.S.-based
    if buf[i] == "." and j == i + 1 and _is_abbreviation(buf[start:i]):
        return -1
    end = k = j
    while k < n:
        if buf[k] == "\n":
            return end
        if buf[k].isspace():
            k += 1
        elif buf[k] == "[":
            m = MARKER.match(buf, k)
            if m is not None:
                end = k = m.end()
            elif "]" not in buf[k:] and not final:
                return None  # maybe a marker still arriving
            else:
                break
        else:
            break
    if k == n:
        return n if final else None
    return -1 if buf[k].islower() else end


def sentence_end(buf: str, start: int = 0, final: bool = False) -> int | None:
    """End of the first sentence in ``buf[start:]``, or None if more text is needed."""
    content = False
    i, n = start, len(buf)
    while i < n:
        ch = buf[i]
        if ch == "\n" and content:
            return i
        if ch == "[" and (m := MARKER.match(buf, i)) is not None:
            i = m.end()
            continue
        if ch in _TERMINAL and content:
            end = _after_terminal(buf, start, i, final)
            if end is None or end >= 0:
                return end
            while i + 1 < n and buf[i + 1] in _TERMINAL:
                i += 1
        if not ch.isspace():
            content = True
        i += 1
    return n if final else None


# --- the stream ----------------------------------------------------------------------------
def _quote(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= QUOTE_CHARS:
        return text
    cut = text.rfind(" ", 0, QUOTE_CHARS)
    return text[: cut if cut >= QUOTE_CHARS * 2 // 3 else QUOTE_CHARS].rstrip(",;: ") + "…"


class CitationStream:
    """Streams an answer through the citation check; see the module docstring."""

    def __init__(
        self,
        labelled: Sequence[tuple[int, Evidence]],
        docs: dict[str, DocumentInfo],
        min_overlap: float,
        *,
        add_overlap: float = ADD_OVERLAP,
        screen: Callable[[str], bool] | None = None,
    ):
        self.evidence = dict(labelled)
        self.screen = screen  # engine/agent/grounding.py
        self.docs = docs
        self.min_overlap = min_overlap
        self.add_overlap = add_overlap
        self.citations: list[Citation] = []
        self._grams = {lb: _grams(ev.paragraph.text) for lb, ev in self.evidence.items()}
        self._paragraphs = {(e.doc_id, e.paragraph.id): e.paragraph for e in self.evidence.values()}
        self._numbers: dict[tuple[str, int, int], int] = {}
        self._previous: set[tuple[str, int, int]] = set()
        self._buf = ""
        self._emitted = 0  # characters returned so far
        self._done = False

    def feed(self, delta: str) -> str:
        """Add LLM output; return the text that is now final (whole sentences)."""
        if self._done:
            raise RuntimeError("the citation stream is finished")
        self._buf += delta
        return self._drain(final=False)

    def finish(self) -> str:
        """Flush what is left; ``citations`` is complete afterwards."""
        if self._done:
            return ""
        out = self._drain(final=True)
        self._done = True
        return out

    def _drain(self, final: bool) -> str:
        out = []
        while self._buf:
            end = sentence_end(self._buf, 0, final)
            if end is None:
                break
            raw, self._buf = self._buf[:end], self._buf[end:]
            if self.screen is not None and not self.screen(raw):
                continue
            piece = self._sentence(raw if self._emitted else raw.lstrip())
            self._emitted += len(piece)
            out.append(piece)
        return "".join(out)

    def _sentence(self, raw: str) -> str:
        body = raw.strip()
        if not body:
            return raw
        lead = raw[: len(raw) - len(raw.lstrip())]
        trail = raw[len(raw.rstrip()) :]
        text = _MARKER_WITH_SPACE.sub("", body).strip(" \t")
        if not _terms(text):
            return lead + text + trail  # no claim: leave the chain of sources alone
        marked = MARKER.search(body) is not None
        sources = self._sources(self._resolve(text, _cited(body), marked))
        new = [s for s in sources if s not in self._previous]
        self._previous = set(sources)
        if not new:
            return lead + text + trail
        cut = len(text.rstrip(_TERMINAL)) if text.rstrip(_TERMINAL) else len(text)
        head, tail = text[:cut], text[cut:]
        sep = "" if head.endswith((" ", "\t")) else " "
        pos = self._emitted + len(lead) + len(head) + len(sep)
        markers = []
        for source in new:
            number = self._numbers.setdefault(source, len(self._numbers) + 1)
            self.citations.append(self._citation(source, pos))
            markers.append(f"[{number}]")
            pos += len(markers[-1])
        return lead + head + sep + "".join(markers) + tail + trail

    def _citation(self, source: tuple[str, int, int], index: int) -> Citation:
        doc_id, start, end = source
        para = self._paragraphs[(doc_id, start)]
        info = self.docs.get(doc_id)
        filename = info.filename if info else doc_id
        return Citation(doc_id, filename, start, end, para.page, _quote(para.text), index)

    def _resolve(self, sentence: str, cited: list[int], marked: bool) -> list[int]:
        """The labels a sentence keeps (see the module docstring, steps 2-3)."""
        grams = _grams(sentence)
        n_terms = sum(1 for g in grams if len(g) == 1)
        if n_terms < MIN_TERMS or (not marked and n_terms < ADD_MIN_TERMS):
            return []
        matched = {lb: grams & g for lb, g in self._grams.items()}
        cov = {lb: len(m) / len(grams) for lb, m in matched.items()}
        if not marked:
            best = max(cov, key=lambda lb: (cov[lb], -lb), default=None)
            return [best] if best is not None and cov[best] >= self.add_overlap else []
        m = self.min_overlap
        valid = list(dict.fromkeys(lb for lb in cited if lb in cov))
        kept = [lb for lb in valid if cov[lb] >= m]
        partial = sorted((lb for lb in valid if m / 2 <= cov[lb] < m), key=lambda lb: -cov[lb])
        covered = set().union(*(matched[lb] for lb in kept))
        if partial and len(covered.union(*(matched[lb] for lb in partial))) / len(grams) >= m:
            for lb in partial:
                if matched[lb] - covered:
                    kept.append(lb)
                    covered |= matched[lb]
        wrong = [lb for lb in dict.fromkeys(cited) if lb not in kept]
        near_docs = {self.evidence[lb].doc_id for lb in valid}
        for w in wrong:
            ref = {self.evidence[w].doc_id} if w in self.evidence else near_docs
            options = [
                lb for lb in cov if cov[lb] >= m and lb not in kept and matched[lb] - covered
            ]
            if options:
                best = max(options, key=lambda lb, w=w, ref=ref: self._prefer(lb, w, ref, cov))
                kept.append(best)
                covered |= matched[best]
        return sorted(kept)

    def _prefer(self, lb: int, wrong: int, ref: set[str], cov: dict[int, float]) -> tuple:
        """Rank of a replacement: support, nudged towards the cited document and label."""
        near = (self.evidence[lb].doc_id in ref) + (abs(lb - wrong) <= NEAR)
        return (cov[lb] + NEAR_BONUS * near, -abs(lb - wrong))

    def _sources(self, labels: list[int]) -> list[tuple[str, int, int]]:
        """Label ranges → (doc_id, first paragraph, last paragraph), split wherever the document
        changes or paragraph ids are not consecutive."""
        out: list[tuple[str, int, int]] = []
        for a, b in collate((lb, lb) for lb in labels):
            run: list[int] = []
            for lb in (x for x in range(a, b + 1) if x in self.evidence):
                ev = self.evidence[lb]
                if run:
                    last = self.evidence[run[-1]]
                    if last.doc_id != ev.doc_id or ev.paragraph.id != last.paragraph.id + 1:
                        out.append(self._source(run))
                        run = []
                run.append(lb)
            if run:
                out.append(self._source(run))
        return list(dict.fromkeys(out))

    def _source(self, run: list[int]) -> tuple[str, int, int]:
        first, last = self.evidence[run[0]], self.evidence[run[-1]]
        return (first.doc_id, first.paragraph.id, last.paragraph.id)


def attach(
    answer: str,
    labelled: Sequence[tuple[int, Evidence]],
    docs: dict[str, DocumentInfo],
    min_overlap: float,
) -> tuple[str, list[Citation]]:
    """The whole answer at once: (text with our markers, citations)."""
    stream = CitationStream(labelled, docs, min_overlap)
    text = stream.feed(answer) + stream.finish()
    return text, stream.citations


def annotation(c: Citation) -> dict[str, Any]:
    """The OpenAI-style ``file_citation`` annotation of DESIGN.md §2."""
    return {
        "type": "file_citation",
        "index": c.index,
        "file_citation": {
            "file_id": c.doc_id,
            "filename": c.filename,
            "page": c.page,
            "paragraphs": [c.start, c.end],
            "quote": c.quote,
        },
    }
