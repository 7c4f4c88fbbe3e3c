"""The ``brief`` command: ``brief serve`` (same as ``python -m server``) and
``brief prepare-models`` (same as ``python -m models.prepare``)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def _serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from server.app import build_app
    from server.settings import Settings

    overrides = {k: v for k, v in {"host": args.host, "port": args.port}.items() if v is not None}
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        print(f"brief: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    uvicorn.run(
        build_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=settings.shutdown_timeout_s,
    )
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from models.prepare import main as prepare_main

    argv: list[str] = []
    if args.model_dir:
        argv += ["--model-dir", str(args.model_dir)]
    if args.only:
        argv += ["--only", args.only]
    if args.force:
        argv.append("--force")
    if args.verify:
        argv.append("--verify")
    return prepare_main(argv) or 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="brief", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="start the HTTP server (settings: BRIEF_* env vars)")
    s.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=None, help="port (default 8000)")
    s.add_argument("--log-level", default="info")
    s.set_defaults(func=_serve)
    m = sub.add_parser("prepare-models", help="assemble, export and quantize the default weights")
    m.add_argument("--model-dir", type=Path, default=None)
    m.add_argument("--only", choices=["llm", "encoder"], default=None)
    m.add_argument("--force", action="store_true")
    m.add_argument("--verify", action="store_true")
    m.set_defaults(func=_prepare)
    return p


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
