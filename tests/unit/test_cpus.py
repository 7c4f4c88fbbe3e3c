"""Default thread counts follow the container's CPU limit, not the node's core count."""

from __future__ import annotations

import os

import pytest

from engine.cpus import available_cpus

AFFINITY = len(os.sched_getaffinity(0))


def write(root, files: dict[str, str]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(
    "files, expected",
    [
        ({}, AFFINITY),  # no cgroup files: the affinity mask
        ({"cpu.max": "max 100000\n"}, AFFINITY),  # v2, no quota
        ({"cpu.max": "50000 100000\n"}, 1),  # v2, half a CPU: at least one thread
        ({"cpu.max": "150000 100000\n"}, min(AFFINITY, 2)),  # 1.5 CPUs round up
        ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, AFFINITY),  # v1
        ({"cpu/cpu.cfs_quota_us": "100000", "cpu/cpu.cfs_period_us": "100000"}, 1),
        ({"cpu.max": "garbage"}, AFFINITY),  # unreadable: no limit rather than a crash
    ],
)
def test_the_cgroup_quota_and_the_affinity_mask_both_cap_the_count(tmp_path, files, expected):
    assert available_cpus(write(tmp_path, files)) == expected


def test_a_quota_above_the_affinity_mask_does_not_raise_the_count(tmp_path):
    root = write(tmp_path, {"cpu.max": f"{(AFFINITY + 8) * 100000} 100000"})
    assert available_cpus(root) == AFFINITY
