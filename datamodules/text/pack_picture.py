"""The inspect picture of a packed batch: each row a bar of its document pieces, with fill.

:func:`plot_packed_batch` draws, per row of one batch, its pieces as coloured segments (one
colour per document, a notch where a piece continues from the row before or into the next
row) and the padding in grey, under a header of fill statistics.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from PIL import Image, ImageDraw

from datamodules.tools.drawing import BACKGROUND, INK, PALETTE, load_font, save_png, text_block

PAD_GREY = (225, 225, 225)
#: Document colours: the palette without its grey, which would read as padding.
COLOURS = tuple(c for c in PALETTE if len(set(c)) > 1)


def packed_fill_lines(batch: dict[str, Any]) -> list[str]:
    """Fill statistics of a packed batch: real tokens, pieces, continued pieces."""
    mask = batch["attention_mask"]
    rows, width = mask.shape
    real = int(mask.sum())
    starts = segment_starts(batch)
    pieces = int(starts.sum())
    continued = int(((batch["position_ids"] != 0) & starts).sum())
    per_row = mask.sum(1).float()
    return [
        f"{rows} rows x {width} tokens: {real:,} real ({real / max(rows * width, 1):.1%}), "
        f"{pieces} document pieces ({continued} continued from the row before), "
        f"max_seqlen {batch['max_seqlen']}",
        f"real tokens per row: min {int(per_row.min())}, mean {float(per_row.mean()):.1f}, "
        f"max {int(per_row.max())}",
    ]


def segment_starts(batch: dict[str, Any]) -> torch.Tensor:
    """Bool (R, L): True at the first token of every document piece (not padding)."""
    docs = batch["document_ids"]
    starts = torch.ones_like(docs, dtype=torch.bool)
    starts[:, 1:] = docs[:, 1:] != docs[:, :-1]
    return starts & (docs >= 0)


def plot_packed_batch(
    batch: dict[str, Any],
    path: str | os.PathLike[str],
    title: str | list[str],
    extra_lines: list[str] | None = None,
    max_rows: int = 64,
) -> Path:
    """Writes a PNG of a packed batch's rows as bars of document pieces.

    Args:
        batch: A packed batch (``document_ids``, ``position_ids``, ``attention_mask``...).
        path: The PNG to write.
        title: The first line(s) of the header.
        extra_lines: More header lines (e.g. the split's fill per epoch).
        max_rows: Rows drawn at most (the first ones).

    Returns:
        The path written.
    """
    docs = batch["document_ids"]
    rows, width = docs.shape
    shown = min(rows, max_rows)
    titles = [title] if isinstance(title, str) else list(title)
    header = [*titles, *packed_fill_lines(batch), *(extra_lines or [])]
    bar_h, gap, left, right = 14, 4, 60, 20
    plot_w = max(600, min(1400, width))
    top = 20 + 17 * len(header) + 10
    height = top + shown * (bar_h + gap) + 30
    image = Image.new("RGB", (left + plot_w + right, height), BACKGROUND)
    draw = ImageDraw.Draw(image)
    text_block(draw, (10, 10), header)
    font = load_font(11)
    scale = plot_w / width
    starts = segment_starts(batch)
    for r in range(shown):
        y = top + r * (bar_h + gap)
        draw.text((10, y), f"row {r}", fill=INK, font=font)
        draw.rectangle((left, y, left + plot_w - 1, y + bar_h), fill=PAD_GREY)
        cuts = torch.nonzero(starts[r]).flatten().tolist()
        for k, begin in enumerate(cuts):
            doc = int(docs[r, begin])
            end = begin
            while end < width and int(docs[r, end]) == doc:
                end += 1
            x0, x1 = left + begin * scale, left + end * scale - 1
            draw.rectangle((x0, y, max(x0, x1), y + bar_h), fill=COLOURS[doc % len(COLOURS)])
            draw.line((x0, y, x0, y + bar_h), fill=BACKGROUND)  # where a piece starts
            if int(batch["position_ids"][r, begin]) != 0:  # continued from the row before
                draw.polygon([(x0, y), (x0 + 5, y + bar_h / 2), (x0, y + bar_h)], fill=INK)
            last = k == len(cuts) - 1 and end == width and r + 1 < rows
            if last and int(docs[r + 1, 0]) == doc:  # continues in the next row
                draw.polygon([(x1, y), (x1 - 5, y + bar_h / 2), (x1, y + bar_h)], fill=INK)
    if shown < rows:
        draw.text((left, height - 24), f"... {rows - shown} more rows", fill=INK, font=font)
    return save_png(image, path)
