"""``python -m datamodules inspect`` and the inspect hooks (describe_data, plot_batch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from datamodules import TensorDataModule
from datamodules import __main__ as entry
from datamodules import tuner as tuner_module
from datamodules.inspect_cli import expand_config, main
from datamodules.inspection import (
    describe_batch,
    length_stats,
    padding_efficiency,
    plot_image_grid,
    plot_lengths,
    plot_tensor_batch,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "configs" / "tensor.yaml"


@pytest.fixture
def npz(tmp_path: Path) -> Path:
    """100 samples: x (100, 4) float32 and y = id % 3 (34, 33, 33 per class)."""
    path = tmp_path / "data.npz"
    ids = np.arange(100)
    x = np.stack([ids, ids * 2, -ids, ids % 7], axis=1).astype(np.float32)
    np.savez(path, x=x, y=ids % 3)
    return path


def check_png(path: Path, min_colours: int = 5) -> tuple[int, int]:
    with Image.open(path) as image:
        assert image.format == "PNG"
        colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
        assert colours is not None and len(colours) >= min_colours  # not a blank canvas
        return image.size


class LengthsDataModule(TensorDataModule):
    """A DataModule that plugs its own inspect hooks in (as a text DataModule would)."""

    def load_tensors(self) -> dict[str, torch.Tensor]:
        lengths = torch.arange(40) % 9 + 1
        return {"lengths": lengths, "y": torch.arange(40) % 2}

    def describe_data(self) -> list[str]:
        return [*super().describe_data(), f"  lengths: {length_stats(self.tensors['lengths'])}"]

    def plot_batch(self, batch: Any, path: Any) -> Path:
        return plot_lengths(batch["lengths"], path, title="lengths of one batch")


class TestInspectCommand:
    def test_prints_summary_statistics_batch_and_writes_picture(
        self, npz: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        out = tmp_path / "pics" / "batch.png"
        args = ["--data", "TensorDataModule", f"--data.path={npz}", "--data.batch_size", "8"]
        assert main([*args, "--data.val_split", "0.2", "--out", str(out)]) == 0
        text = capsys.readouterr().out
        lines = text.splitlines()
        assert lines[0] == "TensorDataModule"
        assert "  splits: train=80, val=20, test=0 (split_seed=42, fingerprint " in text
        assert "  num_workers=0: auto: batches are gathered from tensors in memory" in text
        data = lines.index("data:")
        counts = [lines[data + 1], lines[data + 2], lines[data + 3]]
        assert counts[0].startswith("  train: 80 samples; classes 0: ")
        train = sum(int(p.split(": ")[-1]) for p in counts[0].split("classes ")[1].split(", "))
        val = sum(int(p.split(": ")[-1]) for p in counts[1].split("classes ")[1].split(", "))
        assert (train, val) == (80, 20)
        assert counts[2] == "  test: 0 samples"
        batch = lines.index("one train batch:")
        assert lines[batch + 1].startswith("  x: (8, 4) float32, values in [")
        assert lines[batch + 2].startswith("  y: (8,) int64, values in [")
        assert lines[-1] == f"picture of one train batch: {out.resolve()}"
        width, height = check_png(out)
        assert width > 300 and height > 200

    def test_tune_puts_the_table_in_the_summary(
        self,
        npz: Path,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        monkeypatch.setattr(tuner_module, "available_cpus", lambda: 1)  # candidates 0 and 1
        args = ["--data", "TensorDataModule", "--data.path", str(npz), "--data.batch_size", "8"]
        out = ["--out", str(tmp_path / "b.png"), "--tune", "--tune_batches", "3"]
        assert main([*args, *out, "--tune_repeats", "1"]) == 0
        text = capsys.readouterr().out
        assert "  num_workers=" in text and ": tuned: " in text
        assert "  tuner (train loader; up to 3 batches timed, 1 time(s) per candidate" in text
        table = [line for line in text.splitlines() if line.startswith("    workers=")]
        assert len(table) == 3  # (0, None), (1, 2), (1, 4)
        assert sum(line.endswith("<- chosen") for line in table) == 1

    def test_lightning_cli_config_and_val_split(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        out = tmp_path / "wine.png"
        assert main(["--config", str(CONFIG), "--split", "val", f"--out={out}"]) == 0
        text = capsys.readouterr().out
        assert text.startswith("WineDataModule\n")
        assert "  splits: train=115, val=27, test=36 " in text
        assert "  val: 27 samples; classes 0: 9, 1: 11, 2: 7" in text
        assert "  0: (16, 13) float32" in text
        assert text.splitlines()[-1] == f"picture of one val batch: {out.resolve()}"
        check_png(out)

    def test_command_line_overrides_the_config(self, tmp_path: Path) -> None:
        args = ["--config", str(CONFIG), "--data.batch_size", "5", "--out", "x.png"]
        expanded = expand_config(args)
        assert (
            expanded[0] == "--data"
            and '"class_path": "examples.bundled_data.WineDataModule"' in (expanded[1])
        )
        assert expanded[2:] == ["--data.batch_size", "5", "--out", "x.png"]

    def test_a_datamodules_own_hooks_are_used(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        out = tmp_path / "lengths.png"
        name = f"{__name__}.LengthsDataModule"
        assert main(["--data", name, "--data.batch_size", "10", "--out", str(out)]) == 0
        text = capsys.readouterr().out
        assert "  lengths: min 1, median 4, mean 4.8, p95 9, max 9" in text
        assert "  lengths: (10,) int64" in text
        check_png(out)

    def test_empty_split_is_refused(self, npz: Path) -> None:
        with pytest.raises(SystemExit, match="the test split of TensorDataModule is empty"):
            main(["--data", "TensorDataModule", "--data.path", str(npz), "--split", "test"])

    @pytest.mark.parametrize(
        "args",
        [
            [],
            ["--data", "NoSuchDataModule"],
            ["--data", "TensorDataModule", "--data.num_workers", "-1"],
            ["--data", "TensorDataModule", "--split", "predict"],
        ],
    )
    def test_bad_arguments_exit_with_usage(
        self, args: list[str], capsys: pytest.CaptureFixture[str]
    ) -> None:
        with pytest.raises(SystemExit) as raised:
            main(args)
        assert raised.value.code == 2
        assert "usage: python -m datamodules inspect" in capsys.readouterr().err

    def test_entry_point_dispatch(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert entry.main(["--help"]) == 0
        assert capsys.readouterr().out.startswith("usage: python -m datamodules inspect")
        assert entry.main([]) == 2
        assert entry.main(["train"]) == 2
        assert "unknown command 'train'" in capsys.readouterr().err


class TestDescriptionsAndPictures:
    def test_describe_batch(self) -> None:
        batch = {"x": torch.tensor([[1.0, -2.0], [3.0, 4.0]]), "meta": ["a", "b"], "n": 3}
        assert describe_batch(batch) == [
            "x: (2, 2) float32, values in [-2, 4]",
            "meta: list of 2",
            "n: int",
        ]
        assert describe_batch(torch.zeros(3, dtype=torch.uint8)) == [
            "batch: (3,) uint8, values in [0, 0]"
        ]

    def test_describe_data_without_labels(self) -> None:
        dm = TensorDataModule({"a": torch.randn(10, 2), "b": torch.randn(10)}, val_split=2)
        assert dm.describe_data() == [
            "data:",
            "  train: 8 samples",
            "  val: 2 samples",
            "  test: 0 samples",
        ]

    def test_float_labels_are_not_counted_as_classes(self) -> None:
        dm = TensorDataModule(torch.randn(10, 2), torch.randn(10), val_split=0)
        assert dm.describe_data()[1] == "  train: 10 samples"

    def test_length_statistics(self) -> None:
        assert length_stats([1, 2, 3, 4, 100]) == "min 1, median 3, mean 22.0, p95 81, max 100"
        assert length_stats([]) == "no sequences"
        assert padding_efficiency([[2, 4], [3, 3]]) == pytest.approx(12 / 14)

    def test_pictures(self, tmp_path: Path) -> None:
        x, y = torch.randn(20, 6), torch.arange(20) % 4
        check_png(plot_tensor_batch((x, y), tmp_path / "t.png"))
        check_png(plot_tensor_batch({"only": torch.randn(5, 3, 2)}, tmp_path / "u.png"))
        images = torch.randint(0, 256, (6, 3, 16, 16), dtype=torch.uint8)
        grid = plot_tensor_batch((images, torch.arange(6) % 2), tmp_path / "g.png")
        width, _ = check_png(grid)
        assert width == 3 * (64 + 4) + 4  # 3 columns of 16-px images drawn at 64 px
        check_png(
            plot_image_grid(torch.rand(4, 1, 8, 8), tmp_path / "gray.png", [0, 1, 0, 1], ["a", "b"])
        )
        check_png(plot_lengths(torch.randint(1, 50, (64,)), tmp_path / "l.png", padded_to=64))
        with pytest.raises(ValueError, match="expected \\(N, 1 or 3, H, W\\)"):
            plot_image_grid(torch.zeros(2, 5, 4, 4), tmp_path / "bad.png")
        with pytest.raises(ValueError, match="no tensor to draw"):
            plot_tensor_batch(["a", "b"], tmp_path / "none.png")
