"""Duration batches over a mixture of Sources: each batch within ``max_duration`` (padding
counted) and length-bucketed, every unit of each epoch's quotas once, schedules whose epochs
have other batch counts through the Trainer, exact resume mid-epoch and at an epoch's end,
2-rank DDP even and disjoint with its elastic resume on 1 and 3 ranks, what stays refused."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from lightning.pytorch.callbacks import ModelCheckpoint

from datamodules import AudioDataModule, Source
from datamodules.tokens.mixed_budget import MixedBudgetSampler
from tests.datamodules.audio.audio_data import (
    BASE,
    LONG,
    SHORT,
    STEP,
    batch_ids,
    mixed_ddp_datamodule,
    write_mixture,
)
from tests.datamodules.contract import (
    ContractCase,
    assert_resume_mid_epoch_is_exact,
    quiet_trainer,
    run_ddp,
)
from tests.recording import RecordingModel

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
BUDGET = 8000  # max_duration=0.5 s at 16 kHz, in samples


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mixed_durations")
    write_mixture(root)
    return root


def mixed(root: Path, **kwargs: Any) -> AudioDataModule:
    """The DDP factory's mixture (scheduled weights, 12 clips per epoch), ``kwargs`` on top."""
    return mixed_ddp_datamodule(str(root), **kwargs)[0]


def cost(batch: list[int]) -> int:
    """Samples a batch of these clips takes, padding counted."""
    return len(batch) * (BASE + STEP * max(batch))


def by_source(ids: list[int]) -> dict[str, int]:
    return {"short": sum(i in SHORT for i in ids), "long": sum(i in LONG for i in ids)}


def test_each_epoch_is_its_quotas_once_in_bucketed_batches_within_the_budget(root) -> None:
    dm = mixed(root)
    dm.setup("fit")
    counted = mixed(root, max_duration=None, batch_size=4)  # the same units, 4 per batch
    counted.setup("fit")
    assert [dm.quotas(e) for e in range(3)] == [
        {"short": 9, "long": 3},
        {"short": 6, "long": 6},
        {"short": 6, "long": 6},
    ]
    counts = []
    for epoch in range(4):  # outside a Trainer each iteration is the next epoch
        batches = [batch_ids(b) for b in dm.train_dataloader()]
        ids = [i for b in batches for i in b]
        units = [i for b in counted.train_dataloader() for i in batch_ids(b)]
        assert Counter(ids) == Counter(units) and len(ids) == 12
        if epoch < 2:  # within the sources' first passes: no clip twice
            assert len(set(ids)) == 12
        assert by_source(ids) == dm.quotas(epoch)
        assert all(cost(b) <= BUDGET for b in batches)
        # length-bucketed: one pool, so each batch is a run of the epoch's sorted clips
        runs = sorted(batches, key=min)
        assert [i for b in runs for i in sorted(b)] == sorted(ids)
        counts.append(len(batches))
    assert counts == [4, 5, 5, 5]  # 9 short + 3 long, then 6 + 6: other batch counts
    sampler = dm.make_sampler("train", dm.view("train"), 0, 1)
    assert isinstance(sampler, MixedBudgetSampler) and sampler.max_tokens == BUDGET


def test_a_schedule_through_the_trainer_gives_every_epoch_whole_and_validated(root) -> None:
    model = RecordingModel(batch_ids)
    quiet_trainer(max_epochs=3).fit(model, datamodule=mixed(root))
    epochs = model.train_epochs()
    assert [len(e) for e in epochs] == [4, 5, 5]
    reference = mixed(root)
    reference.setup("fit")
    for epoch, batches in enumerate(epochs):
        ids = [i for b in batches for i in b]
        assert len(ids) == 12 and by_source(ids) == reference.quotas(epoch)
        assert all(cost(b) <= BUDGET for b in batches)
    val = [sorted(i for b in e for i in b) for e in model.val_epochs()]
    assert val == [list(SHORT)] * 3  # validated after each epoch


def test_resume_mid_epoch_and_at_an_epochs_end_is_exact(root, tmp_path: Path) -> None:
    reference = assert_resume_mid_epoch_is_exact(
        lambda: mixed(root), batch_ids, tmp_path, steps=lambda n: (2, n + 1)
    )
    assert [len(e) for e in reference] == [4, 5]
    # At epoch 0's last batch: the next epoch, of another length, whole and validated.
    resumed = RecordingModel(batch_ids)
    ended = tmp_path / "epoch=0-step=4.ckpt"
    quiet_trainer(max_epochs=2).fit(resumed, datamodule=mixed(root), ckpt_path=ended)
    assert resumed.train_epochs() == reference[1:]
    assert len(resumed.val_epochs()) == 1


def test_ddp_even_disjoint_and_elastic_resume_on_1_and_3(root, tmp_path: Path) -> None:
    case = ContractCase(
        make=lambda **kw: mixed(root, **kw),
        batch_ids=batch_ids,
        num_samples=20,
        ddp_factory="tests.datamodules.audio.audio_data:mixed_ddp_datamodule",
        ddp_kwargs={"root": str(root)},
    )
    checkpoints = tmp_path / "checkpoints"
    ranks = run_ddp(case, tmp_path / "two", extra=("--ckpt-dir", str(checkpoints)))
    single = RecordingModel(batch_ids)
    quiet_trainer(max_epochs=2).fit(single, datamodule=mixed(root))
    whole = [Counter(i for b in e for i in b) for e in single.train_epochs()]
    for epoch in range(2):
        per_rank = [r["train"][epoch] for r in ranks]
        assert len(per_rank[0]) == len(per_rank[1]) == [2, 3][epoch]
        seen = [Counter(i for b in batches for i in b) for batches in per_rank]
        assert not set(seen[0]) & set(seen[1])
        assert seen[0] + seen[1] == whole[epoch]  # the epoch's units, each once
        assert all(cost(b) <= BUDGET for batches in per_rank for b in batches)
    # Elastic: epoch 0 stopped after 1 batch per rank on 2 ranks, resumed on 1 (Trainer).
    head = [i for r in ranks for i in r["train"][0][0]]
    model = RecordingModel(batch_ids)
    quiet_trainer(max_epochs=2).fit(
        model, datamodule=mixed(root), ckpt_path=checkpoints / "epoch=0-step=1.ckpt"
    )
    rest = model.train_epochs()
    assert Counter(head + [i for b in rest[0] for i in b]) == whole[0]
    assert Counter(i for b in rest[1] for i in b) == whole[1]
    assert all(cost(b) <= BUDGET for e in rest for b in e)
    # ... and on 3 ranks (the samplers alone): the rest once, the same count on each rank.
    dm = mixed(root)
    dm.setup("fit")
    view = dm.view("train")
    first = dm.make_sampler("train", view, 0, 2)
    next(iter(first))
    state = first.state_dict()
    shares = []
    for rank in range(3):
        sampler = dm.make_sampler("train", view, rank, 3)
        sampler.load_state_dict(state)
        shares.append([batch_ids(view[b]) for b in sampler])
    assert len({len(s) for s in shares}) == 1
    left = [i for s in shares for b in s for i in b]
    assert Counter(head + left) == whole[0]
    assert all(cost(b) <= BUDGET for s in shares for b in s)


def test_what_stays_refused(root, tmp_path: Path) -> None:
    short, _ = write_mixture(tmp_path)
    with pytest.raises(
        ValueError,
        match=r"short\.jsonl: line 7: a clip of 0\.11 s does not fit "
        r"max_duration=0\.105 \(21 such clips\)",
    ):
        AudioDataModule(
            [Source(short, weight=1), Source(short.with_name("long.jsonl"), weight=1)],
            max_duration=0.105, val_split=0, num_workers=0,
        ).setup("fit")  # fmt: skip
    with pytest.raises(ValueError, match="drop_last=True is not accepted with max_duration"):
        mixed(root, drop_last=True)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1)
    saver = quiet_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[checkpoint])
    saver.fit(RecordingModel(batch_ids), datamodule=mixed(root))
    counted = ModelCheckpoint(dirpath=tmp_path / "n", every_n_train_steps=1, save_top_k=-1)
    saver = quiet_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[counted])
    saver.fit(RecordingModel(batch_ids), datamodule=mixed(root, max_duration=None, batch_size=4))
    saved = tmp_path / "epoch=0-step=1.ckpt"
    for other, path, refusal in (
        (
            mixed(root, max_duration=0.6),
            saved,
            r"saved with max_tokens=8000, this run has max_tokens=9600",
        ),
        (mixed(root, max_duration=None), saved, r"saved with batches under max_tokens=8000"),
        (
            mixed(root),
            tmp_path / "n" / "epoch=0-step=1.ckpt",
            r"saved with batches of batch_size=4 units",
        ),
    ):
        with pytest.raises(ValueError, match=refusal):
            quiet_trainer(max_epochs=1).fit(
                RecordingModel(batch_ids), datamodule=other, ckpt_path=path
            )
