"""Loader settings from the hardware, with the hardware faked through explicit arguments."""

from __future__ import annotations

import pytest

from datamodules.core.hardware import available_cpus, resolve_loader_settings


@pytest.mark.parametrize(
    ("work", "cpus", "local_world", "expected"),
    [
        ("memory", 64, 1, 0),
        ("memory", 2, 1, 0),
        ("decode", 1, 1, 0),
        ("decode", 2, 1, 2),
        ("decode", 3, 1, 2),
        ("decode", 16, 1, 15),
        ("decode", 16, 4, 3),
        ("decode", 16, 8, 2),
        ("decode", 16, 16, 0),
        ("decode", 4, 8, 0),
        ("io", 1, 1, 2),
        ("io", 4, 1, 8),
        ("io", 64, 1, 16),
        ("io", 16, 8, 4),
    ],
)
def test_auto_workers_follow_the_rules(
    work: str, cpus: int, local_world: int, expected: int
) -> None:
    settings = resolve_loader_settings(work=work, cpus=cpus, local_world_size=local_world)
    assert settings.num_workers == expected
    assert settings.reasons["num_workers"].startswith("auto")


@pytest.mark.parametrize("cpus", [1, 2, 3, 8, 96])
@pytest.mark.parametrize("local_world", [1, 2, 8])
def test_cpu_bound_auto_workers_never_exceed_cpus_per_local_rank(
    cpus: int, local_world: int
) -> None:
    for work in ("memory", "decode"):
        settings = resolve_loader_settings(work=work, cpus=cpus, local_world_size=local_world)
        assert settings.num_workers <= max(1, cpus // local_world)


def test_pin_memory_only_for_cuda() -> None:
    assert resolve_loader_settings(accelerator="cuda", cpus=4).pin_memory is True
    for accelerator in ("cpu", "mps", None):
        assert resolve_loader_settings(accelerator=accelerator, cpus=4).pin_memory is False
    assert resolve_loader_settings(pin_memory=True, accelerator="cpu").pin_memory is True


def test_persistent_workers_whenever_there_are_workers() -> None:
    with_workers = resolve_loader_settings(work="decode", cpus=8)
    assert with_workers.num_workers == 7 and with_workers.persistent_workers is True
    without = resolve_loader_settings(work="memory", cpus=8)
    assert without.persistent_workers is False
    forced = resolve_loader_settings(num_workers=0, persistent_workers=True)
    assert forced.persistent_workers is False
    assert "ignored: no workers" in forced.reasons["persistent_workers"]


def test_prefetch_factor_and_loader_kwargs() -> None:
    io = resolve_loader_settings(work="io", cpus=2)
    assert io.prefetch_factor == 4
    assert io.loader_kwargs() == {
        "num_workers": 4,
        "pin_memory": False,
        "persistent_workers": True,
        "prefetch_factor": 4,
        "multiprocessing_context": None,
    }
    none = resolve_loader_settings(work="memory")
    assert none.prefetch_factor is None
    assert "prefetch_factor" not in none.loader_kwargs()
    assert resolve_loader_settings(num_workers=2, prefetch_factor=6).prefetch_factor == 6


def test_explicit_values_are_kept_and_flagged_when_oversubscribed() -> None:
    settings = resolve_loader_settings(num_workers=5, work="decode", cpus=2)
    assert settings.num_workers == 5
    assert "more than the 2 CPUs" in settings.reasons["num_workers"]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_workers": "many"}, ValueError, "num_workers='many'"),
        ({"num_workers": -2}, ValueError, "num_workers=-2"),
        ({"num_workers": 1.5}, TypeError, "num_workers=1.5"),
        ({"num_workers": True}, TypeError, "num_workers=True"),
        ({"pin_memory": "sometimes"}, ValueError, "pin_memory='sometimes'"),
        ({"persistent_workers": None}, TypeError, "persistent_workers=None"),
        ({"prefetch_factor": 0}, ValueError, "prefetch_factor=0"),
        ({"work": "gpu"}, ValueError, "work='gpu'"),
        ({"local_world_size": 0}, ValueError, "local_world_size=0"),
    ],
)
def test_bad_values_name_the_argument(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        resolve_loader_settings(**kwargs)


def test_available_cpus_reads_the_affinity_mask() -> None:
    import os

    assert available_cpus() == len(os.sched_getaffinity(0))
