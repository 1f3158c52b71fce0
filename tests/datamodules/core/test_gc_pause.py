"""The garbage collector is paused inside and restored as it was, on error too."""

from __future__ import annotations

import gc

import pytest

from datamodules.core.gc_pause import paused_gc


def test_paused_inside_and_enabled_after_even_on_error() -> None:
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), paused_gc():
        raise ValueError("bad file")
    assert gc.isenabled()


def test_a_collector_the_caller_paused_stays_paused() -> None:
    gc.disable()
    try:
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
