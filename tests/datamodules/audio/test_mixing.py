"""Source mixtures as train input: exact quotas per epoch from each source's run of passes,
repeats, joined labels, exact mid-epoch resume, and what a mixture refuses."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from datamodules import AudioDataModule, Source
from tests.datamodules.audio.audio_data import batch_ids, write_classes, write_numbered
from tests.datamodules.contract import assert_resume_mid_epoch_is_exact

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
A, B = range(12), range(12, 20)  # clip ids of source a and source b


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("mix")
    write_numbered(root, 20)
    lines = (root / "manifest.jsonl").read_text().splitlines()
    (root / "a.jsonl").write_text("\n".join(lines[:12]) + "\n")
    (root / "b.jsonl").write_text("\n".join(lines[12:]) + "\n")
    return root / "a.jsonl", root / "b.jsonl"


def mixed(manifests: tuple[Path, Path], **kwargs) -> AudioDataModule:
    a, b = manifests
    sources = kwargs.pop("sources", None) or [
        Source(a, weight=3, name="a"),
        Source(b, weight=1, name="b"),
    ]
    return AudioDataModule(
        sources, **{"val_split": 0, "batch_size": 4, "num_workers": 0, "epoch_size": 8, **kwargs}
    )


def epoch_ids(dm: AudioDataModule) -> list[int]:
    return [i for batch in dm.train_dataloader() for i in batch_ids(batch)]


def test_each_epoch_takes_each_sources_quota_from_its_run_of_passes(manifests) -> None:
    dm = mixed(manifests)
    dm.setup("fit")
    assert dm.quotas(0) == {"a": 6, "b": 2}
    epochs = [epoch_ids(dm) for _ in range(4)]  # each iteration outside a Trainer: next epoch
    for ids in epochs:
        assert len(ids) == 8 == len(set(ids))
        assert sum(i in A for i in ids) == 6 and sum(i in B for i in ids) == 2
    from_a = [i for ids in epochs[:2] for i in ids if i in A]
    assert sorted(from_a) == list(A)  # two epochs of 6: one whole pass over a, no repeat
    from_b = [i for ids in epochs for i in ids if i in B]
    assert sorted(from_b) == list(B)  # four epochs of 2: one whole pass over b


def test_repeat_gives_passes_per_epoch_and_labels_join_across_sources(
    manifests, tmp_path: Path
) -> None:
    a, b = manifests
    dm = mixed(manifests, sources=[Source(a, repeat=1), Source(b, repeat=2)], epoch_size=None)
    dm.setup("fit")
    counts = Counter(epoch_ids(dm))
    assert {i: counts[i] for i in A} == dict.fromkeys(A, 1)
    assert {i: counts[i] for i in B} == dict.fromkeys(B, 2)
    dogs = write_classes(tmp_path / "one", classes=("dog",))
    cats = write_classes(tmp_path / "two", classes=("cat", "dog"))
    labelled = AudioDataModule(
        [Source(dogs, repeat=1), Source(cats, repeat=1)], val_split=0, num_workers=0
    )
    labelled.setup("fit")
    assert labelled.classes == ["cat", "dog"]
    labels = [int(x) for batch in labelled.train_dataloader() for x in batch["label"]]
    assert Counter(labels) == {0: 4, 1: 8}


def test_a_mixture_resumes_mid_epoch_exactly(manifests, tmp_path: Path) -> None:
    reference = assert_resume_mid_epoch_is_exact(
        lambda: mixed(manifests, batch_size=2), batch_ids, tmp_path / "run"
    )
    assert len(reference[0]) == 4 and reference[0] != reference[1]


def test_what_a_mixture_refuses(manifests) -> None:
    a, b = manifests
    with pytest.raises(ValueError, match=r"epoch_size=8 splits an epoch between weighted"):
        AudioDataModule([Source(a), Source(b)], epoch_size=8)
    with pytest.raises(ValueError, match=r"val: every source of an evaluation split is read once"):
        AudioDataModule(a, val=[Source(b, weight=1)])
    with pytest.raises(TypeError, match=r"give a list of Sources or of paths, not both"):
        AudioDataModule([Source(a), str(b)])
    with pytest.raises(ValueError, match="not a mixture of Sources"):
        dm = AudioDataModule(a, val_split=0, num_workers=0)
        dm.setup("fit")
        dm.quotas(0)


def test_validation_sources_are_read_once_and_joined(manifests) -> None:
    a, b = manifests
    dm = mixed(manifests, val=[Source(a), Source(b)])
    dm.setup("fit")
    ids = [i for batch in dm.val_dataloader() for i in batch_ids(batch)]
    assert sorted(ids) == list(range(20))
    assert json.loads(json.dumps(dm.hparams["train"]))[0]["weight"] == 3  # plain in checkpoints


def test_each_epochs_quotas_are_logged_and_summarised(manifests, tmp_path: Path) -> None:
    import csv

    from lightning.pytorch.loggers import CSVLogger

    from tests.datamodules.contract import quiet_trainer
    from tests.recording import RecordingModel

    a, b = manifests
    sources = [Source(a, weight=[[0, 3], [1, 1]], name="a"), Source(b, weight=1, name="b")]
    dm = mixed(manifests, sources=sources)
    logger = CSVLogger(tmp_path / "logs", name="", version="")
    trainer = quiet_trainer(max_epochs=2, logger=logger, log_every_n_steps=1)
    trainer.fit(RecordingModel(batch_ids), datamodule=dm)
    with open(tmp_path / "logs" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("mix/a")]
    assert [(float(r["mix/a"]), float(r["mix/b"])) for r in rows] == [(6.0, 2.0), (4.0, 4.0)]
    assert "source 'a': 12 clips, weight=[[0, 3], [1, 1]]" in dm.summary()
