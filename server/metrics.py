"""Prometheus metrics, one registry per app (no module-level globals).

Names are prefixed ``brief_`` and buckets are chosen for this workload (TEI's prometheus.rs is
the model): request latency spans 1 ms .. 2 min because a CPU LLM answer can take a minute;
batch sizes are powers of two up to the batcher's maximum.
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
BATCH_TOKEN_BUCKETS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768)


class Metrics:
    """All metrics of one app instance, on its own registry."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.request_latency = Histogram(
            "brief_request_duration_seconds",
            "HTTP request latency by route and status",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.request_failures = Counter(
            "brief_request_failures_total",
            "Requests answered with an error, by error type",
            ["route", "type"],
            registry=r,
        )
        self.tokens_generated = Counter(
            "brief_generated_tokens_total", "Completion tokens generated", ["model"], registry=r
        )
        self.prompt_tokens = Counter(
            "brief_prompt_tokens_total", "Prompt tokens processed", ["model"], registry=r
        )
        self.time_to_first_token = Histogram(
            "brief_time_to_first_token_seconds",
            "Time from request to first streamed token",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.embedded_texts = Counter(
            "brief_embedded_texts_total", "Texts embedded", ["model"], registry=r
        )
        self.encoder_queue_depth = Gauge(
            "brief_encoder_queue_size", "Texts waiting in the encoder batcher", registry=r
        )
        self.encoder_batch_size = Histogram(
            "brief_encoder_batch_size",
            "Texts per encoder batch",
            buckets=BATCH_SIZE_BUCKETS,
            registry=r,
        )
        self.encoder_batch_tokens = Histogram(
            "brief_encoder_batch_tokens",
            "Padded tokens per encoder batch",
            buckets=BATCH_TOKEN_BUCKETS,
            registry=r,
        )
        self.encoder_batch_seconds = Histogram(
            "brief_encoder_batch_duration_seconds",
            "Model time per encoder batch",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.agent_stage_seconds = Histogram(
            "brief_agent_stage_duration_seconds",
            "Time per briefing-agent stage (rewrite, plan, retrieve, generate, total)",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.engine_healthy = Gauge(
            "brief_engine_healthy", "1 when the component is healthy", ["component"], registry=r
        )

    # BatchObserver protocol (engine/encoder/batcher.py) -------------------------------
    def queue_depth(self, n: int) -> None:
        self.encoder_queue_depth.set(n)

    def batch(self, size: int, tokens: int, seconds: float) -> None:
        self.encoder_batch_size.observe(size)
        self.encoder_batch_tokens.observe(tokens)
        self.encoder_batch_seconds.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
