"""examples/cli.py: every config parses and instantiates; one trains for a few steps.

Also the example models whose sizes come from the DataModule (examples/models.py).
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from PIL import Image

from datamodules import BaseDataModule, DataWaitMonitor, ImageFolderDataModule, TextDataModule
from examples.cli import main
from examples.models import ImageClassifier, TextClassifier
from tests import subprocesses
from tests.datamodules.contract import quiet_trainer

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "examples" / "configs").glob("*.yaml"))
#: Samples in all splits of a config's data (the surnames depend on Faker's version).
SAMPLES = {"tensor": 178, "image_folder": 1797, "streaming": 1797}


@pytest.fixture(autouse=True, scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """DigitsImageFolder writes the digits under $XDG_CACHE_HOME: a temporary one here."""
    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(folder))
        yield folder


def test_there_is_a_config_per_landed_datamodule() -> None:
    names = {c.name for c in CONFIGS}
    assert {"tensor.yaml", "image_folder.yaml", "text.yaml", "streaming.yaml"} <= names


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_config_parses_and_instantiates(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["cli.py"])  # LightningCLI warns when both are given
    cli = main(["--config", str(config)], run=False)
    assert isinstance(cli.datamodule, BaseDataModule)
    assert isinstance(cli.model, pl.LightningModule)
    assert any(isinstance(c, DataWaitMonitor) for c in cli.trainer.callbacks)
    cli.datamodule.setup("fit")
    assert cli.datamodule.split_size("train") > 0
    total = sum(cli.datamodule.split_size(s) for s in ("train", "val", "test"))
    assert total == SAMPLES.get(config.stem, total)


def test_data_arguments_override_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["cli.py"])  # LightningCLI warns when both are given
    config = str(ROOT / "examples" / "configs" / "tensor.yaml")
    args = ["--config", config, "--data.num_workers", "tune", "--data.batch_size", "8"]
    cli = main(args, run=False)
    assert cli.datamodule.num_workers == "tune"
    assert cli.datamodule.batch_size == 8
    assert cli.datamodule.hparams["num_workers"] == "tune"


def test_fit_runs_from_the_command_line(tmp_path: Path) -> None:
    command = [
        sys.executable,
        str(ROOT / "examples" / "cli.py"),
        "fit",
        "--config",
        str(ROOT / "examples" / "configs" / "tensor.yaml"),
        "--trainer.max_steps",
        "6",
        "--trainer.limit_val_batches",
        "1",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.log_every_n_steps",
        "2",
    ]
    result = subprocesses.run(command, cwd=tmp_path, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    run = tmp_path / "lightning_logs" / "tensor" / "version_0"
    with open(run / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    logged = [r for r in rows if r.get("data_wait_fraction")]
    assert [int(r["step"]) for r in logged] == [1, 3, 5]
    assert all(0 <= float(r["data_wait_fraction"]) <= 1 for r in logged)
    assert any(r.get("train_loss") for r in rows)
    assert (run / "checkpoints" / "last.ckpt").is_file()


class TestModelsSizedByTheData:
    """ImageClassifier / TextClassifier with sizes None read them from the DataModule."""

    @pytest.fixture
    def text_dm(self) -> TextDataModule:
        texts = [("ab", "x"), ("bcd", "y"), ("cab", "z"), ("dd", "x")] * 6
        return TextDataModule([t for t, _ in texts], [y for _, y in texts], batch_size=4)

    def test_text_classifier_builds_from_the_datamodule_and_reloads(
        self, text_dm: TextDataModule, tmp_path: Path
    ) -> None:
        model = TextClassifier(dim=8)
        trainer = quiet_trainer(max_steps=2, limit_val_batches=1, default_root_dir=tmp_path)
        trainer.fit(model, datamodule=text_dm)
        assert (model.hparams.vocab_size, model.hparams.num_classes) == (6, 3)  # pad, unk, abcd
        assert model.embed.num_embeddings == 6 and model.head[1].out_features == 3
        trainer.save_checkpoint(tmp_path / "m.ckpt")
        again = TextClassifier.load_from_checkpoint(tmp_path / "m.ckpt")
        assert again.embed.num_embeddings == 6
        for key, value in model.state_dict().items():
            assert torch.equal(value, again.state_dict()[key]), key

    def test_a_size_smaller_than_the_data_needs_is_refused(
        self, text_dm: TextDataModule, tmp_path: Path
    ) -> None:
        trainer = quiet_trainer(max_steps=1, default_root_dir=tmp_path)
        with pytest.raises(ValueError, match="vocab_size=3 but the DataModule needs 6"):
            trainer.fit(TextClassifier(vocab_size=3, dim=8), datamodule=text_dm)

    def test_image_classifier_takes_the_class_count(self, tmp_path: Path) -> None:
        for c, name in enumerate(["ant", "bee"]):
            (tmp_path / name).mkdir()
            for j in range(4):
                Image.new("RGB", (8, 8), (200 * c, 30 * j, 0)).save(tmp_path / name / f"{j}.png")
        dm = ImageFolderDataModule(str(tmp_path), image_size=8, batch_size=4, num_workers=0)
        model = ImageClassifier(width=4)
        quiet_trainer(max_steps=1, limit_val_batches=0).fit(model, datamodule=dm)
        assert model.hparams.num_classes == 2
        assert model.net[-1].out_features == 2


def test_digits_are_not_written_into_a_folder_of_your_own(tmp_path: Path) -> None:
    from examples.bundled_data import DigitsImageFolder

    for name in ("cat", "dog"):
        (tmp_path / name).mkdir()
        Image.new("RGB", (8, 8)).save(tmp_path / name / "0.png")
    dm = DigitsImageFolder(root=str(tmp_path))
    dm.prepare_data()
    dm.setup("fit")
    assert dm.classes == ["cat", "dog"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cat", "dog"]


def test_the_docs_mixed_remote_cached_config_parses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The streaming page shows a LightningCLI config of weighted Sources on S3 with a cache.
    page = (ROOT / "docs" / "datamodules" / "streaming.md").read_text()
    marker = "<!-- cli-config: streaming-mixed -->\n```yaml\n"
    assert page.count(marker) == 1
    config = tmp_path / "mixed.yaml"
    config.write_text(page.split(marker, 1)[1].split("```", 1)[0])
    monkeypatch.setattr(sys, "argv", ["cli.py"])
    dm = main(["--config", str(config)], run=False).datamodule
    from datamodules import Source, StreamingDataModule

    assert isinstance(dm, StreamingDataModule)
    assert dm.files["train"] == [
        Source("s3://corpus/web/*.jsonl", weight=7, name="web"),
        Source("s3://corpus/code/*.parquet", weight=[[0, 2], [10, 4]], name="code"),
        Source("s3://corpus/books/", weight=1, name="books"),
    ]
    assert [s.name for s in dm.files["val"]] == ["web", "code"]
    assert (dm.epoch_size, dm.source_key, dm.cache_limit) == (1_000_000, "source", 50 * 10**9)
    assert dm.remote.storage_options == {"endpoint_url": "https://object-store.internal:9000"}
    assert (dm.remote.retries, dm.remote.timeout, dm.prefetch_shards) == (8, 30.0, 2)
