"""The inspect picture of a packed batch: each row a bar of its document pieces, with fill.

:func:`plot_packed_batch` draws (with matplotlib, the ``plots`` extra; see
:mod:`datamodules.tools.figures`), per row of one batch, its pieces as coloured segments (one
colour per document, a notch where a piece continues from the row before or into the next
row) and the padding in grey, under a header of fill statistics.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from datamodules.tools.figures import TAB10, add_axes, header, new_figure, save_figure

__all__ = ["packed_fill_lines", "plot_packed_batch", "segment_starts"]

PAD_GREY = "0.88"
#: Document colours: the palette without its grey, which would read as padding.
COLOURS = tuple(c for c in TAB10 if c != "tab:gray")


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
    docs = batch["document_ids"].cpu()
    positions = batch["position_ids"].cpu()
    rows, width = docs.shape
    shown = min(rows, max_rows)
    titles = [title] if isinstance(title, str) else list(title)
    lines = [*titles, *packed_fill_lines(batch), *(extra_lines or [])]
    left, right, plot_w = 60, 20, max(600, min(1400, width))
    top = 16 + 17 * len(lines) + 10
    figure = new_figure(left + plot_w + right, top + shown * 18 + 50)
    header(figure, lines)
    ax = add_axes(figure, left, top, left + plot_w, top + shown * 18)
    starts, ends = [], []  # notches: continued from the row before / into the next row
    for r in range(shown):
        ax.broken_barh([(0, width)], (r - 0.4, 0.8), facecolors=PAD_GREY)
        values, counts = torch.unique_consecutive(docs[r], return_counts=True)
        begins = (torch.cumsum(counts, 0) - counts).tolist()
        pieces = [
            (doc, begin, count)
            for doc, begin, count in zip(values.tolist(), begins, counts.tolist(), strict=True)
            if doc >= 0
        ]
        ax.broken_barh(
            [(begin, count) for _, begin, count in pieces],
            (r - 0.4, 0.8),
            facecolors=[COLOURS[doc % len(COLOURS)] for doc, _, _ in pieces],
            edgecolor="white",
            linewidth=0.6,
        )
        starts += [(begin, r) for _, begin, _ in pieces if int(positions[r, begin]) != 0]
        if pieces and r + 1 < rows:
            doc, begin, count = pieces[-1]
            if begin + count == width and int(docs[r + 1, 0]) == doc:
                ends.append((width, r))
    for notches, marker in ((starts, ">"), (ends, "<")):
        if notches:
            x, y = zip(*notches, strict=True)
            ax.plot(x, y, ls="none", marker=marker, color="0.1", ms=5, clip_on=False)
    ax.set_xlim(0, width)
    ax.set_ylim(shown - 0.5, -0.5)
    ax.set_yticks(range(shown), [f"row {r}" for r in range(shown)], fontsize=7)
    ax.set_xlabel("token position" + (f" ({rows - shown} more rows not drawn)" * (shown < rows)))
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return save_figure(figure, path)
