"""ImageFolderDataModule: the shared contract plus image-specific behaviour.

Fixture images are tiny solid-colour PNGs whose colour encodes the sample's index in the
folder (red + 256 * green), so any crop, resize or flip keeps it readable from a batch.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.datasets import ImageFolder

from datamodules import ImageFolderDataModule
from datamodules.images.batches import ImageBatchView
from datamodules.images.datamodule import IMAGENET_MEAN, IMAGENET_STD
from datamodules.imaging.decoding import ImageDecodeError
from tests.datamodules.contract import ContractCase, DataModuleContract, quiet_trainer
from tests.recording import RecordingModel

CLASSES = ("cat", "dog", "fox")
PER_CLASS = 18
N = PER_CLASS * len(CLASSES)
SIZE = 8


def write_folder(root: Path, per_class: tuple[int, ...] = (PER_CLASS,) * 3) -> Path:
    """Writes class folders of solid-colour PNGs; sample i (torchvision order) has colour i."""
    index = 0
    for name, count in zip(CLASSES, per_class, strict=True):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        for j in range(count):
            colour = (index % 256, index // 256, 7)
            Image.new("RGB", (SIZE + 4, SIZE), colour).save(folder / f"{j:03d}.png")
            index += 1
    return root


def batch_ids(batch: Any) -> list[int]:
    """Reads each image's id from its top-left pixel (uint8, or normalised float)."""
    images = batch[0]
    pixels = images[:, :2, 0, 0]
    if images.dtype != torch.uint8:
        mean = torch.tensor(IMAGENET_MEAN[:2]).view(1, 2)
        std = torch.tensor(IMAGENET_STD[:2]).view(1, 2)
        pixels = ((pixels.cpu() * std + mean) * 255).round()
    pixels = pixels.long()
    return (pixels[:, 0] + 256 * pixels[:, 1]).tolist()


def ddp_datamodule(root: str, **kwargs: Any) -> tuple[ImageFolderDataModule, Any]:
    """Factory for tests/ddp_runner.py."""
    dm = ImageFolderDataModule(root, image_size=SIZE, val_split=0.2, batch_size=4, **kwargs)
    return dm, batch_ids


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_folder(tmp_path_factory.mktemp("images"))


class TestImageFolderContract(DataModuleContract):
    @pytest.fixture
    def case(self, folder: Path) -> ContractCase:
        return ContractCase(
            make=lambda **kw: ImageFolderDataModule(str(folder), image_size=SIZE, **kw),
            batch_ids=batch_ids,
            num_samples=N,
            ddp_factory="tests.datamodules.images.test_datamodule:ddp_datamodule",
            ddp_kwargs={"root": str(folder)},
        )


class TestLikeTorchvision:
    def test_classes_and_samples_equal_torchvision_imagefolder(self, folder: Path) -> None:
        dm = ImageFolderDataModule(str(folder))
        dm.setup("fit")
        reference = ImageFolder(str(folder))
        assert dm.classes == reference.classes == list(CLASSES)
        assert dm.class_to_idx == reference.class_to_idx
        assert dm.samples == reference.samples

    def test_split_is_stratified_by_default(self, tmp_path: Path) -> None:
        root = write_folder(tmp_path, per_class=(40, 12, 8))
        dm = ImageFolderDataModule(str(root), val_split=0.25, test_split=0.25)
        dm.setup("fit")
        targets = torch.from_numpy(dm.index.targets)
        for split, share in (("train", 0.5), ("val", 0.25), ("test", 0.25)):
            counts = torch.bincount(targets[dm.split_indices[split]], minlength=3)
            expected = torch.tensor([40, 12, 8]) * share
            assert bool(((counts - expected).abs() <= 1).all()), (split, counts.tolist())

    def test_val_and_test_roots_replace_the_random_split(self, tmp_path: Path) -> None:
        train = write_folder(tmp_path / "train")
        val = tmp_path / "val"
        (val / "dog").mkdir(parents=True)
        Image.new("RGB", (SIZE, SIZE), (3, 0, 7)).save(val / "dog" / "a.png")
        dm = ImageFolderDataModule(str(train), val_root=str(val), image_size=SIZE, val_split=0.3)
        dm.setup("fit")
        assert dm.split_size("train") == N and dm.split_size("val") == 1
        images, targets = next(iter(dm.val_dataloader()))
        assert targets.tolist() == [dm.class_to_idx["dog"]]
        assert images[0, :, 0, 0].tolist() == [3, 0, 7]

    def test_val_root_with_an_unknown_class_is_refused(self, tmp_path: Path) -> None:
        train = write_folder(tmp_path / "train")
        (tmp_path / "val" / "owl").mkdir(parents=True)
        Image.new("RGB", (SIZE, SIZE)).save(tmp_path / "val" / "owl" / "a.png")
        dm = ImageFolderDataModule(str(train), val_root=str(tmp_path / "val"))
        with pytest.raises(ValueError, match=r"val_root=.*\['owl'\]"):
            dm.setup("fit")


class TestBatches:
    def test_workers_send_uint8_and_the_device_gets_normalised_float(self, folder: Path) -> None:
        dm = ImageFolderDataModule(str(folder), image_size=SIZE, batch_size=6, num_workers=2)
        images, targets = next(iter(dm.train_dataloader()))
        assert images.dtype == torch.uint8 and images.shape == (6, 3, SIZE, SIZE)
        assert targets.dtype == torch.int64

        class DtypeModel(RecordingModel):
            def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
                images = batch[0]
                assert images.dtype == torch.float32
                colour = torch.tensor([7.0]) / 255
                expected = (colour - IMAGENET_MEAN[2]) / IMAGENET_STD[2]
                assert torch.allclose(images[:, 2], expected.expand_as(images[:, 2]), atol=1e-5)
                return super().training_step(batch, batch_idx)

        model = DtypeModel(batch_ids)
        quiet_trainer(max_epochs=1).fit(model, datamodule=dm)
        seen = sorted(i for b in model.train_epochs()[0] for i in b)
        assert seen == sorted(dm.split_indices["train"].tolist())

    def test_normalize_false_gives_unit_range(self, folder: Path) -> None:
        dm = ImageFolderDataModule(str(folder), image_size=SIZE, normalize=False)
        out = dm.on_after_batch_transfer((torch.full((1, 3, 2, 2), 255, dtype=torch.uint8),), 0)
        assert torch.equal(out[0], torch.ones(1, 3, 2, 2))

    def test_default_transforms_give_image_size(self, folder: Path) -> None:
        dm = ImageFolderDataModule(str(folder), image_size=5, batch_size=4)
        for loader in (dm.train_dataloader(), dm.val_dataloader()):
            images, _ = next(iter(loader))
            assert images.shape == (4, 3, 5, 5)

    def test_custom_transforms_are_used(self, folder: Path) -> None:
        from torchvision.transforms import v2

        dm = ImageFolderDataModule(
            str(folder), train_transforms=v2.Resize((3, 4)), eval_transforms=v2.Resize((2, 2))
        )
        assert next(iter(dm.train_dataloader()))[0].shape[2:] == (3, 4)
        assert next(iter(dm.val_dataloader()))[0].shape[2:] == (2, 2)

    def test_no_deprecation_warning_from_our_code(self, folder: Path) -> None:
        dm = ImageFolderDataModule(str(folder), image_size=SIZE, batch_size=8)
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            for _ in dm.train_dataloader():
                pass

    def test_balanced_sampling_equalises_classes_and_splits_draws_across_ranks(
        self, tmp_path: Path
    ) -> None:
        root = write_folder(tmp_path, per_class=(90, 20, 10))
        dm = ImageFolderDataModule(str(root), image_size=SIZE, balanced=True, val_split=0)
        dm.setup("fit")
        view = dm.view("train")
        draws = [dm.make_sampler("train", view, rank, 2) for rank in range(2)]
        batches = [[b for b in s.batches(0)] for s in draws]
        assert len(batches[0]) == len(batches[1])
        whole = draws[0].permutation(0)
        assert sorted(torch.cat(batches[0] + batches[1]).tolist()) == sorted(whole.tolist())
        many = torch.cat([draws[0].permutation(e) for e in range(20)])
        counts = torch.bincount(torch.from_numpy(dm.index.targets)[many], minlength=3)
        shares = counts.float() / counts.sum()
        assert bool(((shares - 1 / 3).abs() < 0.04).all()), shares.tolist()

    def test_show_batch_writes_a_png_grid(self, folder: Path, tmp_path: Path) -> None:
        dm = ImageFolderDataModule(str(folder), image_size=SIZE, batch_size=10)
        out = dm.show_batch(tmp_path / "grid.png")
        view = dm.view("train")
        first = view[dm.make_sampler("train", view, 0, 1).batches(0)[0]]
        with Image.open(out) as picture:
            assert picture.format == "PNG"
            # 10 images of 8 px drawn at 64 px: torchvision's make_grid of 4 columns x 3 rows,
            # 16 px apart (the captions go under each image), under a 24-pixel title (which
            # may widen the canvas).
            assert picture.height == 24 + 3 * (64 + 16) + 16
            assert picture.width >= 4 * (64 + 16) + 16
            rgb = picture.convert("RGB")
            for i, sample in enumerate(batch_ids(first)):
                row, col = divmod(i, 4)
                centre = (16 + col * 80 + 32, 24 + 16 + row * 80 + 32)
                assert rgb.getpixel(centre) == (sample % 256, sample // 256, 7)
        # show_batch is plot_batch of the first train batch (the same picture).
        again = dm.plot_batch(first, tmp_path / "plot.png", max_images=32)
        with Image.open(out) as shown, Image.open(again) as plotted:
            assert shown.tobytes() == plotted.convert(shown.mode).tobytes()


def write_bad_files(root: Path) -> dict[str, Path]:
    good = root / "dog" / "000.png"
    jpeg = root / "dog" / "good.jpg"
    Image.new("RGB", (32, 32), (9, 9, 9)).save(jpeg, quality=90)
    bad = {
        "truncated": root / "dog" / "truncated.jpg",
        "empty": root / "dog" / "empty.jpg",
        "random": root / "dog" / "random.jpg",
    }
    bad["truncated"].write_bytes(jpeg.read_bytes()[: jpeg.stat().st_size // 2])
    bad["empty"].write_bytes(b"")
    bad["random"].write_bytes(np.random.default_rng(0).bytes(500))
    jpeg.unlink()
    assert good.exists()
    return bad


class TestBadFiles:
    @pytest.mark.parametrize("workers", [0, 2])
    @pytest.mark.parametrize("kind", ["truncated", "empty", "random"])
    def test_raise_names_the_file(self, tmp_path: Path, workers: int, kind: str) -> None:
        root = write_folder(tmp_path / "data", per_class=(3, 3, 3))
        bad = write_bad_files(root)
        for other in set(bad) - {kind}:
            bad[other].unlink()
        dm = ImageFolderDataModule(
            str(root), image_size=SIZE, val_split=0, batch_size=4, num_workers=workers
        )
        with pytest.raises(ImageDecodeError, match=str(bad[kind].name)):
            for _ in dm.train_dataloader():
                pass

    @pytest.mark.parametrize("workers", [0, 2])
    def test_skip_completes_the_epoch_and_reports_which(self, tmp_path: Path, workers: int) -> None:
        root = write_folder(tmp_path / "data", per_class=(5, 5, 5))
        bad = write_bad_files(root)
        dm = ImageFolderDataModule(
            str(root), image_size=SIZE, val_split=0, batch_size=4, num_workers=workers,
            on_error="skip",
        )  # fmt: skip
        with pytest.warns(RuntimeWarning, match=r"skipped 3 unreadable file\(s\)"):
            batches = list(dm.train_dataloader())
        assert len(batches) == 5  # 18 files in batches of 4: no batch lost
        assert all(len(images) == len(targets) >= 1 for images, targets in batches)
        ids = sorted(i for b in batches for i in batch_ids(b))
        assert ids == list(range(15))
        assert sorted(Path(p).name for p, _ in dm.skipped) == sorted(p.name for p in bad.values())

    def test_skip_never_yields_an_empty_batch(self, tmp_path: Path) -> None:
        root = write_folder(tmp_path / "data", per_class=(1, 1, 1))
        bad = write_bad_files(root)
        dm = ImageFolderDataModule(str(root), image_size=SIZE, on_error="skip", val_split=0)
        dm.setup("fit")
        view = dm.view("train")
        assert isinstance(view, ImageBatchView)
        bad_rows = [i for i, (p, _) in enumerate(dm.samples) if Path(p) in bad.values()]
        images, targets = view[torch.tensor(bad_rows)]
        assert len(images) == len(targets) == 1
        assert any("repeated" in reason for _, reason in dm.skipped)

    @pytest.mark.parametrize("workers", [0, 2])
    def test_skip_counts_each_bad_file_once_when_a_batch_is_filled(
        self, tmp_path: Path, workers: int
    ) -> None:
        # In order, batches of 2: [cat/000, dog/000], [empty, random] (all bad: filled with the
        # next readable file, fox/000, the search passing truncated), [truncated, fox/000].
        root = write_folder(tmp_path / "data", per_class=(1, 1, 1))
        write_bad_files(root)
        dm = ImageFolderDataModule(
            str(root), image_size=SIZE, val_split=0, batch_size=2, shuffle=False,
            num_workers=workers, on_error="skip",
        )  # fmt: skip
        with pytest.warns(RuntimeWarning, match=r"skipped 4 unreadable file\(s\)"):
            batches = [batch_ids(b) for b in dm.train_dataloader()]
        assert batches == [[0, 1], [2], [2]]  # fox/000 (colour 2) fills the second batch
        counts = {str(Path(p).relative_to(root)): n for p, n in dm.skipped.counts.items()}
        assert counts == {
            "dog/empty.jpg": 1, "dog/random.jpg": 1, "dog/truncated.jpg": 1, "fox/000.png": 1
        }  # fmt: skip
        filled = dict(dm.skipped)[str(root / "fox" / "000.png")]
        assert filled == "repeated to fill an all-bad batch"
        assert dm.skipped.total == 4

    def test_missing_root(self, tmp_path: Path) -> None:
        dm = ImageFolderDataModule(str(tmp_path / "nowhere"))
        with pytest.raises(FileNotFoundError, match="nowhere"):
            dm.setup("fit")

    def test_root_without_class_folders(self, tmp_path: Path) -> None:
        Image.new("RGB", (4, 4)).save(tmp_path / "loose.png")
        with pytest.raises(FileNotFoundError, match=str(tmp_path)):
            ImageFolderDataModule(str(tmp_path)).setup("fit")

    def test_class_folders_without_images(self, tmp_path: Path) -> None:
        (tmp_path / "cat").mkdir()
        (tmp_path / "cat" / "notes.txt").write_text("no images")
        with pytest.raises(FileNotFoundError, match=r"no image file.*\.png"):
            ImageFolderDataModule(str(tmp_path)).setup("fit")

    @pytest.mark.timeout(30)
    def test_symlink_loop_does_not_hang(self, tmp_path: Path) -> None:
        root = write_folder(tmp_path / "data", per_class=(2, 2, 2))
        os.symlink(root / "cat", root / "cat" / "loop")
        dm = ImageFolderDataModule(str(root))
        dm.setup("fit")
        assert len(dm.samples) == 6

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"on_error": "ignore"}, "on_error='ignore'"),
            ({"image_size": 0}, "image_size=0"),
            ({"mean": (0.5, 0.5)}, "mean="),
            ({"std": (1.0, 0.0, 1.0)}, "std="),
        ],
    )
    def test_bad_arguments(self, folder: Path, kwargs: dict[str, Any], match: str) -> None:
        with pytest.raises(ValueError, match=match):
            ImageFolderDataModule(str(folder), **kwargs)


def test_lightning_cli_builds_it(folder: Path) -> None:
    from lightning.pytorch.cli import LightningCLI

    from datamodules import BaseDataModule
    from tests.datamodules.test_tensor import PlainModel

    args = [
        "--data", "ImageFolderDataModule", "--data.root", str(folder),
        "--data.image_size", "16", "--data.batch_size", "5", "--trainer.logger", "false",
    ]  # fmt: skip
    cli = LightningCLI(PlainModel, BaseDataModule, subclass_mode_data=True, run=False, args=args)
    dm = cli.datamodule
    assert isinstance(dm, ImageFolderDataModule)
    images, _ = next(iter(dm.train_dataloader()))
    assert images.shape == (5, 3, 16, 16)


@pytest.mark.parametrize(("old_world", "new_world"), [(1, 2), (2, 1), (2, 3), (3, 2)])
def test_balanced_draws_resume_elastically(old_world: int, new_world: int) -> None:
    # Weighted draws repeat samples, so the resume works on draw positions, not sample ids.
    from datamodules.images.datamodule import BalancedBatchSampler

    labels = torch.tensor([0] * 30 + [1] * 7 + [2] * 3)

    def ranks(world: int, batch_size: int) -> list[BalancedBatchSampler]:
        return [
            BalancedBatchSampler(labels, batch_size, num_replicas=world, rank=r, seed=9)
            for r in range(world)
        ]

    draws = BalancedBatchSampler(labels, 4, seed=9).permutation(1).tolist()
    seen: list[int] = []
    old = ranks(old_world, 4)
    for sampler in old:
        sampler.set_epoch(1)
        iterator = iter(sampler)
        seen += [i for _ in range(2) for i in next(iterator).tolist()]
    state = old[0].state_dict(consumed_batches=2)
    counts = []
    for sampler in ranks(new_world, 3):
        sampler.load_state_dict(state)
        batches = list(sampler)
        counts.append(len(batches))
        seen += [i for batch in batches for i in batch.tolist()]
    assert sorted(seen) == sorted(draws)  # every draw of the epoch once, repeats as drawn
    assert len(set(counts)) == 1
