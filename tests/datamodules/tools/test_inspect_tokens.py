"""``python -m datamodules inspect`` on token batches, as a user runs it (a fresh interpreter):
chat padded and packed, conversations about images packed, caption pairs; tokenizers given
by their path (``--data.tokenizer``: a ``save_pretrained`` folder or a ``tokenizer.json``);
``--data.help`` with a short name. And the picture's layout of a token batch, exactly."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from datamodules.tools.pictures import plot_tensor_batch
from datamodules.tools.token_pictures import token_batch_lines, token_layout
from tests import subprocesses
from tests.datamodules.chat.chat_data import CHATML, arithmetic, chat_tokenizer, raw_tokenizer
from tests.datamodules.image_text.test_image_text import write_tars
from tests.datamodules.image_text.vlm_data import vlm_tokenizer, write_conversation_tars

ROOT = Path(__file__).resolve().parents[3]
PNG = b"\x89PNG\r\n\x1a\n"
PAGES = [ROOT / "docs" / "datamodules" / "chat.md", ROOT / "docs" / "datamodules" / "image-text.md"]
#: The inspect commands of the chat and image-text pages, run as shown (in the fixture folder,
#: whose files have the names they use); ``--data.help`` is run on its own below.
DOCUMENTED = [
    line.strip()
    for page in PAGES
    for line in page.read_text().splitlines()
    if line.startswith("python -m datamodules inspect --data ")
]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("inspect-tokens")
    with open(root / "chat.jsonl", "w") as f:
        for record in arithmetic(40):
            f.write(json.dumps(record) + "\n")
    chat_tokenizer().save_pretrained(root / "my-tokenizer")
    raw_tokenizer().save(str(root / "tokenizer.json"))
    vlm_tokenizer().save_pretrained(root / "my-vlm-tokenizer")
    write_conversation_tars(root / "vlm", range(24), shards=2)
    write_tars(root / "pairs", range(12))
    return root


def inspect(data: Path, *args: str) -> tuple[str, Path]:
    """Runs ``python -m datamodules inspect ARGS --out PNG`` in ``data``; returns its output
    and the picture, after checking that it exited 0 and wrote a PNG."""
    out = data / f"batch-{abs(hash(args))}.png"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocesses.run(
        [sys.executable, "-m", "datamodules", "inspect", *args, "--out", str(out)],
        cwd=data,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"picture of one train batch: {out.resolve()}" in done.stdout
    assert out.read_bytes()[:8] == PNG
    return done.stdout, out


def test_the_docs_show_chat_and_conversations_about_images() -> None:
    assert [shlex.split(c)[5] for c in DOCUMENTED] == ["ChatDataModule", "ImageTextDataModule"]


@pytest.mark.parametrize("command", DOCUMENTED, ids=["chat", "image-text"])
def test_a_documented_command_runs_in_a_fresh_interpreter(data: Path, command: str) -> None:
    stdout, _ = inspect(data, *shlex.split(command)[4:])
    if "ChatDataModule" in command:  # packed, with a tokenizer folder
        assert (
            "  rendering: train_on='assistant', messages_key='messages', packed into rows "
            "of 128" in stdout
        )
        assert "  input_ids: (8, 128) int64" in stdout and "  cu_seqlens: (" in stdout
    else:
        assert "packed into rows of 200 tokens, <= 6 images a batch" in stdout
        assert "  pixel_values: (" in stdout


def test_chat_padded_with_a_tokenizer_json_and_a_template(data: Path) -> None:
    stdout, _ = inspect(
        data, "--data", "ChatDataModule", "--data.train_file", "chat.jsonl",
        "--data.tokenizer", "tokenizer.json", "--data.chat_template", CHATML,
        "--data.batch_size", "4", "--data.num_workers", "0", "--data.token_cache", "cache",
    )  # fmt: skip
    assert "  rendering: train_on='assistant', messages_key='messages', padded" in stdout
    assert "  input_ids: (4, " in stdout and "cu_seqlens" not in stdout


def test_caption_pairs_with_a_tokenizer_json(data: Path) -> None:
    stdout, _ = inspect(
        data, "--data", "ImageTextDataModule", "--data.train_files", "pairs/*.tar",
        "--data.tokenizer", "tokenizer.json", "--data.max_length", "16",
        "--data.image_size", "16", "--data.batch_size", "4", "--data.num_workers", "0",
    )  # fmt: skip
    assert "  image: (4, 3, 16, 16) uint8" in stdout and "  input_ids: (4, 16) int64" in stdout


def test_data_help_takes_the_short_name(data: Path) -> None:
    done = subprocesses.run(
        [sys.executable, "-m", "datamodules", "inspect", "--data.help", "ChatDataModule"],
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--data.tokenizer TOKENIZER" in done.stdout and "--data.eos_token" in done.stdout


# ---------------------------------------------------------------------- the picture, in process
def packed_batch() -> dict[str, Any]:
    """Two rows of 6: row 0 holds document 3 (4 tokens, the last 2 trained) and document 5
    (2 tokens, the first continued from nowhere: position 1); row 1 document 5 again and
    padding."""
    return {
        "input_ids": torch.tensor([[1, 2, 3, 4, 5, 6], [7, 8, 0, 0, 0, 0]]),
        "document_ids": torch.tensor([[3, 3, 3, 3, 5, 5], [5, 5, -1, -1, -1, -1]]),
        "position_ids": torch.tensor([[0, 1, 2, 3, 0, 1], [2, 3, 0, 0, 0, 0]]),
        "labels": torch.tensor([[-100, -100, 3, 4, -100, 6], [7, 8, -100, -100, -100, -100]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]]),
        "cu_seqlens": torch.tensor([0, 4, 6, 8], dtype=torch.int32),
        "max_seqlen": 4,
    }


def test_the_layout_of_a_packed_batch_is_its_documents_training_and_padding() -> None:
    layout = token_layout(packed_batch())
    assert layout["document"].tolist() == [[3, 3, 3, 3, 5, 5], [5, 5, -1, -1, -1, -1]]
    assert layout["trained"].tolist() == [[0, 0, 1, 1, 0, 1], [1, 1, 0, 0, 0, 0]]
    assert layout["real"].tolist() == [[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]]
    assert token_batch_lines(packed_batch())[:2] == [
        "2 rows x 6 tokens (packed, 3 document pieces): 8 real (66.7%), 5 trained "
        "(62.5% of the real ones), 4 padding (33.3%)",
        "real tokens per row: min 2, mean 4.0, max 6; longest piece (max_seqlen) 4",
    ]


def test_a_padded_batch_is_one_sequence_a_row_and_completion_mask_marks_training() -> None:
    batch = {
        "input_ids": torch.tensor([[1, 2, 3], [4, 5, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
        "completion_mask": torch.tensor([[0, 1, 1], [0, 1, 0]]),
    }
    layout = token_layout(batch)
    assert layout["document"].tolist() == [[0, 0, 0], [1, 1, -1]]
    assert layout["trained"].tolist() == [[0, 1, 1], [0, 1, 0]]


def test_the_default_picture_draws_packed_batches_and_their_images(tmp_path: Path) -> None:
    batch = {**packed_batch(), "pixel_values": torch.zeros(3, 3, 8, 8, dtype=torch.uint8)}
    written = plot_tensor_batch(batch, tmp_path / "packed.png", image_token_id=7)
    assert Path(written).read_bytes()[:8] == PNG
    lines = token_batch_lines(batch, image_token_id=7)
    assert lines[2:] == [
        "image tokens (id 7): 1",
        "'pixel_values': 3 images (3, 8, 8), drawn below",
    ]
