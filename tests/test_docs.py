"""The docs' runnable code blocks run as printed (users copy them), and the README's quickstart.

A block is runnable when the line before its ```` ```python ```` fence is the HTML comment
``<!-- runnable: NAME -->``. Every such block under ``docs/`` is executed here and checked by
the function of the same name in ``CHECKS``; a runnable block without a check (or a check
without its block) fails the suite.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

from tests import subprocesses

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

MARKER = re.compile(r"^<!-- runnable: ([A-Za-z0-9_-]+) -->", re.M)
RUNNABLE = re.compile(r"^<!-- runnable: ([A-Za-z0-9_-]+) -->\n```python\n(.*?)^```", re.S | re.M)


def doc_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def runnable_blocks() -> dict[str, tuple[str, str]]:
    """``{name: (page, code)}`` for every runnable block under docs/."""
    blocks: dict[str, tuple[str, str]] = {}
    for page in doc_pages():
        for match in RUNNABLE.finditer(page.read_text()):
            name, code = match.group(1), match.group(2)
            where = str(page.relative_to(ROOT))
            assert name not in blocks, f"runnable block {name!r} in {where} and {blocks[name][0]}"
            blocks[name] = (where, code)
    return blocks


BLOCKS = runnable_blocks()
Runner = Callable[[], dict[str, Any]]


def runner(name: str) -> Runner:
    """Returns a function that executes block ``name`` and returns its namespace."""

    def run() -> dict[str, Any]:
        where, code = BLOCKS[name]
        namespace: dict[str, Any] = {"__name__": f"docs_{name.replace('-', '_')}"}
        exec(compile(code, f"{where}:{name}", "exec"), namespace)
        return namespace

    return run


# --------------------------------------------------------------------------- the checks
def check_first_fit(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # whatever the Trainer writes lands here
    namespace = run()
    trainer, dm = namespace["trainer"], namespace["dm"]
    assert trainer.state.finished
    assert trainer.current_epoch == 1
    assert trainer.global_step == 13  # ceil(800 / 64)
    assert [dm.split_size(s) for s in ("train", "val", "test")] == [800, 100, 100]
    assert trainer.logger is None and trainer.checkpoint_callback is None
    assert list(tmp_path.iterdir()) == []


def check_wine(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    namespace = run()
    dm = namespace["WineDataModule"](batch_size=16)
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (16, 13) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert dm.split_size("train") + dm.split_size("val") == 178
    assert dm.split_size("test") == 0


def check_csv_images(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    namespace = run()
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
    assert images.shape == (4, 3, 8, 8) and images.dtype == torch.uint8
    assert set(targets.tolist()) <= {0, 1}


def check_surnames(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    namespace = run()
    dm = namespace["dm"]
    dm.setup("fit")
    assert dm.label_names == sorted(namespace["SurnameDataModule"].locales)
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape[0] == 32
    assert batch["attention_mask"].shape == batch["input_ids"].shape
    assert batch["lengths"].max() == batch["input_ids"].shape[1]


def check_pairs(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "shards").mkdir()
    for k in range(2):
        lines = [f"{3 * k + i}\tword{3 * k + i}" for i in range(3)]
        (tmp_path / "shards" / f"{k}.pairs").write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)
    namespace = run()
    dm = namespace["dm"]
    dm.setup("fit")
    batches = list(dm.train_dataloader())
    assert sorted(i for b in batches for i in b["id"].tolist()) == list(range(6))
    assert all(isinstance(b["word"], list) for b in batches)
    words = {i: w for b in batches for i, w in zip(b["id"].tolist(), b["word"], strict=True)}
    assert words == {i: f"word{i}" for i in range(6)}


def check_squares(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    namespace = run()
    dm = namespace["dm"]
    dm.setup("fit")
    assert (dm.split_size("train"), dm.split_size("val"), dm.split_size("test")) == (80, 20, 0)
    loader = dm.train_dataloader()
    assert len(loader) == 8
    seen = []
    for x, y in loader:
        assert x.shape == (10, 1) and x.dtype == torch.float32
        assert torch.equal(y, x[:, 0].long() ** 2)
        seen += x[:, 0].long().tolist()
    assert len(seen) == 80 and len(set(seen)) == 80


def check_pad_collate(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    namespace = run()
    assert namespace["input_ids"].tolist() == [[5, 9, 2], [7, 0, 0], [4, 4, 0]]
    assert namespace["labels"].tolist() == [1, 0, 1]
    assert namespace["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert namespace["lengths"].tolist() == [3, 1, 2]
    left = namespace["left"]
    assert left["input_ids"].tolist() == [[5, 9, 2], [0, 0, 7]]
    assert left["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert left["label"].tolist() == [1, 0]
    assert left["lengths"].tolist() == [3, 1]


def check_collate_records(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    batch = run()["batch"]
    assert batch["id"].tolist() == [3, 4] and batch["id"].dtype == torch.int64
    assert batch["tokens"].tolist() == [[5, 9, 2], [7, 0, 0]]
    assert batch["name"] == ["a", "b"]


def check_image_shards(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the block writes shards/ here
    namespace = run()
    assert [Path(p).name for p in namespace["paths"]] == [f"train-00000{k}.tar" for k in range(3)]
    images, labels = namespace["images"], namespace["labels"]
    assert images.shape == (4, 3, 16, 16) and images.dtype == torch.uint8
    assert labels.dtype == torch.int64 and set(labels.tolist()) <= {0, 1, 2}
    dm = namespace["dm"]
    assert dm.num_classes == 3 and dm.split_size("train") == 12


def check_image_placeholders(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    namespace = run()
    assert namespace["messages"] == [{"role": "user", "content": "<image>Which digit?"}]
    out = namespace["out"]
    assert out.input_ids.tolist() == [5, 9, 9, 9, 6]
    assert out.trained.tolist() == [False, False, False, False, True]
    assert out.image_starts.tolist() == [1]
    plan = namespace["plan"]
    assert plan.rows.doc.tolist() == [1, 2, 4, 0, 3] and plan.rows.row_ptr.tolist() == [0, 3, 5]
    assert plan.batch_ptr.tolist() == [0, 1, 2] and plan.over.tolist() == []
    assert plan.image_efficiency == 9 / 12 and plan.token_efficiency == 3300 / (2 * 2 * 2048)


def check_image_text(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the block writes pairs-*.tar here
    namespace = run()
    batch, dm = namespace["batch"], namespace["dm"]
    assert batch["image"].shape == (4, 3, 16, 16) and batch["image"].dtype == torch.uint8
    assert len(batch["text"]) == 4 and all("square" in t for t in batch["text"])
    assert dm.split_size("train") == 12 and len(dm.shards["train"]) == 3


def check_pack_labels(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    batch = run()["batch"]
    assert batch["input_ids"].tolist() == [[5, 6, 7, 0], [8, 9, 4, 0]]
    assert batch["labels"].tolist() == [[-100, 6, 7, -100], [-100, -100, 4, -100]]


def check_chat_renderer(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    namespace = run()
    renderer, ids, labels = namespace["renderer"], namespace["input_ids"], namespace["labels"]
    messages = [
        {"role": "user", "content": "What is 2 plus 2?"},
        {"role": "assistant", "content": "It is 4."},
    ]
    tok = renderer.tokenizer
    want = tok.apply_chat_template(messages, chat_template=renderer.chat_template)["input_ids"]
    assert ids.tolist() == want
    kept = [i for i in labels if i != -100]
    assert tok.decode(kept) == "It is 4.<|im_end|>\n"
    assert labels[: len(ids) - len(kept)] == [-100] * (len(ids) - len(kept))


def check_preference_subclass(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.datamodules.chat.chat_data import raw_tokenizer

    raw_tokenizer().save(str(tmp_path / "tokenizer.json"))
    dm = run()["SumPairs"](tokenizer_file=str(tmp_path / "tokenizer.json"), n=8, batch_size=8)
    dm.setup("fit")
    assert dm.split_size("train") == 7 and dm.paired
    batch = next(iter(dm.val_dataloader()))  # one pair: its chosen row, then its rejected one
    tok = dm.renderer.tokenizer
    rows = zip(batch["input_ids"], batch["attention_mask"].bool(), strict=True)
    chosen, rejected = (tok.decode(row[mask]) for row, mask in rows)
    assert chosen.endswith(".<|im_end|>") and rejected.endswith(".<|im_end|>")
    assert int(chosen.split()[-1][:-11]) + 1 == int(rejected.split()[-1][:-11])


def check_sine_waves(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dm = run()["SineDataModule"](context_length=48, prediction_length=12, store=tmp_path)
    dm.setup("fit")
    # Steps [0, 180) of each of 8 waves train: futures from step 48 to 168; the last 20 validate.
    assert dm.windows("train") == 8 * 121 and dm.windows("val") == 8
    batch = next(iter(dm.val_dataloader()))
    assert batch["past_values"].shape == (8, 48) and batch["future_values"].shape == (8, 12)
    assert (batch["window_start"] + 48).tolist() == [188] * 8
    raw = dm.inverse_transform(batch["future_values"], batch)
    want = torch.tensor([[math.sin(t / 8 + p) for t in range(188, 200)] for p in range(8)])
    assert torch.allclose(raw, want, atol=1e-5)


def check_red_squares(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dm = run()["SquaresDataModule"](str(tmp_path), batch_size=4, num_workers=0)
    dm.setup("fit")
    assert (dm.split_size("train"), dm.split_size("val")) == (16, 4) and dm.classes == ["square"]
    images, targets = next(iter(dm.val_dataloader()))
    for image, target in zip(images, targets, strict=True):
        i = target["image_id"]
        assert target["boxes"].tolist() == [[2 + i, 4, 14 + i, 16]]
        assert image[:, 10, 8 + i].tolist() == [255, 0, 0]  # red inside the square


def check_detection_shards(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    namespace = run()
    dm, targets = namespace["dm"], namespace["targets"]
    assert [Path(p).name for p in namespace["shards"]] == ["train-000000.tar", "train-000001.tar"]
    assert dm.classes == ["box"] and (dm.split_size("train"), dm.split_size("val")) == (4, 2)
    for target in targets:  # the box, or its mirror (the default flip in training)
        assert target["boxes"].tolist() in ([[4.0, 6.0, 24.0, 18.0]], [[24.0, 6.0, 44.0, 18.0]])
    assert namespace["images"][0].shape == (3, 32, 48)


def check_segmentation(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the block writes its folders here
    namespace = run()
    dm, batch = namespace["dm"], namespace["batch"]
    assert (dm.split_size("train"), dm.split_size("val")) == (8, 2)
    assert batch["image"].shape == (4, 3, 32, 32) and batch["image"].dtype == torch.uint8
    assert batch["mask"].shape == (4, 32, 32) and batch["mask"].dtype == torch.int64
    assert set(batch["mask"].unique().tolist()) <= {0, 1, 2, 255}
    val = next(iter(dm.val_dataloader()))
    assert val["mask"].shape == (2, 48, 64)  # evaluation: the images' own size
    assert set(val["mask"].unique().tolist()) <= {0, 1, 2}


def check_segmentation_shards(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner("segmentation")()  # the folders it writes are this block's source
    namespace = run()
    dm, batch = namespace["dm"], namespace["batch"]
    assert [Path(p).name for p in namespace["paths"]] == [f"train-00000{k}.tar" for k in range(3)]
    assert (dm.split_size("train"), dm.split_size("val")) == (8, 2)
    assert batch["image"].shape == (2, 3, 48, 64) and batch["mask"].shape == (2, 48, 64)
    assert set(batch["mask"].unique().tolist()) <= {0, 1, 2}


def write_tones(root: Path) -> None:
    """Twelve short .wav tones named ``{low,high}-N.wav`` (for the tone-folder block)."""
    import numpy as np
    import soundfile

    root.mkdir(parents=True, exist_ok=True)
    for i in range(12):
        pitch, frequency = ("low", 200) if i % 2 else ("high", 2000)
        t = np.arange(1600 + 160 * i) / 16000
        soundfile.write(root / f"{pitch}-{i}.wav", 0.3 * np.sin(2 * np.pi * frequency * t), 16000)


def check_tone_folder(run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tones(tmp_path / "tones")
    dm = run()["ToneFolder"](str(tmp_path / "tones"), batch_size=4, val_split=0.25, num_workers=0)
    dm.setup("fit")
    assert dm.classes == ["high", "low"] and [dm.split_size(s) for s in ("train", "val")] == [9, 3]
    batches = list(dm.train_dataloader())
    assert sorted(n for b in batches for n in b["lengths"].tolist()) == sorted(
        1600 + 160 * int(Path(dm.index.paths[i]).stem.split("-")[1])
        for i in dm.split_indices["train"].tolist()
    )
    for batch in batches:
        for n, label in zip(batch["lengths"].tolist(), batch["label"].tolist(), strict=True):
            assert label == ((n - 1600) // 160) % 2  # odd: "low" (1)


CHECKS: dict[str, Callable[[Runner, Path, pytest.MonkeyPatch], None]] = {
    "first-fit": check_first_fit,
    "wine": check_wine,
    "csv-images": check_csv_images,
    "surnames": check_surnames,
    "pairs": check_pairs,
    "squares": check_squares,
    "pad-collate": check_pad_collate,
    "collate-records": check_collate_records,
    "image-shards": check_image_shards,
    "image-placeholders": check_image_placeholders,
    "image-text": check_image_text,
    "pack-labels": check_pack_labels,
    "chat-renderer": check_chat_renderer,
    "preference-subclass": check_preference_subclass,
    "sine-waves": check_sine_waves,
    "red-squares": check_red_squares,
    "detection-shards": check_detection_shards,
    "segmentation": check_segmentation,
    "segmentation-shards": check_segmentation_shards,
    "tone-folder": check_tone_folder,
}


# --------------------------------------------------------------------------- the tests
def test_every_runnable_block_has_a_check() -> None:
    assert sorted(BLOCKS) == sorted(CHECKS)


def test_every_marker_is_followed_by_a_python_block() -> None:
    markers = [m for page in doc_pages() for m in MARKER.findall(page.read_text())]
    assert sorted(markers) == sorted(BLOCKS)


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_runnable_block(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    CHECKS[name](runner(name), tmp_path, monkeypatch)


def test_subclass_examples_stay_short() -> None:
    """The docs promise a subclass of each DataModule in under 20 lines."""
    for name in (
        "wine", "csv-images", "surnames", "pairs", "preference-subclass", "sine-waves",
        "tone-folder", "red-squares",
    ):  # fmt: skip
        lines = [line for line in BLOCKS[name][1].splitlines() if line.strip()]
        assert len(lines) < 20, f"{name}: {len(lines)} lines"


def quickstart_commands(text: str) -> list[str]:
    block = re.search(r"## Quickstart.*?```bash\n(.*?)```", text, flags=re.DOTALL)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip()]


@pytest.mark.parametrize("section", ["## Quickstart"])
def test_quickstart_has_exactly_two_commands(section: str) -> None:
    text = README.read_text()
    block = re.search(re.escape(section) + r".*?```bash\n(.*?)```", text, flags=re.DOTALL)
    assert block is not None
    commands = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(commands) == 2
    assert commands[0].endswith("python examples/train_image_folder.py")
    assert commands[1].endswith("python -m pytest -q")
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci


def test_getting_started_has_the_readme_quickstart() -> None:
    docs = quickstart_commands((DOCS / "getting-started.md").read_text())
    assert docs == quickstart_commands(README.read_text())


def test_readme_and_getting_started_give_one_figure_for_the_suite() -> None:
    said = r"whole suite takes about (\d+) minutes on 2 CPU cores \(([\d,]+) tests in "
    said += r"(\d+ min \d+ s)"
    readme = re.search(said, " ".join(README.read_text().split()))
    guide = re.search(said, " ".join((DOCS / "getting-started.md").read_text().split()))
    assert readme is not None and guide is not None
    assert readme.groups() == guide.groups()


def test_readme_links_into_docs_exist() -> None:
    links = re.findall(r"\]\((docs/[^)#\s]+)", README.read_text())
    assert links, "the README should link to its docs pages"
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert missing == []


def test_quickstart_prose_matches_its_commands() -> None:
    # Both commands make (or find) the same .venv; the suite's length and a quick subset are
    # said, and no torch advice comes after commands a reader has already pasted.
    text = README.read_text()
    quickstart = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = quickstart_commands(text)
    assert {c.split(" && ")[0] for c in commands} == {"python3 -m venv .venv"}
    assert "own virtual environment" not in quickstart
    after = quickstart.split("```", 2)[2]
    assert "pip install torch" not in after
    assert re.search(r"whole suite takes about \d+ minutes on 2 CPU cores", after)
    subsets = re.findall(r"`(python -m pytest -q [^`]+)`", after)
    assert subsets
    for command in subsets:  # each runs from a fresh interpreter and selects tests
        args = [sys.executable, *command.split()[1:], "--collect-only"]
        done = subprocesses.run(args, cwd=ROOT, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        assert re.search(r"^\d+ tests collected", done.stdout.splitlines()[-1])
