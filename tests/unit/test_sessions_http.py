"""Files and vector-store endpoints with fake models (logic and wire format only; the real
encoder and real corpus files are exercised in tests/integration/test_sessions_sdk.py)."""

from __future__ import annotations

import io
import time

import pytest
from fastapi.testclient import TestClient

from server.app import build_app
from server.settings import Settings
from tests.unit.test_server_http import assert_openai_error

MD = b"# Ducks\n\nDucks are waterfowl that paddle on ponds.\n\n## Food\n\nThey eat seeds and snails.\n"


def make_client(**overrides) -> TestClient:
    settings = Settings(
        llm_backend="fake", encoder_backend="fake", describe_documents=False, **overrides
    )
    return TestClient(build_app(settings), raise_server_exceptions=False)


@pytest.fixture
def http():
    with make_client() as c:
        yield c


def upload(http, data: bytes, name: str, purpose: str = "assistants"):
    return http.post(
        "/v1/files", files={"file": (name, io.BytesIO(data))}, data={"purpose": purpose}
    )


def wait_done(http, vs_id: str, file_id: str, timeout: float = 180.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        f = http.get(f"/v1/vector_stores/{vs_id}/files/{file_id}").json()
        if f["status"] != "in_progress" or time.monotonic() > deadline:
            return f
        time.sleep(0.05)


def test_file_lifecycle(http):
    r = upload(http, MD, "../../etc/ducks.md")
    assert r.status_code == 200, r.text
    f = r.json()
    assert f["object"] == "file" and f["bytes"] == len(MD) and f["kind"] == "md"
    assert f["filename"] == "ducks.md"  # no directories survive
    assert http.get(f"/v1/files/{f['id']}").json()["id"] == f["id"]
    assert http.get(f"/v1/files/{f['id']}/content").content == MD
    assert [x["id"] for x in http.get("/v1/files").json()["data"]] == [f["id"]]
    assert http.delete(f"/v1/files/{f['id']}").json()["deleted"] is True
    assert_openai_error(http.get(f"/v1/files/{f['id']}"), 404)


def test_upload_errors(http):
    assert_openai_error(upload(http, b"\x7fELF\x02\x01\x01" + b"\0" * 200, "x.md"), 415)
    assert_openai_error(upload(http, MD, "a.md", purpose="nonsense"), 400)
    assert_openai_error(upload(http, b"", "empty.txt"), 400)
    with make_client(max_file_mb=0.001) as small:
        assert_openai_error(upload(small, b"x " * 2000, "big.txt"), 413)


def test_session_ingest_search_and_close(http):
    fid = upload(http, MD, "ducks.md").json()["id"]
    vs = http.post("/v1/vector_stores", json={"name": "s", "file_ids": [fid]}).json()
    assert vs["object"] == "vector_store"
    f = wait_done(http, vs["id"], fid)
    assert f["status"] == "completed", f
    assert f["stages"]["embedded"] == f["stages"]["to_embed"] > 0
    assert f["document"]["paragraphs"] >= 2
    r = http.post(f"/v1/vector_stores/{vs['id']}/search", json={"query": "what do ducks eat"})
    page = r.json()
    assert page["object"] == "vector_store.search_results.page"
    assert page["data"][0]["file_id"] == fid and "snails" in page["data"][0]["content"][0]["text"]
    content = http.get(f"/v1/vector_stores/{vs['id']}/files/{fid}/content").json()["data"]
    assert [p["paragraph"] for p in content] == list(range(len(content)))
    assert http.delete(f"/v1/vector_stores/{vs['id']}").json()["deleted"] is True
    assert_openai_error(http.get(f"/v1/vector_stores/{vs['id']}"), 404)
    assert_openai_error(http.get(f"/v1/files/{fid}"), 404)
    assert http.get("/stats").json()["files"] == 0


def test_failed_file_does_not_spoil_session(http):
    good = upload(http, MD, "ducks.md").json()["id"]
    bad = upload(http, b"%PDF-1.7\n garbage that is not a pdf", "broken.pdf").json()["id"]
    vs = http.post("/v1/vector_stores", json={"file_ids": [good, bad]}).json()
    assert wait_done(http, vs["id"], good)["status"] == "completed"
    failed = wait_done(http, vs["id"], bad)
    assert failed["status"] == "failed" and failed["last_error"]["message"]
    counts = http.get(f"/v1/vector_stores/{vs['id']}").json()["file_counts"]
    assert counts == {"in_progress": 0, "completed": 1, "failed": 1, "cancelled": 0, "total": 2}
    hits = http.post(f"/v1/vector_stores/{vs['id']}/search", json={"query": "ducks"}).json()
    assert hits["data"] and all(h["file_id"] == good for h in hits["data"])


def test_limits_and_unknown_ids(http):
    assert_openai_error(http.post("/v1/vector_stores", json={"file_ids": ["file-nope"]}), 400)
    vs = http.post("/v1/vector_stores", json={}).json()
    assert_openai_error(
        http.post(f"/v1/vector_stores/{vs['id']}/files", json={"file_id": "x"}), 404
    )
    assert_openai_error(http.post("/v1/vector_stores/vs_nope/search", json={"query": "x"}), 404)
    with make_client(max_sessions=1) as one:
        assert one.post("/v1/vector_stores", json={}).status_code == 200
        assert_openai_error(one.post("/v1/vector_stores", json={}), 429)


def test_sessions_do_not_see_each_other(http):
    a = http.post("/v1/vector_stores", json={}).json()["id"]
    b = http.post("/v1/vector_stores", json={}).json()["id"]
    fa = upload(http, MD, "ducks.md").json()["id"]
    fb = upload(http, b"Geese migrate south in winter.\n", "geese.txt").json()["id"]
    http.post(f"/v1/vector_stores/{a}/files", json={"file_id": fa})
    http.post(f"/v1/vector_stores/{b}/files", json={"file_id": fb})
    wait_done(http, a, fa), wait_done(http, b, fb)
    for vs, own in ((a, fa), (b, fb)):
        hits = http.post(f"/v1/vector_stores/{vs}/search", json={"query": "ducks geese"}).json()
        assert {h["file_id"] for h in hits["data"]} == {own}
    assert_openai_error(http.get(f"/v1/vector_stores/{a}/files/{fb}"), 404)
