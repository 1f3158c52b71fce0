"""Fixture data of the conversation tests: tar shards of conversations about 1-3 images (each
image a tiny PNG whose colour encodes its record and position), and the chat tests' local BPE
with ``<image>`` added as one special token (nothing downloaded)."""

from __future__ import annotations

import contextlib
import io
import json
import random
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from tests.datamodules.chat.chat_data import CHATML, raw_tokenizer

__all__ = ["image_code", "record", "vlm_tokenizer", "write_conversation_tars"]


def png(record: int, k: int, size: int = 8) -> bytes:
    """A PNG whose red channel is ``record % 256``, green ``record // 256`` and blue ``k``."""
    pixels = np.zeros((size, size, 3), np.uint8)
    pixels[..., 0], pixels[..., 1], pixels[..., 2] = record % 256, record // 256, k
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def image_code(image: Any) -> tuple[int, int]:
    """``(record, k)`` from one uint8 ``(3, H, W)`` image of :func:`png`."""
    r, g, b = (int(image[c].float().mean().round()) for c in range(3))
    return r + 256 * g, b


def record(i: int, images: int, placeholders: bool = True, seed: int = 0) -> dict[str, Any]:
    """The conversation of record ``i``: a user turn with its images' placeholders (or none)
    and an assistant answer of a length drawn from ``(seed, i)``."""
    rng = random.Random(seed * 100_003 + i)
    question = " ".join(rng.choices(["what", "is", "the", "sum", "of", "and"], k=rng.randint(1, 6)))
    answer = f"{i} " + " ".join(rng.choices(["plus", "minus", "times"], k=rng.randint(1, 20)))
    user = ("<image>" * images if placeholders else "") + question
    return {
        "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    }


def write_conversation_tars(
    root: Path,
    records: range,
    *,
    shards: int = 2,
    prefix: str = "train",
    placeholders: bool = True,
    images_of: Any = None,
) -> list[Path]:
    """Tar shards (webdataset layout) of ``records``: ``0.png``, ``1.png``, ... and ``json``
    with the conversation; record ``i`` has ``images_of(i)`` images (default ``1 + i % 3``)."""
    root.mkdir(parents=True, exist_ok=True)
    images_of = images_of or (lambda i: 1 + i % 3)
    paths = [root / f"{prefix}-{s:06d}.tar" for s in range(shards)]
    with contextlib.ExitStack() as stack:
        tars = [stack.enter_context(tarfile.open(p, "w")) for p in paths]
        for i in records:
            n = images_of(i)
            members = {f"{k}.png": png(i, k) for k in range(n)}
            members["json"] = json.dumps(record(i, n, placeholders)).encode()
            for ext, data in members.items():
                info = tarfile.TarInfo(f"{i:06d}.{ext}")
                info.size = len(data)
                tars[i % shards].addfile(info, io.BytesIO(data))
    return paths


def vlm_tokenizer() -> Any:
    """The chat tests' BPE as a transformers tokenizer with ChatML and ``<image>``."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw_tokenizer(),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHATML,
    )
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    return tok
