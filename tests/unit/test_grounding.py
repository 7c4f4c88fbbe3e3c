"""The figure check (engine/agent/grounding.py): which numbers count as shown, which sentences
are left out, and what the answer says instead."""

from __future__ import annotations

import pytest

from engine.agent.citations import attach
from engine.agent.grounding import ABSTAIN, FigureCheck, figures
from engine.agent.types import DocumentInfo, Evidence
from engine.ingest.document import Paragraph

SHOWN = [
    "Net revenue was $12,437 million in fiscal 2022, compared with $11,020 million in 2021.",
    "The gross margin ratio was 0.415 and the company had 1,024 employees.",
    "Diluted EPS of $3.27 (page 4)",
]


def test_figures_read_decimals_thousands_and_scale_words():
    assert figures("$12.4 million, 1,024 staff, 41.5% [3] and 2.5bn") == [
        ("12.4 million", 12.4e6, 1, 1e6),
        ("1,024", 1024.0, 0, 1.0),
        ("41.5", 41.5, 1, 1.0),
        ("2.5bn", 2.5e9, 1, 1e9),
    ]
    # Labels, identifiers and ordinals are not figures.
    assert figures("GPT3 and Q4 FY2022 the 3rd [12] [2-4] [p. 7] [paragraphs 3 and 5]") == []


def test_only_citation_markers_are_skipped_not_any_bracketed_text():
    """The markers are the citation module's own grammar; a figure in other brackets counts."""
    assert [f.written for f in figures("Sales rose [see note 12.4] to 80 [Table 3, 2021].")] == [
        "12.4",
        "80",
        "3",
        "2021",
    ]
    check = FigureCheck(SHOWN)
    assert not check.screen("Revenue was $12.4 billion [restated: 13.9].")
    assert check.unsupported == ["13.9"]


@pytest.mark.parametrize(
    "sentence",
    [
        "Revenue was $12,437 million in 2022.",
        "Revenue was $12.4 billion in 2022.",  # millions written as billions, rounded
        "Revenue rose from $11.0 billion to $12.44 billion.",
        "The gross margin was 41.5%.",  # a ratio written as a percentage
        "About 1,000 people work there.",  # no: see below
    ][:4]
    + ["The company had 1,024 employees.", "Diluted EPS was $3.27.", "It has 3 plants."],
)
def test_figures_that_round_from_something_shown_are_kept(sentence):
    check = FigureCheck(SHOWN)
    assert check.screen(sentence)
    assert check.closing() == ""


@pytest.mark.parametrize(
    "sentence, figure",
    [
        ("The Wang cost $12.5 million when launched.", "12.5 million"),
        ("The company had 1,000 employees.", "1,000"),  # 1,024 does not round to 1,000
        ("It was founded in 1987.", "1987"),
        ("EPS was $3.2.", "3.2"),  # 3.27 rounds to 3.3, not 3.2
    ],
)
def test_a_sentence_with_a_figure_nothing_shows_is_left_out(sentence, figure):
    check = FigureCheck(SHOWN)
    assert not check.screen(sentence)
    assert check.unsupported == [figure] and check.dropped == [sentence]


def test_the_question_and_page_numbers_count_as_shown():
    check = FigureCheck([*SHOWN, "What did the 1987 launch cost?"])
    assert check.screen("It launched in 1987.") and check.screen("See page 4 of the report.")


def test_nothing_kept_turns_into_an_abstention_and_a_partial_drop_into_a_note():
    check = FigureCheck(SHOWN)
    assert not check.screen("It cost $99 million [1].")
    assert check.closing() == ABSTAIN
    check = FigureCheck(SHOWN)
    assert check.screen("Revenue was $12.4 billion [1].")
    assert not check.screen("Profit was $2.2 billion [2].")
    assert not check.screen("Margins rose to 45%.")
    assert check.closing() == (
        "\n\n(Left out 2 statements with figures not found in the documents: 2.2 billion, 45.)"
    )


def test_the_citation_stream_skips_screened_sentences_and_keeps_offsets_right():
    paras = [Paragraph(0, SHOWN[0], page=1), Paragraph(1, SHOWN[1], page=2)]
    labelled = [(i + 1, Evidence("f", p, 1.0, "search", 0)) for i, p in enumerate(paras)]
    docs = {"f": DocumentInfo("f", "r.pdf", "R", "pdf")}
    check = FigureCheck(p.text for p in paras)
    from engine.agent.citations import CitationStream

    stream = CitationStream(labelled, docs, 0.35, screen=check.screen)
    text = stream.feed("Revenue was invented at $99 million in 2022 [1]. ")
    text += stream.feed("The company had 1,024 employees [2].") + stream.finish()
    assert text == "The company had 1,024 employees [1]."
    (c,) = stream.citations
    assert text[c.index : c.index + 3] == "[1]" and c.start == 1
    # Without the screen the same answer keeps both sentences.
    plain, _ = attach("Revenue was $99 million in 2022 [1].", labelled, docs, 0.35)
    assert "$99 million" in plain
