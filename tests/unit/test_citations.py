"""Citations: collator, n-gram support, labels, and the streaming check over real paragraphs."""

from __future__ import annotations

import random
import re

import pytest

from engine.agent.citations import (
    CitationStream,
    annotation,
    attach,
    collate,
    label_evidence,
    sentence_end,
    support,
)
from engine.agent.config import AgentConfig
from engine.agent.types import Context, Operation
from tests.unit.agent_fixtures import (
    MemorySession,
    evidence_of,
    word_processor_and_autogen,
)

MIN = AgentConfig().citation_min_overlap

# Sentences paraphrasing paragraphs of the word processor document (wp) and AutoGen (ag).
MS_WORD = "Microsoft launched Word for MS-DOS in 1983, introducing a GUI and mouse support"
WORDSTAR = "WordStar was one of the first widely used word processing programs"
GDOCS = "Google Docs enabled real-time editing and sharing"
AUTOGEN_FW = "AutoGen is a generalized multi-agent conversation framework"
UNSUPPORTED = "The weather in Paris is lovely in spring"


@pytest.fixture(scope="module")
def session() -> MemorySession:
    return word_processor_and_autogen()


@pytest.fixture(scope="module")
def labelled(session):
    """Labels: 1-8 = wp paragraphs 11,12,13,14,16,17,18,19; 9-12 = ag paragraphs 4-7."""
    ev = evidence_of(session, "wp", [11, 12, 13, 14, 16, 17, 18, 19])
    return label_evidence(ev + evidence_of(session, "ag", [4, 5, 6, 7]))


@pytest.fixture(scope="module")
def docs(session):
    return dict(session.infos)


def markers(text: str) -> list[str]:
    return re.findall(r"\[\d+\]", text)


def check_indexes(text: str, citations) -> None:
    """Every citation's index points at a marker and every marker has its citation."""
    assert sorted(c.index for c in citations) == [m.start() for m in re.finditer(r"\[\d+\]", text)]
    number = {}
    for c in citations:
        m = re.match(r"\[(\d+)\]", text[c.index :])
        assert m is not None
        assert number.setdefault((c.doc_id, c.start, c.end), m.group(1)) == m.group(1)


# --- collator -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ranges", "expected"),
    [
        ([(10, 10), (8, 13), (9, 12)], [(8, 13)]),  # the example
        ([(3, 3)], [(3, 3)]),
        ([(3, 3), (4, 4)], [(3, 4)]),  # adjacent
        ([(7, 9), (1, 2)], [(1, 2), (7, 9)]),  # disjoint, sorted
        ([(5, 3)], [(3, 5)]),  # reversed
        ([(5, 3), (6, 6)], [(3, 6)]),
        ([(4, 4), (4, 4), (4, 4)], [(4, 4)]),  # duplicates
        ([(1, 3), (3, 5), (7, 8), (9, 9)], [(1, 5), (7, 9)]),
        ([], []),
    ],
)
def test_collate(ranges, expected):
    assert collate(ranges) == expected


# --- support --------------------------------------------------------------------------------
def test_support_is_recall_of_content_ngrams(labelled):
    text = labelled[2][1].paragraph.text  # wp 13, Microsoft Word
    assert support(MS_WORD, text) > 0.8
    assert support(MS_WORD + " [3].", text) == support(MS_WORD, text)  # markers ignored
    assert support(UNSUPPORTED, text) == 0.0
    assert support("It is what it was.", text) == 0.0  # stopwords only
    assert support(MS_WORD, "") == 0.0 and support("", text) == 0.0
    # word order matters through bigrams; numbers are content words
    assert support("Word for MS-DOS in 1983", text) > support("DOS MS for Word in 1983", text)
    assert support("Revenue was 4,200 million", "revenue of 4200 million") == 1.0
    assert support("Revenue was 4,200 million", "revenue of 3900 million") < 0.5


# --- labels ---------------------------------------------------------------------------------
def test_label_evidence_groups_documents_in_paragraph_order(session):
    a = Context(Operation("SEARCH", "wp", "q"), evidence_of(session, "wp", [12, 13]))
    b = Context(Operation("SEARCH", "ag", "q"), evidence_of(session, "ag", [5]))
    c = Context(Operation("SEARCH", "wp", "q2"), evidence_of(session, "wp", [11, 30, 13]))
    out = label_evidence([a, b, c])
    assert [lb for lb, _ in out] == [1, 2, 3, 4, 5]
    assert [(ev.doc_id, ev.paragraph.id) for _, ev in out] == [
        ("wp", 11),
        ("wp", 12),
        ("wp", 13),
        ("wp", 30),
        ("ag", 5),
    ]
    assert label_evidence(evidence_of(session, "ag", [2, 1])) == label_evidence(
        [Context(Operation("READ", "ag"), evidence_of(session, "ag", [1, 2]))]
    )
    assert label_evidence([]) == []


# --- the check ------------------------------------------------------------------------------
def test_correct_citation_kept_and_mapped(labelled, docs, session):
    text, cites = attach(f"{MS_WORD} [3].", labelled, docs, MIN)
    assert text == f"{MS_WORD} [1]."
    (c,) = cites
    para = session.paragraphs("wp")[13]
    assert (c.doc_id, c.start, c.end, c.filename) == ("wp", 13, 13, "multi_page.pdf")
    assert c.page == para.page and para.text.startswith(c.quote.rstrip("…"))
    assert len(c.quote) <= 161
    check_indexes(text, cites)
    assert annotation(c) == {
        "type": "file_citation",
        "index": c.index,
        "file_citation": {
            "file_id": "wp",
            "filename": "multi_page.pdf",
            "page": para.page,
            "paragraphs": [13, 13],
            "quote": c.quote,
        },
    }


def test_wrong_id_corrected_missing_added_unsupported_dropped(labelled, docs):
    answer = f"{MS_WORD} [7]. {GDOCS}. {UNSUPPORTED} [2]. {AUTOGEN_FW} [99]."
    text, cites = attach(answer, labelled, docs, MIN)
    assert text == f"{MS_WORD} [1]. {GDOCS} [2]. {UNSUPPORTED}. {AUTOGEN_FW} [3]."
    assert [(c.doc_id, c.start, c.end) for c in cites] == [
        ("wp", 13, 13),  # [7] (wp 18) corrected to wp 13
        ("wp", 19, 19),  # added: no marker but a strong match
        ("ag", 4, 4),  # [99] does not exist: the supporting paragraph is found
    ]
    check_indexes(text, cites)


def test_unmarked_weak_sentences_stay_unmarked(labelled, docs):
    text, cites = attach("Word processors changed over time. Yes.", labelled, docs, MIN)
    assert cites == [] and text == "Word processors changed over time. Yes."
    text, cites = attach("Yes [3].", labelled, docs, MIN)  # too little to check: dropped
    assert cites == [] and text == "Yes."


def test_markers_renumbered_by_first_appearance_and_deduped(labelled, docs):
    answer = (
        f"{GDOCS} [8]. The introduction of cloud-based word processing revolutionized "
        f"collaboration [8]. {MS_WORD} [3]. {GDOCS} [8]."
    )
    text, cites = attach(answer, labelled, docs, MIN)
    # the second sentence repeats the first one's source: no second marker
    assert markers(text) == ["[1]", "[2]", "[1]"]
    assert text.startswith(f"{GDOCS} [1]. The introduction of cloud-based word processing ")
    assert [(c.start, c.end) for c in cites] == [(19, 19), (13, 13), (19, 19)]
    check_indexes(text, cites)


def test_ranges_collated_and_split_at_documents_and_gaps(labelled, docs):
    joint = f"{WORDSTAR}, and {MS_WORD} [3][2]."
    text, cites = attach(joint, labelled, docs, MIN)
    assert [(c.doc_id, c.start, c.end) for c in cites] == [("wp", 12, 13)]
    assert markers(text) == ["[1]"]
    # labels 8-9 span two documents: two sources, two markers
    both = f"{GDOCS}, while {AUTOGEN_FW} [8-9]."
    text, cites = attach(both, labelled, docs, MIN)
    assert [(c.doc_id, c.start, c.end) for c in cites] == [("wp", 19, 19), ("ag", 4, 4)]
    assert text.endswith(" [1][2].")
    check_indexes(text, cites)
    # labels 4-5 are wp paragraphs 14 and 16: never a range that covers unseen paragraph 15
    gap = (
        "WordPerfect was popular among legal professionals, and by the 1990s word processing "
        "software had features like spell check and grammar check [4-5]."
    )
    _, cites = attach(gap, labelled, docs, MIN)
    assert [(c.start, c.end) for c in cites] == [(14, 14), (16, 16)]


def test_range_with_an_unsupporting_paragraph_is_trimmed(labelled, docs):
    _, cites = attach(f"{MS_WORD} [1-4].", labelled, docs, MIN)
    assert [(c.start, c.end) for c in cites] == [(13, 13)]


ANSWER = (
    f"{MS_WORD} [3]. {WORDSTAR} [2][3]. As the figures show (e.g. Fig. 3), adoption was "
    f"3.5 times faster [5]. {GDOCS}.[8] {UNSUPPORTED} [1].\n\n"
    f"- {AUTOGEN_FW} [9, 10]\n- {GDOCS} [12]\n"
    "Overall, the answer ends here"
)


def test_streaming_in_random_deltas_equals_attach(labelled, docs):
    expected_text, expected = attach(ANSWER, labelled, docs, MIN)
    check_indexes(expected_text, expected)
    assert len(expected) >= 4
    rng = random.Random(7)
    for _ in range(25):
        stream = CitationStream(labelled, docs, MIN)
        out, i = [], 0
        while i < len(ANSWER):
            step = rng.randint(1, 12)
            piece = stream.feed(ANSWER[i : i + step])
            # only whole sentences come out: no stray LLM marker fragments
            assert not re.search(r"\[\d*$", piece)
            out.append(piece)
            i += step
        out.append(stream.finish())
        assert "".join(out) == expected_text
        assert stream.citations == expected
    with pytest.raises(RuntimeError):
        stream.feed("more")


def test_feed_returns_only_final_sentences(labelled, docs):
    stream = CitationStream(labelled, docs, MIN)
    assert stream.feed(f"{MS_WORD} [3") == ""
    assert stream.feed("]. ") == ""  # a marker may still follow the full stop
    assert stream.feed("[3] W") == f"{MS_WORD} [1]."
    rest = stream.feed(WORDSTAR[1:] + " [2].") + stream.finish()
    assert rest == f" {WORDSTAR} [2]."
    assert [c.start for c in stream.citations] == [13, 12]


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("Tools (e.g. Grammarly) help. Next one.", ["Tools (e.g. Grammarly) help.", " Next one."]),
        ("See Fig. 3 for details. Then stop.", ["See Fig. 3 for details.", " Then stop."]),
        ("It grew 3.5% in 2023 [3]. Then", ["It grew 3.5% in 2023 [3].", " Then"]),
        ("It grew. [3] [4-5] The end.", ["It grew. [3] [4-5]", " The end."]),
        ("It grew. [3] and more. End", ["It grew. [3] and more.", " End"]),
        ("Done?! Yes... Sure.", ["Done?!", " Yes...", " Sure."]),
        ("a list:\n- one [2]\n- two", ["a list:", "\n- one [2]", "\n- two"]),
        ('He said "it grew." Then', ['He said "it grew."', " Then"]),
    ],
)
def test_sentence_splitting(text, sentences):
    out, rest = [], text
    while rest:
        end = sentence_end(rest, 0, final=True)
        out.append(rest[:end])
        rest = rest[end:]
    assert out == sentences
    assert sentence_end("It grew. ", 0, final=False) is None  # undecided until more text
