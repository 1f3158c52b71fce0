"""The README's subclass examples run as printed (users copy them)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks_defining(name: str) -> str:
    """The README's python code block that defines class ``name``."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    matches = [b for b in blocks if f"class {name}(" in b]
    assert len(matches) == 1, f"README should define {name} exactly once"
    return matches[0]


def run_block(name: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"torch": torch}
    exec(compile(python_blocks_defining(name), f"README:{name}", "exec"), namespace)
    return namespace


def test_tensor_subclass_example() -> None:
    namespace = run_block("WineDataModule")
    dm = namespace["WineDataModule"](batch_size=16)
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (16, 13) and y.dtype == torch.int64
    assert dm.split_size("train") + dm.split_size("val") == 178


def test_image_csv_subclass_example(tmp_path: Path) -> None:
    namespace = run_block("CsvImageDataModule")
    rows = []
    for i, label in enumerate(["cat", "dog", "cat", "dog", "cat", "dog"] * 2):
        path = tmp_path / f"{i}.png"
        Image.new("RGB", (10, 10), (i, 0, 0)).save(path)
        rows.append(f"{path},{label}")
    (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n")
    dm = namespace["CsvImageDataModule"](str(tmp_path / "labels.csv"), image_size=8, batch_size=4)
    dm.setup("fit")
    assert dm.classes == ["cat", "dog"]
    images, targets = next(iter(dm.train_dataloader()))
    assert images.shape == (4, 3, 8, 8) and set(targets.tolist()) <= {0, 1}


def test_text_subclass_example() -> None:
    namespace = run_block("SurnameDataModule")
    dm = namespace["dm"]
    dm.setup("fit")
    assert dm.label_names == sorted(namespace["SurnameDataModule"].locales)
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape[0] == 32


@pytest.mark.parametrize("section", ["## Quickstart"])
def test_quickstart_has_exactly_two_commands(section: str) -> None:
    text = README.read_text()
    block = re.search(re.escape(section) + r".*?```bash\n(.*?)```", text, flags=re.DOTALL)
    assert block is not None
    commands = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(commands) == 2
    assert commands[0].endswith("python examples/train_image_folder.py")
    assert commands[1].endswith("python -m pytest -q")
    ci = (README.parent / ".ci" / "run").read_text()
    assert commands[1] in ci


def test_streaming_subclass_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "shards").mkdir()
    for k in range(2):
        lines = [f"{3 * k + i}\tword{3 * k + i}" for i in range(3)]
        (tmp_path / "shards" / f"{k}.pairs").write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)
    namespace = run_block("PairsDataModule")
    dm = namespace["dm"]
    dm.setup("fit")
    batches = list(dm.train_dataloader())
    assert sorted(i for b in batches for i in b["id"].tolist()) == list(range(6))
    assert all(isinstance(b["word"], list) for b in batches)
