"""WeakResume: a sampler's weak hold on its DataModule's resume method, and what it says once
the DataModule is gone."""

from __future__ import annotations

import gc

import pytest

from datamodules.tokens.blend_resume import WeakResume


class Owner:
    def resume(self, saved: dict, cut: bool) -> tuple[dict, bool]:
        return saved, cut


def test_a_weak_resume_calls_through_then_says_when_its_datamodule_is_gone() -> None:
    owner = Owner()
    resume = WeakResume(owner.resume)
    assert resume({"a": 1}, False) == ({"a": 1}, False)
    del owner
    gc.collect()
    with pytest.raises(ValueError, match="cannot resume the mixture: the DataModule that made it"):
        resume({}, False)
