"""How many CPUs this process may really use, for the default thread counts.

Why: ``os.cpu_count()`` is the node's core count. In a container limited to 4 CPUs on a
64-core node, llama.cpp with 64 threads is throttled by the CFS quota and stalls on its own
barriers, many times slower than with 4. The real limit is the smallest of the CPU affinity
mask (``taskset``, cpusets) and the cgroup CPU quota (Kubernetes ``resources.limits.cpu``),
rounded up.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def _quota(root: Path) -> float | None:
    """CPUs allowed by the cgroup quota (v2 ``cpu.max``, else v1 ``cpu.cfs_*``), if any."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def available_cpus(cgroup: Path = CGROUP) -> int:
    """The CPUs this process can keep busy: affinity mask and cgroup quota, at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    quota = _quota(cgroup)
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(1, cpus)
