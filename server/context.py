"""The per-app container of engine components, built in the lifespan (private-gpt style
injection: routes get it through ``server.deps.Ctx``, tests can build it with fakes)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.agent.pipeline import BriefingAgent
from engine.encoder.base import Encoder
from engine.ingest.fetch import FetchLimits
from engine.ingest.pipeline import IngestOptions, Ingestor
from engine.llm.base import LLM
from engine.session.files import FileStore
from engine.session.store import SessionLimits, SessionStore
from server.metrics import Metrics
from server.protocol.chat import ChatCompletionRequest
from server.serving.brief import BriefService
from server.serving.chat import ChatService
from server.serving.embeddings import EmbeddingService
from server.serving.sessions import FileBatches, SessionService
from server.settings import Settings

log = logging.getLogger(__name__)
MB = 1024 * 1024


def token_counter(settings: Settings) -> Callable[[str], int]:
    """An untruncated token counter for chunk budgets: the encoder's own tokenizer when there
    is one (the encoder truncates at 384 tokens, chunking must see real lengths)."""
    path = Path(settings.resolved_encoder_path()) / "tokenizer.json"
    if settings.encoder_backend == "onnx" and path.exists():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path))
        tok.no_truncation()
        tok.no_padding()
        return lambda text: len(tok.encode(text, add_special_tokens=False).ids)
    return lambda text: len(text.split())


@dataclass
class AppContext:
    settings: Settings
    metrics: Metrics
    llm: LLM
    encoder: Encoder
    chat: ChatService = field(init=False)
    embeddings: EmbeddingService = field(init=False)
    files: FileStore = field(init=False)
    ingest: Ingestor = field(init=False)
    sessions: SessionStore = field(init=False)
    session_service: SessionService = field(init=False)
    batches: FileBatches = field(init=False)
    brief: BriefService = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self.chat = ChatService(self.llm, self.metrics, s.default_max_tokens)
        self.embeddings = EmbeddingService(self.encoder, self.metrics, s.encoder_served_name)
        self.files = FileStore(int(s.max_file_mb * MB), int(s.max_storage_mb * MB))
        options = IngestOptions(
            pdf_backend=s.pdf_backend,
            describe=s.describe_documents,
            fetch=FetchLimits(
                max_bytes=int(s.max_file_mb * MB),
                total_timeout_s=s.fetch_timeout_s,
                max_redirects=s.fetch_max_redirects,
                block_private=s.fetch_block_private,
            ),
        )
        self.ingest = Ingestor(self.files, self.encoder, self.llm, token_counter(s), options)
        limits = SessionLimits(
            max_sessions=s.max_sessions,
            max_files_per_session=s.max_files_per_session,
            max_bytes_per_session=int(s.max_session_mb * MB),
            default_ttl_s=s.session_ttl_hours * 3600,
        )
        self.sessions = SessionStore(self.files, self.ingest, limits)
        self.session_service = SessionService(self.sessions, self.encoder)
        self.batches = FileBatches()
        agent = BriefingAgent(self.llm, s.agent_config())
        self.brief = BriefService(agent, self.sessions, self.encoder, self.metrics)

    def chat_for(self, req: ChatCompletionRequest) -> ChatService | BriefService:
        """The service answering this request (the briefing agent when ``session_id`` is set)."""
        return self.brief if req.session_id is not None else self.chat

    def health(self) -> dict[str, bool]:
        return {"llm": self.llm.healthy(), "encoder": self.encoder.healthy()}

    async def start(self) -> None:
        self.sessions.start_reaper()
        self.ingest.warmup()

    async def stop(self) -> None:
        await self.sessions.close_all()
        await self.ingest.close()


async def build_context(settings: Settings) -> AppContext:
    """Load and start the configured engines (blocking loads run off the event loop)."""
    from engine.encoder.registry import build_encoder
    from engine.llm.registry import build_llm

    metrics = Metrics()
    llm = build_llm(settings)
    await llm.start()
    encoder = build_encoder(settings, observer=metrics)
    await encoder.start()
    log.info("engines ready: llm=%s encoder=%s", llm.model_name, settings.encoder_served_name)
    return AppContext(settings=settings, metrics=metrics, llm=llm, encoder=encoder)


async def close_context(ctx: AppContext) -> None:
    await ctx.encoder.close()
    await ctx.llm.close()
