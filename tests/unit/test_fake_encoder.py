"""The fake encoder must behave like the real one where tests rely on it."""

from __future__ import annotations

import numpy as np
import pytest

from engine.encoder.base import EmbeddingModel, Encoder
from engine.encoder.batcher import BatchedEncoder
from engine.encoder.fake import FakeEmbeddingModel
from engine.encoder.registry import build_encoder, build_model
from engine.errors import BackendUnavailable


def test_implements_protocol_with_768_dims():
    model = FakeEmbeddingModel()
    assert isinstance(model, EmbeddingModel)
    assert model.dimension == 768
    vecs = model.embed_tokens(model.tokenize(["hello world", "", "x " * 1000]))
    assert vecs.shape == (3, 768) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


def test_deterministic_across_instances():
    a = FakeEmbeddingModel().embed_tokens(
        FakeEmbeddingModel().tokenize(["the orchestration engine"])
    )
    b = FakeEmbeddingModel().embed_tokens(
        FakeEmbeddingModel().tokenize(["the orchestration engine"])
    )
    assert np.array_equal(a, b)


def test_shared_words_mean_closer_vectors():
    model = FakeEmbeddingModel()
    q, near, far = model.embed_tokens(
        model.tokenize(["orchestration engine", "the orchestration engine runs jobs", "ducks swim"])
    )
    assert float(q @ near) > float(q @ far) + 0.3


def test_truncates_to_max_length():
    model = FakeEmbeddingModel(max_length=16)
    (tok,) = model.tokenize(["word " * 100])
    assert len(tok) == 16


def _settings(**kw):
    from server.settings import Settings

    return Settings(**kw)


async def test_registry_builds_fake_encoder():
    encoder = build_encoder(_settings(encoder_backend="fake", batch_max_size=4))
    assert isinstance(encoder, BatchedEncoder) and isinstance(encoder, Encoder)
    try:
        vecs = await encoder.embed(["a", "b c"])
        assert vecs.shape == (2, 768)
        assert encoder.count_tokens(["a b c"]) == [5]
    finally:
        await encoder.close()


def test_registry_missing_weights_says_how_to_fix(tmp_path):
    with pytest.raises(BackendUnavailable, match="brief prepare-models"):
        build_model(_settings(encoder_backend="onnx", encoder_path=tmp_path / "nothing"))
