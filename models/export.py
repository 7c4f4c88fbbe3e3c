"""Export MPNet to ONNX (optimum) and build the int8 CPU model.

Why the int8 model is not a plain ``quantize_dynamic``: on AVX2 CPUs without VNNI, quantising
the FFN down-projections (``/encoder/layer.N/output/dense/MatMul``: their input comes after GELU
and has activation outliers) drops cosine similarity to fp32 embeddings to 0.6-0.85. Leaving those
12 MatMuls in fp32 keeps cosine >= 0.98 at about 1.4x fp32 speed (DESIGN.md section 6).

Everything runs offline (``HF_HUB_OFFLINE=1``) from the prepared sentence-transformers folder.
Outputs are written to a temporary name, renamed, and stamped with the sha256 of their source, so a
second run is a couple of ``stat`` calls.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from models import paths
from models.packaged import Log, read_stamp, sha256_file, stamp_path, write_stamp

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "encoder_config.json"
FFN_DOWN_PROJ = re.compile(r"^/encoder/layer\.(\d+)/output/dense/MatMul$")


def _offline_env() -> None:
    """The export must never reach a model hub (set before transformers is imported)."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[var] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def _source_sha(st_dir: Path) -> str:
    """The safetensors checksum recorded by ``models.packaged`` (hashes once if unstamped)."""
    weights = st_dir / "model.safetensors"
    stamp = read_stamp(weights)
    return stamp["sha256"] if stamp else sha256_file(weights)


def _is_current(target: Path, source_sha: str) -> bool:
    stamp = read_stamp(target)
    return (
        target.is_file()
        and stamp is not None
        and stamp.get("source_sha256") == source_sha
        and target.stat().st_size == stamp.get("size")
    )


def encoder_config(st_dir: Path) -> dict:
    """Pooling settings the ONNX embedder needs, read from the sentence-transformers folder."""
    sbert = json.loads((st_dir / "sentence_bert_config.json").read_text())
    pooling = json.loads((st_dir / "1_Pooling" / "config.json").read_text())
    modules = json.loads((st_dir / "modules.json").read_text())
    if not pooling.get("pooling_mode_mean_tokens"):
        raise RuntimeError(f"{st_dir}: only mean pooling is supported, got {pooling}")
    return {
        "model_name": paths.ENCODER_NAME,
        "max_seq_length": int(sbert["max_seq_length"]),
        "dimension": int(pooling["word_embedding_dimension"]),
        "pooling": "mean",
        "normalize": any(m["type"].endswith("Normalize") for m in modules),
    }


def export_onnx(
    st_dir: Path, onnx_dir: Path, *, force: bool = False, log: Log = print
) -> tuple[Path, str]:
    """Export the transformer (last_hidden_state) to ``onnx_dir/model.onnx``; pooling is ours."""
    out = onnx_dir / paths.ONNX_FP32
    source = _source_sha(st_dir)
    if not force and _is_current(out, source) and (onnx_dir / TOKENIZER_FILE).is_file():
        return out, "ready"
    _offline_env()
    from optimum.exporters.onnx import main_export  # lazy: needs torch (the `models` extra)

    onnx_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    log(f"exporting {st_dir.name} to ONNX (optimum, feature-extraction) …")
    with tempfile.TemporaryDirectory(prefix="brief-export-", dir=onnx_dir) as work:
        main_export(
            model_name_or_path=str(st_dir),
            output=work,
            task="feature-extraction",
            library_name="transformers",  # plain encoder; pooling/normalising is done by us
            device="cpu",
            local_files_only=True,
            do_validation=True,
        )
        for name in (TOKENIZER_FILE, "config.json"):  # the very files sentence-transformers uses
            shutil.copyfile(st_dir / name, onnx_dir / name)
        (onnx_dir / CONFIG_FILE).write_text(json.dumps(encoder_config(st_dir), indent=2))
        (Path(work) / paths.ONNX_FP32).replace(out)
    write_stamp(out, source_sha256=source, size=out.stat().st_size, sha256=sha256_file(out))
    log(f"exported {out} in {time.perf_counter() - started:.0f} s")
    return out, "built"


def ffn_down_projections(model_path: Path) -> list[str]:
    """Names of the 12 FFN down-projection MatMuls, checked against the real graph."""
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    names = [
        n.name for n in model.graph.node if n.op_type == "MatMul" and FFN_DOWN_PROJ.match(n.name)
    ]
    config = json.loads((model_path.parent / "config.json").read_text())
    layers = int(config["num_hidden_layers"])
    if len(names) != layers:
        raise RuntimeError(
            f"{model_path}: expected one FFN down-projection MatMul per layer ({layers}), "
            f"found {len(names)}: {names}; the graph's node names changed, check FFN_DOWN_PROJ"
        )
    return sorted(names, key=lambda n: int(FFN_DOWN_PROJ.match(n).group(1)))


def quantize_int8(onnx_dir: Path, *, force: bool = False, log: Log = print) -> tuple[Path, str]:
    """Dynamic int8 (QInt8 weights) of every MatMul except the FFN down-projections."""
    src = onnx_dir / paths.ONNX_FP32
    out = onnx_dir / paths.ONNX_INT8
    source = read_stamp(src)
    source_sha = source["sha256"] if source else sha256_file(src)
    if not force and _is_current(out, source_sha):
        return out, "ready"
    from onnxruntime.quantization import QuantType, quantize_dynamic

    excluded = ffn_down_projections(src)
    started = time.perf_counter()
    log(f"quantising to int8 (MatMul weights, {len(excluded)} FFN down-projections kept fp32) …")
    with tempfile.TemporaryDirectory(prefix="brief-quant-", dir=onnx_dir) as work:
        tmp = Path(work) / paths.ONNX_INT8
        with _quiet_root_logger():  # onnxruntime logs a generic "run pre-processing" warning
            quantize_dynamic(
                model_input=src,
                model_output=tmp,
                weight_type=QuantType.QInt8,
                op_types_to_quantize=["MatMul"],
                nodes_to_exclude=excluded,
                per_channel=False,  # per-channel scales measured at cosine ~0 here: broken
            )
        tmp.replace(out)
    write_stamp(out, source_sha256=source_sha, size=out.stat().st_size, excluded=excluded)
    log(f"quantised {out} in {time.perf_counter() - started:.0f} s")
    return out, "built"


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def is_exported(onnx_dir: Path) -> bool:
    """Cheap check used by the registry's error message and by ``prepare``."""
    return all(stamp_path(onnx_dir / name).exists() for name in (paths.ONNX_FP32, paths.ONNX_INT8))
