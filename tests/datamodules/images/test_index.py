"""Tests for datamodules.images.index: ImageFolderIndex and scan_image_folder (as torchvision's)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS as TV_IMG_EXTENSIONS

from datamodules.images.index import IMG_EXTENSIONS, ImageFolderIndex, scan_image_folder

# Any warning raised in these tests (DeprecationWarning included) is an error.
pytestmark = pytest.mark.filterwarnings("error")


def test_img_extensions_match_torchvision():
    assert IMG_EXTENSIONS == TV_IMG_EXTENSIONS


# --------------------------------------------------------------------------- ImageFolderIndex


def test_index_from_lists_and_samples():
    paths = ["a/1.png", Path("b/2.png"), "c/\u00e9t\u00e9.jpg", "d/\udcff.jpg"]
    index = ImageFolderIndex(paths, [0, 1, 1, 0], classes=["cat", "dog"])
    assert len(index) == 4
    assert index.path(2) == "c/\u00e9t\u00e9.jpg" and index.path(-1) == "d/\udcff.jpg"
    assert index.target(1) == 1 and index[0] == ("a/1.png", 0)
    assert index.samples == [("a/1.png", 0), ("b/2.png", 1), ("c/été.jpg", 1), ("d/\udcff.jpg", 0)]
    assert index.targets.dtype == np.int64
    assert index.class_to_idx == {"cat": 0, "dog": 1}
    again = ImageFolderIndex.from_samples(index.samples, classes=index.classes)
    assert again.samples == index.samples
    with pytest.raises(IndexError, match="out of range"):
        index.path(4)
    restored = pickle.loads(pickle.dumps(index))
    assert restored.samples == index.samples and restored.classes == index.classes


def test_index_is_compact_arrays():
    index = ImageFolderIndex(
        [f"root/c{i % 3}/img_{i}.jpg" for i in range(1000)], np.arange(1000) % 3
    )
    assert all(
        isinstance(getattr(index, name), np.ndarray) for name in ("_buffer", "_offsets", "_targets")
    )
    assert index.nbytes < 40_000
    assert index.classes == ["0", "1", "2"]
    assert torch.from_numpy(index.targets).dtype == torch.int64


@pytest.mark.parametrize(
    "paths,targets,classes,match",
    [
        (["a", "b"], [0], None, "same length"),
        (["a"], [2], ["x", "y"], "class indices in \\[0, 2\\)"),
        (["a"], [-1], ["x"], "class indices"),
        (["a"], [0.5], None, "integer"),
        (["a"], [0], ["x", "x"], "unique"),
    ],
)
def test_index_rejects_bad_input(paths, targets, classes, match):
    with pytest.raises(ValueError, match=match):
        ImageFolderIndex(paths, targets, classes=classes)


# --------------------------------------------------------------------------- scan_image_folder


def _touch(root: Path, *relative: str) -> None:
    for rel in relative:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")


def _assert_same_as_torchvision(root, **kwargs) -> ImageFolderIndex:
    index = scan_image_folder(root, **kwargs)
    reference = ImageFolder(root, **kwargs)
    assert index.classes == reference.classes
    assert index.class_to_idx == reference.class_to_idx
    assert index.samples == reference.samples
    assert index.targets.tolist() == reference.targets
    return index


def test_scan_matches_torchvision(tmp_path):
    root = tmp_path / "data"
    _touch(
        root,
        "cat/b.JPG",
        "cat/a.jpeg",
        "cat/C.Png",
        "cat/notes.txt",
        "cat/anim.gif",  # .gif is not in IMG_EXTENSIONS: skipped, as torchvision does
        "cat/sub/deeper/e.jpg",
        "cat/sub/d.webp",
        "cat/sub-x/f.TIFF",
        "cat/sub.x/g.bmp",
        "cat/Sub/h.ppm",
        "dog/x.pgm",
        "dog/y.tif",
        "dog/fake.jpg/inner.png",  # a folder named like an image
        "Zebra/z.jpg",
        "Zebra/.hidden.jpg",
        "Zebra/README",
    )
    (root / "dog" / "shared").symlink_to(root / "cat" / "sub", target_is_directory=True)
    (root / "dog" / "broken.jpg").symlink_to(root / "nowhere.jpg")
    (root / "linked").symlink_to(root / "cat", target_is_directory=True)  # a class via symlink
    (root / "top.jpg").write_bytes(b"")  # files in root are not samples
    index = _assert_same_as_torchvision(str(root))
    _assert_same_as_torchvision(root)  # pathlib.Path root
    _assert_same_as_torchvision(str(root) + os.sep)  # trailing separator kept in paths
    assert index.classes == ["Zebra", "cat", "dog", "linked"]
    assert index.root == str(root)
    assert str(root / "dog" / "shared" / "deeper" / "e.jpg") in index.paths


def test_scan_empty_class_folder(tmp_path):
    _touch(tmp_path, "a/1.jpg", "b/readme.txt", "c/2.png")
    with pytest.raises(FileNotFoundError) as tv_error:
        ImageFolder(tmp_path)
    with pytest.raises(FileNotFoundError, match="classes b in") as error:
        scan_image_folder(tmp_path)
    assert str(tmp_path) in str(error.value) and ".jpg" in str(error.value)
    assert "b" in str(tv_error.value)
    index = _assert_same_as_torchvision(tmp_path, allow_empty=True)
    assert index.classes == ["a", "b", "c"] and index.targets.tolist() == [0, 2]


def test_scan_errors_name_the_folder(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(FileNotFoundError, match="missing.*does not exist"):
        scan_image_folder(missing)
    _touch(tmp_path, "file.jpg")
    with pytest.raises(NotADirectoryError, match="file.jpg"):
        scan_image_folder(tmp_path / "file.jpg")
    with pytest.raises(FileNotFoundError, match="no class folder in"):
        scan_image_folder(tmp_path)
    _touch(tmp_path, "a/x.txt", "b/y.csv")
    with pytest.raises(FileNotFoundError, match="no image file") as error:
        scan_image_folder(tmp_path)
    assert str(tmp_path) in str(error.value) and ".jpg, .jpeg, .png" in str(error.value)


def test_scan_custom_extensions_case_insensitive(tmp_path):
    _touch(tmp_path, "a/1.GIF", "a/2.jpg", "b/3.gif")
    index = scan_image_folder(tmp_path, extensions=(".gif",))
    assert index.samples == [(str(tmp_path / "a" / "1.GIF"), 0), (str(tmp_path / "b" / "3.gif"), 1)]


@pytest.mark.timeout(20)
def test_scan_symlink_loops_terminate(tmp_path):
    root = tmp_path / "data"
    _touch(root, "cat/1.jpg", "cat/sub/2.jpg", "dog/3.jpg")
    (root / "cat" / "loop").symlink_to(root / "cat", target_is_directory=True)
    (root / "cat" / "loop2").symlink_to(root / "cat", target_is_directory=True)
    (root / "cat" / "sub" / "up").symlink_to(root, target_is_directory=True)
    (root / "dog" / "self").symlink_to(".", target_is_directory=True)
    index = scan_image_folder(root)
    assert index.samples == [
        (str(root / "cat" / "1.jpg"), 0),
        (str(root / "cat" / "sub" / "2.jpg"), 0),
        (str(root / "dog" / "3.jpg"), 1),
    ]


def test_scan_matches_torchvision_on_a_random_tree(tmp_path):
    rng = np.random.default_rng(7)
    parts = ["a", "B", "a-b", "a.b", "a_b", "0", "Z", "sub", "sub-1", "x y"]
    names = ["img", "IMG", "p-1", "p.1", "q_2", "é"]
    extensions = [".jpg", ".JPEG", ".png", ".PnG", ".bmp", ".txt", ".gif", ".tiff", ""]
    for _ in range(300):
        depth = int(rng.integers(1, 5))
        folders = [str(rng.choice(parts)) for _ in range(depth)]
        name = str(rng.choice(names)) + str(rng.integers(0, 50)) + str(rng.choice(extensions))
        _touch(tmp_path, os.path.join(*folders, name))
    _assert_same_as_torchvision(tmp_path, allow_empty=True)
