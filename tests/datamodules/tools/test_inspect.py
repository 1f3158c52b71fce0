"""``python -m datamodules inspect`` and the inspect hooks (describe_data, plot_batch)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms.v2.functional import resize
from torchvision.utils import make_grid

from datamodules import ImageFolderDataModule, TensorDataModule, TextDataModule
from datamodules import __main__ as entry
from datamodules.tools import tuner as tuner_module
from datamodules.tools.descriptions import (
    batch_tokens,
    describe_batch,
    describe_datamodule,
    length_stats,
    padding_comparison,
    padding_efficiency,
    random_batches,
)
from datamodules.tools.figures import PlotsUnavailable
from datamodules.tools.inspect_cli import expand_config, main, split_argument
from datamodules.tools.pictures import (
    plot_image_grid,
    plot_lengths,
    plot_padding,
    plot_tensor_batch,
)

ROOT = Path(__file__).resolve().parents[3]
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


def bottom_left(path: Path, grid: torch.Tensor) -> torch.Tensor:
    """The (3, H, W) block of the picture at ``path`` where an image grid of ``grid``'s size
    lies: its bottom left corner."""
    with Image.open(path) as picture:
        pixels = torch.from_numpy(np.array(picture.convert("RGB"))).permute(2, 0, 1)
    return pixels[:, pixels.shape[1] - grid.shape[1] :, : grid.shape[2]]


def caption_rows(grid_rows: int, tile: int, pad: int = 16) -> torch.Tensor:
    """Bool per grid row of pixels: True in the gaps under each image row (the captions)."""
    rows = torch.zeros(pad + grid_rows * (tile + pad), dtype=torch.bool)
    for r in range(grid_rows):
        start = pad + r * (tile + pad) + tile
        rows[start : start + pad] = True
    return rows


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

    def test_without_matplotlib_the_text_is_printed_with_how_to_get_the_picture(
        self,
        npz: Path,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
        out = tmp_path / "batch.png"
        args = ["--data", "TensorDataModule", f"--data.path={npz}", "--data.batch_size", "8"]
        assert main([*args, "--out", str(out)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == "TensorDataModule" and "one train batch:" in lines
        assert lines[-1].startswith("no picture of one train batch: ")
        assert 'pip install "lightning-datamodules[plots]"' in lines[-1]
        assert not out.exists()

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
        check_png(plot_tensor_batch((images, torch.arange(6) % 2), tmp_path / "g.png"))
        check_png(
            plot_image_grid(torch.rand(4, 1, 8, 8), tmp_path / "gray.png", [0, 1, 0, 1], ["a", "b"])
        )
        check_png(plot_lengths(torch.randint(1, 50, (64,)), tmp_path / "l.png", padded_to=64))
        with pytest.raises(ValueError, match="expected \\(N, 1 or 3, H, W\\)"):
            plot_image_grid(torch.zeros(2, 5, 4, 4), tmp_path / "bad.png")
        with pytest.raises(ValueError, match="no tensor to draw"):
            plot_tensor_batch(["a", "b"], tmp_path / "none.png")

    def test_an_image_grid_is_make_grid_of_the_batch(self, tmp_path: Path) -> None:
        images = torch.randint(0, 256, (6, 3, 16, 16), dtype=torch.uint8)
        # 16-px images are drawn at 64 px (nearest neighbour), 3 columns of 2 rows.
        tiles = images.repeat_interleave(4, dim=-2).repeat_interleave(4, dim=-1)
        expected = make_grid(tiles, nrow=3, padding=2, pad_value=255)
        path = plot_image_grid(images, tmp_path / "plain.png")
        assert check_png(path) == (expected.shape[2], expected.shape[1])  # no title: the grid
        assert torch.equal(bottom_left(path, expected), expected)
        # With labels (here from a tensor batch), captions fill the 16-px gaps under each row.
        expected = make_grid(tiles, nrow=3, padding=16, pad_value=255)
        path = plot_tensor_batch((images, torch.arange(6) % 2), tmp_path / "labelled.png")
        drawn = bottom_left(path, expected)
        captions = caption_rows(2, 64)
        assert torch.equal(drawn[:, ~captions], expected[:, ~captions])
        assert (drawn[:, captions] != 255).any()  # the captions are written
        gray = torch.randint(0, 256, (4, 1, 64, 64), dtype=torch.uint8)
        expected = make_grid(gray.expand(-1, 3, -1, -1), nrow=2, padding=2, pad_value=255)
        title = "four gray images of 64 x 64 pixels, drawn as they are"
        path = plot_image_grid(gray, tmp_path / "gray.png", title=title)
        assert torch.equal(bottom_left(path, expected), expected)
        with Image.open(path) as picture:
            assert picture.height == 24 + expected.shape[1]  # the title line above the grid
            assert picture.width > expected.shape[2]  # widened to fit the title

    def test_without_matplotlib_drawing_says_how_to_install_it(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
        hint = 'pip install "lightning-datamodules[plots]"'
        with pytest.raises(ImportError, match="matplotlib") as raised:
            plot_lengths([1, 2, 3], tmp_path / "l.png")
        assert isinstance(raised.value, PlotsUnavailable) and hint in str(raised.value)
        with pytest.raises(PlotsUnavailable, match="lightning-datamodules\\[plots\\]"):
            plot_tensor_batch(torch.zeros(2, 3, 8, 8), tmp_path / "g.png")
        assert not list(tmp_path.iterdir())


# ------------------------------------------------------------- image folders and texts
def write_images(root: Path, counts: dict[str, int], size: int = 8) -> Path:
    """Class folders of solid-colour PNGs: ``counts[name]`` images in ``root/name``."""
    for c, (name, count) in enumerate(counts.items()):
        (root / name).mkdir(parents=True, exist_ok=True)
        for j in range(count):
            Image.new("RGB", (size, size), (40 * c, 10 * j, 99)).save(root / name / f"{j}.png")
    return root


def write_jsonl(path: Path, texts: list[str], labels: list[str]) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        for text, label in zip(texts, labels, strict=True):
            handle.write(json.dumps({"text": text, "label": label}) + "\n")
    return path


def expected_counts(labels: torch.Tensor, names: list[str]) -> str:
    """``"cat: 3, dog: 4"`` counted here with plain Python, for comparison."""
    counted: dict[int, int] = {}
    for value in labels.tolist():
        counted[value] = counted.get(value, 0) + 1
    return ", ".join(f"{names[k]}: {counted[k]}" for k in sorted(counted))


def token_totals(lengths: list[int], batches: list[list[int]]) -> tuple[int, int]:
    """(real, padded) tokens of batches padded to their longest, in plain Python."""
    real = sum(lengths[i] for b in batches for i in b)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return real, padded


class TestImageFolderInspect:
    def test_inspect_prints_class_names_and_draws_the_grid(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        root = write_images(tmp_path / "train", {"cat": 4, "dog": 5, "fox": 6})
        val = write_images(tmp_path / "val", {"cat": 1, "dog": 2})
        out = tmp_path / "grid.png"
        args = ["--data", "ImageFolderDataModule", "--data.root", str(root)]
        args += ["--data.val_root", str(val), "--data.test_split", "3"]
        args += ["--data.image_size", "8", "--data.batch_size", "6", "--data.num_workers", "0"]
        assert main([*args, "--out", str(out)]) == 0
        lines = capsys.readouterr().out.splitlines()
        dm = ImageFolderDataModule(str(root), val_root=str(val), test_split=3, image_size=8)
        dm.setup("fit")
        targets = torch.tensor([t for _, t in dm.samples])
        names = ["cat", "dog", "fox"]
        train, test = dm.split_indices["train"], dm.split_indices["test"]
        data = lines.index("data:")
        assert lines[data + 1 : data + 4] == [
            f"  train: 12 samples; classes {expected_counts(targets[train], names)}",
            "  val: 3 samples; classes cat: 1, dog: 2",  # its own folder, counted too
            f"  test: 3 samples; classes {expected_counts(targets[test], names)}",
        ]
        batch = lines.index("one train batch:")
        assert lines[batch + 1].startswith("  0: (6, 3, 8, 8) uint8, values in [")
        assert lines[batch + 2].startswith("  1: (6,) int64, values in [")
        assert lines[-1] == f"picture of one train batch: {out.resolve()}"
        width, height = check_png(out)
        # 6 images of 8 px drawn at 64 px: 3 columns x 2 rows, 16 px apart (their captions),
        # under a title line.
        assert height == 24 + 2 * (64 + 16) + 16
        assert width >= 3 * (64 + 16) + 16

    def test_captions_are_shortened_to_the_image_width(self, tmp_path: Path) -> None:
        names = ["a_very_long_class_name_that_would_overrun", "b"]
        grid = plot_image_grid(torch.zeros(2, 3, 8, 8), tmp_path / "g.png", [0, 1], names)
        with Image.open(grid) as picture:
            # Two 64-px images 16 px apart, the captions in the 16 px under them.
            assert picture.size == (2 * (64 + 16) + 16, 16 + 64 + 16)
            rgb = picture.convert("RGB")
            # The gap between the two captions stays background: the first one was cut short.
            gap = [rgb.getpixel((x, y)) for x in range(80, 96) for y in range(80, 96)]
            assert set(gap) == {(255, 255, 255)}
            caption = [rgb.getpixel((x, y)) for x in range(16, 80) for y in range(80, 96)]
            assert len(set(caption)) > 2  # the shortened name is drawn

    def test_large_images_are_shrunk(self, tmp_path: Path) -> None:
        images = torch.randint(0, 256, (4, 3, 300, 200), dtype=torch.uint8)
        path = plot_image_grid(images, tmp_path / "big.png", max_tile=150)
        # 300 x 200 shrunk to 150 x 100 (antialiased), 2 columns 2 px apart.
        expected = make_grid(resize(images, [150, 100], antialias=True), nrow=2, pad_value=255)
        assert check_png(path) == (2 * (100 + 2) + 2, 2 * (150 + 2) + 2)
        assert torch.equal(bottom_left(path, expected), expected)


@pytest.fixture
def surnames_like(tmp_path: Path) -> Path:
    """60 texts of 1..19 characters (lengths i % 19 + 1) labelled a/b/c by i % 3."""
    texts = ["xyz"[i % 3] * (i % 19 + 1) for i in range(60)]
    labels = ["abc"[i % 3] for i in range(60)]
    return write_jsonl(tmp_path / "texts.jsonl", texts, labels)


class TestTextInspect:
    def test_inspect_prints_lengths_labels_and_padding(
        self, surnames_like: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        out = tmp_path / "text.png"
        args = ["--data", "TextDataModule", "--data.train_file", str(surnames_like)]
        args += ["--data.batch_size", "8", "--data.val_split", "12", "--data.test_split", "0"]
        assert main([*args, "--out", str(out)]) == 0
        lines = capsys.readouterr().out.splitlines()
        dm = TextDataModule(train_file=str(surnames_like), batch_size=8, val_split=12)
        dm.setup("fit")
        lengths = [i % 19 + 1 for i in range(60)]
        labels = torch.tensor([i % 3 for i in range(60)])
        data = lines.index("data:")
        train, val = dm.split_indices["train"], dm.split_indices["val"]
        assert lines[data + 1 : data + 4] == [
            f"  train: 48 samples; classes {expected_counts(labels[train], ['a', 'b', 'c'])}",
            f"  val: 12 samples; classes {expected_counts(labels[val], ['a', 'b', 'c'])}",
            "  test: 0 samples",
        ]
        assert lines[data + 4] == "lengths (tokens per sample):"
        assert lines[data + 5] == f"  train: {length_stats([lengths[i] for i in train])}"
        assert lines[data + 7] == "  test: no sequences"
        assert lines[data + 8] == (
            "padding efficiency of epoch 0 (real / padded tokens; batch_by='samples', "
            "batch_size=8), against random batches of the same sizes:"
        )
        view = dm.view("train")
        ours = [b.tolist() for b in dm.make_sampler("train", view, 0, 1).epoch_batches(0)]
        split_lengths = [lengths[i] for i in train]
        real, padded = token_totals(split_lengths, ours)
        shuffled = [b.tolist() for b in random_batches(48, [len(b) for b in ours])]
        base_real, base_padded = token_totals(split_lengths, shuffled)
        assert lines[data + 9] == (
            f"  train: {real / padded:.1%} in 6 batches (bucket=True); "
            f"random: {base_real / base_padded:.1%}"
        )
        assert real / padded > base_real / base_padded  # what the buckets are for
        assert lines[data + 10].startswith("  val: ") and "(eval_bucket=False)" in lines[data + 10]
        assert lines[data + 11] == "  test: no batches"
        assert lines[-1] == f"picture of one train batch: {out.resolve()}"
        assert check_png(out) == (900, 700)

    def test_labels_of_a_separate_val_file_are_counted_by_name(
        self, surnames_like: Path, tmp_path: Path
    ) -> None:
        val = write_jsonl(tmp_path / "val.jsonl", ["x", "yy", "zzz", "w"], ["c", "d", "d", "a"])
        dm = TextDataModule(train_file=str(surnames_like), val_file=str(val), batch_size=8)
        lines = dm.describe_data()
        assert dm.label_names == ["a", "b", "c", "d"]
        assert lines[2] == "  val: 4 samples; classes a: 1, c: 1, d: 2"
        assert lines[6] == "  val: min 1, median 2, mean 1.8, p95 3, max 3"

    def test_plot_batch_marks_the_batch_of_its_split(
        self, surnames_like: Path, tmp_path: Path
    ) -> None:
        dm = TextDataModule(train_file=str(surnames_like), batch_size=8, val_split=12)
        assert split_argument(dm.plot_batch, "val") == {"split": "val"}
        assert split_argument(TensorDataModule(torch.zeros(4, 1)).plot_batch, "val") == {}
        batch = next(iter(dm.make_loader("val")))
        check_png(dm.plot_batch(batch, tmp_path / "val.png", split="val"), min_colours=6)
        with pytest.raises(ValueError, match="the test split is empty"):
            dm.plot_batch(batch, tmp_path / "test.png", split="test")


class TestPaddingHelpers:
    def test_batch_tokens_and_random_batches(self) -> None:
        lengths = [2, 4, 3, 3, 5]
        batches = [torch.tensor([0, 1]), torch.tensor([2, 3]), torch.tensor([4])]
        real, padded = batch_tokens(lengths, batches)
        assert (real.tolist(), padded.tolist()) == ([6, 6, 5], [8, 6, 5])
        real, padded = batch_tokens(lengths, [torch.tensor([0, 1]), torch.tensor([2, 3, 4])], 4)
        assert (real.tolist(), padded.tolist()) == ([6, 11], [8, 24])
        drawn = random_batches(5, [2, 3], seed=1)
        assert [len(b) for b in drawn] == [2, 3]
        assert sorted(torch.cat(drawn).tolist()) == [0, 1, 2, 3, 4]
        assert [b.tolist() for b in drawn] == [b.tolist() for b in random_batches(5, [2, 3], 1)]
        with pytest.raises(ValueError, match="summing to 6 cannot be drawn from 5"):
            random_batches(5, [3, 3])

    def test_padding_comparison(self) -> None:
        lengths = [1, 1, 9, 9]
        sorted_batches = [torch.tensor([0, 1]), torch.tensor([2, 3])]
        ours, random = padding_comparison(lengths, sorted_batches, seed=0)
        assert ours == 1.0
        drawn = [b.tolist() for b in random_batches(4, [2, 2], seed=0)]
        real, padded = token_totals(lengths, drawn)
        assert random == pytest.approx(real / padded)

    def test_plot_padding(self, tmp_path: Path) -> None:
        lengths = torch.randint(1, 300, (500,), generator=torch.Generator().manual_seed(0))
        batches = list(torch.argsort(lengths).split(16))
        path = plot_padding(lengths, batches, tmp_path / "p.png", batch_lengths=lengths[:3])
        assert check_png(path, min_colours=6) == (900, 700)
        with pytest.raises(ValueError, match="at least one length and one batch"):
            plot_padding(lengths, [], tmp_path / "q.png")

    def test_describe_datamodule_with_split_labels(self) -> None:
        dm = TensorDataModule(torch.zeros(10, 1), torch.arange(10) % 2, val_split=4)
        given = {"train": torch.tensor([0, 0, 1]), "val": None, "test": torch.tensor([])}
        assert describe_datamodule(dm, names=["no", "yes"], split_labels=given) == [
            "data:",
            "  train: 6 samples; classes no: 2, yes: 1",
            "  val: 4 samples",
            "  test: 0 samples",
        ]


def test_progress_step_off_a_terminal_draws_nothing_and_raises_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading
    import time

    from datamodules.tools.inspect_cli import progress_step

    errors: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    with progress_step("a slow step", delay=0.01):
        time.sleep(0.1)
    assert errors == []
