"""Weight schedules and changed mixes of a stream: exact quotas per epoch with 0 and 2 workers,
no record repeated within its source's pass however the quotas move, ``quotas()``, the
summary and the ``mix/<name>`` logs, a mix changed on resume through the Trainer (sources
removed and weights changed; added sources and another layout: test_mix_schedules_ddp.py),
and per-source validation loaders through ``Trainer.validate``."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import Logger

from datamodules import Source, StreamingDataModule
from datamodules.stream_engine.loader import StreamLoader
from tests.datamodules.contract import quiet_trainer
from tests.recording import RecordingModel

# web: ids 0..59 (3 shards), code: 100..139 (2 shards), math: 200..219 (1 shard)
LAYOUT = {"web": [30, 20, 10], "code": [25, 15], "math": [20]}
FIRST_ID = {"web": 0, "code": 100, "math": 200}
SIZE = {name: sum(counts) for name, counts in LAYOUT.items()}
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def write_sources(root: Path) -> dict[str, Path]:
    out = {}
    for name, counts in LAYOUT.items():
        folder = root / name
        folder.mkdir()
        i = FIRST_ID[name]
        for k, n in enumerate(counts):
            lines = [json.dumps({"id": i + j, "x": [1] * (j % 3 + 1)}) for j in range(n)]
            (folder / f"part-{k}.jsonl").write_text("\n".join(lines) + "\n")
            i += n
        out[name] = folder
    return out


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    return write_sources(tmp_path)


def source_of(i: int) -> str:
    return "math" if i >= 200 else "code" if i >= 100 else "web"


def scheduled(folders: dict[str, Path], **kwargs: Any) -> StreamingDataModule:
    """web 3 -> 1 over epochs 0..2, code 1; 40 records per epoch."""
    sources = [
        Source(folders["web"], weight=[[0, 3], [2, 1]], name="web"),
        Source(folders["code"], weight=1, name="code"),
    ]
    options = {"batch_size": 8, "shuffle_buffer": 16, "index_cache": False, "epoch_size": 40}
    return StreamingDataModule(sources, **{**options, **kwargs})


def epoch_ids(dm: StreamingDataModule, world: int, workers: int, epoch: int) -> list[int]:
    ids = []
    for rank in range(world):
        stream = dm.make_stream("train", rank, world)
        stream.set_epoch(epoch)
        loader = StreamLoader(stream, num_workers=workers)
        batches = [[int(i) for i in b["id"]] for b in loader]
        assert len(batches) == len(loader)
        ids += [i for b in batches for i in b]
    return ids


def assert_balanced(draws: list[int], ids: range) -> None:
    """No record of a source is drawn twice before every one was drawn once: after any number
    of epochs, each record was drawn ``k`` or ``k + 1`` times."""
    seen = Counter(draws)
    counts = {seen[i] for i in ids}
    assert max(counts) - min(counts) <= 1, counts


@pytest.mark.parametrize("workers", [0, 2])
def test_scheduled_quotas_are_exact_every_epoch_and_passes_never_repeat(folders, workers) -> None:
    dm = scheduled(folders)
    expected = [{"web": 30, "code": 10}, {"web": 27, "code": 13}, {"web": 20, "code": 20}]
    assert [dm.quotas(e) for e in range(3)] == expected  # known before training
    assert dm.quotas(9) == {"web": 20, "code": 20}  # constant after the last point
    draws: list[int] = []
    for epoch in range(3):
        ids = epoch_ids(dm, world=2, workers=workers, epoch=epoch)
        assert Counter(map(source_of, ids)) == expected[epoch]
        draws += ids
        assert_balanced([i for i in draws if i < 100], range(60))  # web: 30, 57, 77 draws
        assert_balanced([i for i in draws if i >= 100], range(100, 140))  # code: 10, 23, 43


def test_a_weight_may_be_zero_but_not_every_weight(folders) -> None:
    sources = [
        Source(folders["web"], weight=[[0, 0], [1, 1]], name="web"),  # joins in epoch 1
        Source(folders["code"], weight=[[0, 1], [2, 0]], name="code"),  # gone from epoch 2
    ]
    dm = StreamingDataModule(sources, epoch_size=20, index_cache=False)
    assert [dm.quotas(e) for e in range(3)] == [
        {"web": 0, "code": 20},
        {"web": 13, "code": 7},  # weights 1 : 0.5
        {"web": 20, "code": 0},
    ]
    assert Counter(map(source_of, epoch_ids(dm, 1, 0, 0))) == {"code": 20}
    with pytest.raises(ValueError, match=r"every source's weight is 0 in epoch 1"):
        StreamingDataModule(
            [
                Source(folders["web"], weight=[[0, 1], [1, 0]], name="web"),
                Source(folders["code"], weight=[[0, 0], [2, 0], [3, 1]], name="code"),
            ]
        )


class Metrics(Logger):
    """Keeps what it is given to log."""

    def __init__(self) -> None:
        super().__init__()
        self.logged: list[tuple[int, dict[str, float]]] = []

    name, version = "memory", 0  # type: ignore[assignment]

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.logged.append((int(step or 0), dict(metrics)))

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


def test_fit_logs_each_epochs_mix_and_the_summary_shows_the_schedule(folders) -> None:
    dm = scheduled(folders, num_workers=0)
    model = RecordingModel(lambda batch: [int(i) for i in batch["id"]])
    metrics = Metrics()
    quiet_trainer(max_epochs=3, logger=metrics).fit(model, datamodule=dm)
    mixes = [(step, m) for step, m in metrics.logged if any(k.startswith("mix/") for k in m)]
    assert mixes == [
        (0, {"mix/web": 30.0, "mix/code": 10.0}),
        (5, {"mix/web": 27.0, "mix/code": 13.0}),
        (10, {"mix/web": 20.0, "mix/code": 20.0}),
    ]
    for epoch, batches in enumerate(model.train_epochs()):
        ids = [i for b in batches for i in b]
        assert Counter(map(source_of, ids)) == dm.quotas(epoch)
    text = dm.summary()
    assert "source 'web': 3 shard(s), 60 records, weight=[[0, 3], [2, 1]]" in text
    assert "epoch 0: web=30, code=10" in text and "epoch 2 (now): web=20, code=20" in text


def test_a_changed_mix_resumes_through_the_trainer(folders, tmp_path, caplog) -> None:
    # 3 sources at 2:1:1, 40 records per epoch, interrupted after 2 of epoch 0's 5 batches;
    # resumed without "math" and web at weight 1: epoch 0 ends as planned, then the new mix.
    def make(sources: list[Source]) -> StreamingDataModule:
        return StreamingDataModule(
            sources, epoch_size=40, batch_size=8, shuffle_buffer=16, index_cache=False,
            num_workers=0,
        )  # fmt: skip

    web, code, math = (Source(folders[n], weight=w, name=n) for n, w in
                       (("web", 2), ("code", 1), ("math", 1)))  # fmt: skip
    ids = lambda batch: [int(i) for i in batch["id"]]  # noqa: E731
    first = RecordingModel(ids)
    every = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=1, save_top_k=-1,
                            filename="{step}")  # fmt: skip
    quiet_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[every]).fit(
        first, datamodule=make([web, code, math])
    )
    planned = [i for b in first.train_epochs()[0] for i in b]
    assert Counter(map(source_of, planned)) == {"web": 20, "code": 10, "math": 10}
    resumed = RecordingModel(ids)
    new = make([Source(folders["web"], weight=1, name="web"), code])
    with caplog.at_level("INFO", logger="datamodules"):
        quiet_trainer(max_epochs=3).fit(
            resumed, datamodule=new, ckpt_path=tmp_path / "ckpt" / "step=2.ckpt"
        )
    assert "'web' weight=2 -> weight=1" in caplog.text and "'math' removed" in caplog.text
    assert "Epoch 0 ends as it was planned, the new mix applies from epoch 1" in caplog.text
    epochs = [[i for b in batches for i in b] for batches in resumed.train_epochs()]
    head = [i for b in first.train_epochs()[0][:2] for i in b]
    assert sorted(head + epochs[0]) == sorted(planned)  # the plan's records, each once
    for later in epochs[1:]:
        assert Counter(map(source_of, later)) == {"web": 20, "code": 20}
    # each source continues its run of passes: web 20 (epoch 0) + 20 + 20 = one pass
    web_draws = sorted(i for i in planned + epochs[1] + epochs[2] if i < 100)
    assert web_draws == list(range(60))
    assert new.quotas(0) == {"web": 20, "code": 10, "math": 10} and new.quotas(1) == {
        "web": 20,
        "code": 20,
    }


class PerSource(RecordingModel):
    """Records validation ids per loader and logs a 'loss' per loader."""

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.seen.setdefault(f"val{dataloader_idx}", []).append(
            (0, batch_idx, self.batch_ids(batch))
        )
        self.log("val_loss", float(len(self.batch_ids(batch))), batch_size=1)


def test_eval_per_source_gives_one_validation_loader_per_source(folders) -> None:
    dm = StreamingDataModule(
        folders["web"],
        [Source(folders["code"], name="code"), Source(folders["math"], name="math")],
        eval_per_source=True,
        batch_size=16,
        index_cache=False,
        num_workers=0,
    )
    assert dm.source_names("val") == ["code", "math"] and dm.source_names("train") == []
    model = PerSource(lambda batch: [int(i) for i in batch["id"]])
    results = quiet_trainer().validate(model, datamodule=dm, verbose=False)
    assert [list(r) for r in results] == [
        ["val_loss/dataloader_idx_0"],
        ["val_loss/dataloader_idx_1"],
    ]
    got = {k: sorted(i for _, _, ids in v for i in ids) for k, v in model.seen.items() if v}
    assert got == {"val0": list(range(100, 140)), "val1": list(range(200, 220))}
    together = StreamingDataModule(
        folders["web"], [Source(folders["code"]), Source(folders["math"])], index_cache=False,
        num_workers=0,
    )  # fmt: skip
    assert not isinstance(together.val_dataloader(), list)  # one loader, each source once
