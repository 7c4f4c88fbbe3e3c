"""Sessions as OpenAI vector stores, driven by the official SDK against a real server with the
real encoder (the "Done when" of the ingestion issue)."""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

pytestmark = pytest.mark.slow


def upload(client, vs_id: str, path: Path):
    with path.open("rb") as fh:
        return client.vector_stores.files.upload_and_poll(
            vector_store_id=vs_id, file=fh, poll_interval_ms=200
        )


FORMATS = [
    "documents/unstructured/pdf/multi-column.pdf",
    "documents/docling/docx/word_sample.docx",
    "documents/docling/pptx/powerpoint_sample.pptx",
    "documents/unstructured/html/example-10k-1p.html",
]


@pytest.fixture
def store(client):
    vs = client.vector_stores.create(name="test session")
    yield vs
    try:
        client.vector_stores.delete(vs.id)
    except openai.NotFoundError:
        pass


@pytest.fixture(scope="module")
def formats_store(client, corpus):
    """One session holding a PDF, a DOCX, a PPTX and an HTML file, each uploaded and polled."""
    vs = client.vector_stores.create(name="formats")
    files = {rel: upload(client, vs.id, corpus / rel) for rel in FORMATS}
    yield vs, files
    client.vector_stores.delete(vs.id)


def paragraphs(live_server, vs_id: str, file_id: str) -> list[dict]:
    r = httpx.get(f"{live_server.base_url}/v1/vector_stores/{vs_id}/files/{file_id}/content")
    r.raise_for_status()
    return r.json()["data"]


@pytest.mark.parametrize("rel", FORMATS)
def test_upload_and_search_each_format(client, live_server, formats_store, rel):
    vs, files = formats_store
    f = files[rel]
    assert f.status == "completed", f.last_error
    paras = [p for p in paragraphs(live_server, vs.id, f.id) if len(p["text"].split()) >= 6]
    para = paras[len(paras) // 2]  # a paragraph from the middle of the document
    phrase = " ".join(para["text"].split()[:12])
    res = client.vector_stores.search(vector_store_id=vs.id, query=phrase, max_num_results=5)
    assert res.data, "no results"
    assert res.data[0].file_id == f.id and res.data[0].filename == Path(rel).name
    # the paragraph is in one of the top 3 chunks, which carries its page
    hit = next(h for h in res.data[:3] if para["paragraph"] in h.model_extra["paragraphs"])
    by_id = {p["paragraph"]: p for p in paragraphs(live_server, vs.id, f.id)}
    assert hit.model_extra["page"] == by_id[hit.model_extra["paragraphs"][0]]["page"]
    assert para["page"] in {by_id[i]["page"] for i in hit.model_extra["paragraphs"]}
    assert " ".join(para["text"].split()[:6]) in " ".join(hit.content[0].text.split())
    assert all(0 <= h.score <= 1 for h in res.data)


def test_pdf_phrase_lands_on_its_page(client, formats_store):
    vs, files = formats_store
    dpr = files[FORMATS[0]]
    res = client.vector_stores.search(
        vector_store_id=vs.id,
        query="Dense Passage Retrieval for Open-Domain Question Answering",
        extra_body={"file_ids": [dpr.id]},
    )
    assert res.data[0].model_extra["page"] == 1
    res = client.vector_stores.search(
        vector_store_id=vs.id,
        query="in-batch negatives",
        extra_body={"file_ids": [dpr.id]},
        max_num_results=3,
    )
    # The phrase is introduced on page 3 and studied on pages 4-6 (Section 5.2, Table 3): every
    # hit must be a passage about it, on a page that uses it (with stemmed BM25 the page-6
    # section "In-batch negative training" ranks first).
    assert res.data and all("in-batch" in h.content[0].text.lower() for h in res.data)
    assert {h.model_extra["page"] for h in res.data} <= {3, 4, 5, 6}


def test_file_status_reports_stages_and_metadata(client, formats_store):
    vs, files = formats_store
    f = client.vector_stores.files.retrieve(vector_store_id=vs.id, file_id=files[FORMATS[0]].id)
    stages, doc = f.model_extra["stages"], f.model_extra["document"]
    assert stages["embedded"] == stages["to_embed"] > 10
    assert 0 < stages["queryable_s"] <= stages["completed_s"]
    assert doc["kind"] == "pdf" and doc["pages"] == 13 and doc["paragraphs"] > 100


def test_broken_files_fail_clearly_and_spoil_nothing(client, store, corpus):
    good = upload(client, store.id, corpus / "documents/docling/pdf/multi_page.pdf")
    enc = upload(client, store.id, corpus / "documents/docling/pdf/2206.01062_pg3_password1234.pdf")
    ocr = upload(client, store.id, corpus / "documents/docling/pdf/nemotron_multipage.pdf")
    assert good.status == "completed"
    assert enc.status == "failed" and "encrypted" in enc.last_error.message
    assert ocr.status == "failed" and "no text layer" in ocr.last_error.message
    vs = client.vector_stores.retrieve(store.id)
    assert vs.file_counts.completed == 1 and vs.file_counts.failed == 2
    res = client.vector_stores.search(vector_store_id=store.id, query="word processor")
    assert res.data and all(h.file_id == good.id for h in res.data)


def test_unsupported_upload_is_415(client, live_server, tmp_path):
    exe = tmp_path / "tool.bin"
    exe.write_bytes(b"\x7fELF" + bytes(range(256)) * 8)
    with pytest.raises(openai.APIStatusError) as e:
        client.files.create(file=exe.open("rb"), purpose="assistants")
    assert e.value.status_code == 415


def test_sessions_are_isolated_and_delete_frees_everything(client, live_server, corpus):
    before = httpx.get(live_server.base_url + "/stats").json()
    a = client.vector_stores.create(name="a")
    b = client.vector_stores.create(name="b")
    fa = upload(client, a.id, corpus / "documents/docling/pdf/multi_page.pdf")
    fb = upload(client, b.id, corpus / "documents/unstructured/pdf/reliance.pdf")
    ra = client.vector_stores.search(vector_store_id=a.id, query="annual report revenue")
    assert all(h.file_id == fa.id for h in ra.data)
    rb = client.vector_stores.search(vector_store_id=b.id, query="word processor")
    assert all(h.file_id == fb.id for h in rb.data)
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.files.retrieve(vector_store_id=a.id, file_id=fb.id)

    client.vector_stores.delete(a.id)
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.retrieve(a.id)
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.search(vector_store_id=a.id, query="x")
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(fa.id)
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.files.retrieve(vector_store_id=a.id, file_id=fa.id)
    assert client.vector_stores.retrieve(b.id).file_counts.completed == 1
    client.vector_stores.delete(b.id)
    stats = httpx.get(live_server.base_url + "/stats").json()
    assert stats == before  # sessions, files, bytes, chunks and vectors all given back


class _Pages(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass


def test_url_source(client, live_server, corpus):
    handler = lambda *a, **k: _Pages(*a, directory=str(corpus / "documents"), **k)  # noqa: E731
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_port}/unstructured/html/example-10k-1p.html"
        created = client.post(
            "/files", body={"url": url, "purpose": "assistants"}, cast_to=openai.types.FileObject
        )
        assert created.filename.endswith(".html")
        vs = client.vector_stores.create(name="url", file_ids=[created.id])
        deadline = time.monotonic() + 60
        while client.vector_stores.retrieve(vs.id).file_counts.in_progress:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        f = client.vector_stores.files.retrieve(vector_store_id=vs.id, file_id=created.id)
        assert f.status == "completed", f.last_error
        with pytest.raises(openai.BadRequestError):
            client.post(
                "/files",
                body={"url": f"http://127.0.0.1:{srv.server_port}/missing"},
                cast_to=openai.types.FileObject,
            )
        client.vector_stores.delete(vs.id)
    finally:
        srv.shutdown()
