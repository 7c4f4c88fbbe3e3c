"""Shared helpers for benchmarks: a rich table, JSON + PNG under ``benchmarks/results/``.

Every benchmark reports ratios measured side by side in one run; absolute numbers are context
(the build machine has 2 shared, noisy cores). ``machine()`` records where the numbers came from.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def results_dir(override: Path | None = None) -> Path:
    out = Path(override) if override else RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    return out


def machine() -> dict[str, Any]:
    """CPU model and count, Python, platform and time of the run."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


@contextmanager
def stopwatch() -> Iterator[Callable[[], float]]:
    """``with stopwatch() as elapsed: ...; elapsed()`` gives seconds (frozen at exit)."""
    start = time.perf_counter()
    end: list[float] = []
    yield lambda: (end[0] if end else time.perf_counter()) - start
    end.append(time.perf_counter())


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def fmt(value: Any, digits: int = 2) -> str:
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def print_table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    console: Console | None = None,
    digits: int = 2,
) -> None:
    table = Table(title=title, title_justify="left")
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*(fmt(v, digits) for v in row))
    (console or Console()).print(table)


def write_json(name: str, data: dict[str, Any], out_dir: Path | None = None) -> Path:
    path = results_dir(out_dir) / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return path


def bar_chart(
    name: str,
    groups: Sequence[str],
    series: dict[str, Sequence[float | None]],
    ylabel: str,
    title: str,
    out_dir: Path | None = None,
    note: str | None = None,
) -> Path:
    """Grouped bar chart (one group per x label, one bar per series) saved as ``<name>.png``.
    A ``None`` value draws no bar (the metric does not apply), which a 0 would misstate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    width = 0.8 / max(len(series), 1)
    top = 0.0
    for k, (label, values) in enumerate(series.items()):
        shown = [(i, v) for i, v in enumerate(values) if v is not None]
        xs = [i + (k - (len(series) - 1) / 2) * width for i, _ in shown]
        bars = ax.bar(xs, [v for _, v in shown], width, label=label)
        ax.bar_label(bars, fmt="%.1f", fontsize=8 if len(series) <= 3 else 6)
        top = max([top, *(v for _, v in shown)])
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if top > 0:  # headroom for the legend above the bars
        ax.set_ylim(top=top * 1.22)
    ax.legend(ncol=min(len(series), 5), fontsize=7, loc="upper center")
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, color="gray")
    fig.tight_layout()
    path = results_dir(out_dir) / f"{name}.png"
    fig.savefig(path)
    plt.close(fig)
    return path
