"""An audio mixture resumed with a changed mix: other weights, a source added (and another
epoch_size), a source removed mid-epoch; duration batches alike; another world size (the
samplers alone); the same source name over other files refused, and sources changed while
val_split draws over all of them.

One first run (a weight 3, b weight 1, 8 clips an epoch in batches of 2) saves a checkpoint
after 2 of its 4 epoch-0 batches; each test resumes it through the Trainer with another mix.
A clip is named by its length (:func:`~tests.datamodules.audio.audio_data.batch_ids`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from lightning.pytorch.callbacks import ModelCheckpoint

from datamodules import AudioDataModule, Source
from tests.datamodules.audio.audio_data import (
    LONG,
    SHORT,
    batch_ids,
    mixed_ddp_datamodule,
    write_mixture,
    write_numbered,
)
from tests.datamodules.contract import quiet_trainer
from tests.recording import RecordingModel

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
CLIPS = {"a": range(12), "b": range(12, 20), "c": range(20, 26)}
DONE = 2  # epoch-0 batches of the first run before its checkpoint


def source_of(clip: int) -> str:
    return next(name for name, ids in CLIPS.items() if clip in ids)


def by_source(batches: list[list[int]]) -> dict[str, int]:
    return dict(Counter(source_of(i) for b in batches for i in b))


def assert_runs_continue(seen: list[int], name: str) -> None:
    """The clips a source gave over both runs are the head of its run of passes: every clip
    ``k`` or ``k + 1`` times, none twice before all once (``k`` whole passes)."""
    counts = Counter(i for i in seen if i in CLIPS[name])
    total, n = sum(counts.values()), len(CLIPS[name])
    whole, extra = divmod(total, n)
    assert sorted(counts[i] for i in CLIPS[name]) == [whole] * (n - extra) + [whole + 1] * extra


def make(root: Path, workers: int = 0, **kwargs: Any) -> AudioDataModule:
    """A mixture of the named sources (``name=weight``) in a, b, c order."""
    weights = {k: kwargs.pop(k) for k in ("a", "b", "c") if k in kwargs}
    sources = [Source(str(root / f"{n}.jsonl"), weight=w, name=n) for n, w in weights.items()]
    arguments = {"val_split": 0, "batch_size": 2, "num_workers": workers, "epoch_size": 8}
    return AudioDataModule(sources, **{**arguments, **kwargs})


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The sources' manifests, the first run's epoch 0 (clips per batch) and its checkpoint."""
    root = tmp_path_factory.mktemp("mix_resume")
    for name, ids in CLIPS.items():
        write_numbered(root, ids=ids, name=f"{name}.jsonl")
    model = RecordingModel(batch_ids)
    saving = ModelCheckpoint(
        dirpath=root / "first", every_n_train_steps=1, save_top_k=-1, filename="{step}"
    )
    quiet_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[saving]).fit(
        model, datamodule=make(root, a=3, b=1)
    )
    epoch0 = model.train_epochs()[0]
    assert len(epoch0) == 4 and by_source(epoch0) == {"a": 6, "b": 2}
    return {"root": root, "epoch0": epoch0, "ckpt": root / "first" / f"step={DONE}.ckpt"}


def resume(run: dict[str, Any], dm: AudioDataModule, epochs: int) -> list[list[list[int]]]:
    model = RecordingModel(batch_ids)
    quiet_trainer(max_epochs=epochs).fit(model, datamodule=dm, ckpt_path=run["ckpt"])
    got = model.train_epochs()
    assert got[0] == run["epoch0"][DONE:]  # the interrupted epoch ends exactly as planned
    return got


def everything(run: dict[str, Any], got: list[list[list[int]]]) -> list[int]:
    """Every clip both runs trained on, in order."""
    return [i for b in run["epoch0"][:DONE] + [b for e in got for b in e] for i in b]


def test_other_weights_apply_from_the_next_epoch(first_run, caplog) -> None:
    dm = make(first_run["root"], a=1, b=1)
    with caplog.at_level("INFO", logger="datamodules"):
        got = resume(first_run, dm, epochs=3)
    assert (
        "AudioDataModule: the train mix differs from the checkpoint's: 'a' weight=3 -> weight=1. "
        "Epoch 0 ends as it was planned, the new mix applies from epoch 1; each source "
        "continues its run of passes where it stopped." in caplog.text
    )
    assert dm.quotas(0) == {"a": 6, "b": 2}  # the held epoch's plan
    assert dm.quotas(1) == dm.quotas(2) == {"a": 4, "b": 4}
    assert [by_source(e) for e in got[1:]] == [dm.quotas(1), dm.quotas(2)]
    seen = everything(first_run, got)
    assert_runs_continue(seen, "a")  # 6 + 4 + 4 clips of 12: two of them twice
    assert_runs_continue(seen, "b")  # 2 + 4 + 4 clips of 8


def test_a_source_added_starts_at_its_beginning_and_a_bigger_epoch_is_measured(
    first_run, caplog
) -> None:
    dm = make(first_run["root"], a=3, b=1, c=2, epoch_size=12)
    with caplog.at_level("INFO", logger="datamodules"):
        got = resume(first_run, dm, epochs=3)
    assert "'c' added (from its start); epoch_size 8 -> 12" in caplog.text
    assert dm.quotas(1) == dm.quotas(2) == {"a": 6, "b": 2, "c": 4}
    assert [by_source(e) for e in got[1:]] == [dm.quotas(1), dm.quotas(2)]
    assert [len(e) for e in got] == [2, 6, 6]  # the Trainer measured epoch 1 anew
    seen = everything(first_run, got)
    for name in ("a", "b", "c"):
        assert_runs_continue(seen, name)
    assert sum(i in CLIPS["c"] for i in seen) == 8  # from its start: one pass, 2 of the next


def test_a_source_removed_mid_epoch_ends_the_epoch_then_gives_nothing(first_run, caplog) -> None:
    dm = make(first_run["root"], workers=1, a=1)  # the worker's view reads the removed source
    with caplog.at_level("INFO", logger="datamodules"):
        got = resume(first_run, dm, epochs=3)
    assert "'b' removed (keeps its place)" in caplog.text
    assert dm.quotas(0) == {"a": 6, "b": 2}
    assert dm.quotas(1) == dm.quotas(2) == {"a": 8}
    assert [by_source(e) for e in got[1:]] == [{"a": 8}, {"a": 8}]
    seen = everything(first_run, got)
    assert_runs_continue(seen, "a")  # 6 + 8 + 8 clips of 12
    assert sum(i in CLIPS["b"] for i in seen) == 2


def test_other_files_under_a_name_and_a_changed_set_of_split_sources_are_refused(
    first_run,
) -> None:
    root = first_run["root"]
    sources = [Source(str(root / "a.jsonl"), weight=3, name="a"),
               Source(str(root / "c.jsonl"), weight=1, name="b")]  # fmt: skip
    renamed = AudioDataModule(sources, val_split=0, batch_size=2, num_workers=0, epoch_size=8)
    with pytest.raises(
        ValueError,
        match=r"source 'b' holds other data than in the checkpoint: no longer has "
        r"\['.*b\.jsonl'\]; now also has \['.*c\.jsonl'\]",
    ):
        resume(first_run, renamed, epochs=1)
    with pytest.raises(ValueError, match=r"sources added \(\['c'\]\) or removed \(\[\]\): val_"):
        resume(first_run, make(root, a=3, b=1, c=1, val_split=0.25), epochs=1)


def test_duration_batches_continue_a_changed_mix(tmp_path: Path, caplog) -> None:
    write_mixture(tmp_path)
    saving = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", every_n_train_steps=1, save_top_k=-1, filename="{step}"
    )
    first = RecordingModel(batch_ids)
    quiet_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[saving]).fit(
        first, datamodule=mixed_ddp_datamodule(str(tmp_path))[0]
    )
    epoch0 = first.train_epochs()[0]  # 9 short + 3 long clips in 4 batches
    sources = [
        Source(str(tmp_path / "short.jsonl"), weight=1, name="short"),
        Source(str(tmp_path / "long.jsonl"), weight=2, name="long"),
    ]
    dm = AudioDataModule(
        sources, val=str(tmp_path / "short.jsonl"), val_split=0, max_duration=0.5,
        epoch_size=15, num_workers=0,
    )  # fmt: skip
    model = RecordingModel(batch_ids)
    with caplog.at_level("INFO", logger="datamodules"):
        quiet_trainer(max_epochs=3).fit(
            model, datamodule=dm, ckpt_path=tmp_path / "ckpt/step=2.ckpt"
        )
    assert "'short' weight=[[0, 3], [1, 1]] -> weight=1; 'long' weight=1 -> weight=2" in caplog.text
    got = model.train_epochs()
    assert got[0] == epoch0[2:]
    assert dm.quotas(1) == dm.quotas(2) == {"short": 5, "long": 10}
    for epoch in (1, 2):
        ids = [i for b in got[epoch] for i in b]
        assert {"short": sum(i in SHORT for i in ids), "long": sum(i in LONG for i in ids)} == (
            dm.quotas(epoch)
        )
        assert all(len(b) * (1600 + 16 * max(b)) <= 8000 for b in got[epoch])
    seen = [i for b in epoch0[:2] + [b for e in got for b in e] for i in b]
    for clips in (SHORT, LONG):
        counts = Counter(i for i in seen if i in clips)
        assert max(counts[i] for i in clips) - min(counts[i] for i in clips) <= 1


@pytest.mark.parametrize("duration", [False, True])
def test_a_changed_mix_resumes_on_another_world_size(first_run, duration: bool) -> None:
    """Elastic: epoch 0 stopped after one batch per rank on 2 ranks, resumed on 3 ranks with
    other weights (the samplers alone): the rest of the epoch once, the new mix after it."""
    budget = {"max_duration": 0.25} if duration else {}
    old = make(first_run["root"], a=3, b=1, **budget)
    old.setup("fit")
    view = old.view("train")
    ranks = [old.make_sampler("train", view, r, 2) for r in range(2)]
    whole = Counter(i for r in ranks for b in r.batches(0) for i in batch_ids(view[b]))
    head = [i for s in ranks for i in batch_ids(view[next(iter(s))])]
    assert sum(whole.values()) == 8 and 2 <= len(head) < 8
    state = ranks[0].state_dict()
    dm = make(first_run["root"], a=1, b=1, **budget)
    dm.setup("fit")
    mixed = dm.view("train")
    shares = []
    for rank in range(3):
        sampler = dm.make_sampler("train", mixed, rank, 3)
        sampler.load_state_dict(state)
        shares.append([batch_ids(mixed[b]) for b in sampler])
    assert len({len(s) for s in shares}) == 1
    assert Counter(head + [i for s in shares for b in s for i in b]) == whole
    nxt = [i for r in range(3) for b in dm.make_sampler("train", mixed, r, 3).batches(1)
           for i in batch_ids(mixed[b])]  # fmt: skip
    assert by_source([nxt]) == dm.quotas(1) == {"a": 4, "b": 4}
