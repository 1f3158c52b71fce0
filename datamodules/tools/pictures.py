"""The pictures of ``python -m datamodules inspect``: PNG files drawn with matplotlib.

matplotlib is the optional extra ``plots`` (``pip install "lightning-datamodules[plots]"``),
imported only when a picture is drawn, through :mod:`datamodules.tools.figures` (a ``Figure``
on an Agg canvas; pyplot's global state is never touched). Without it, drawing raises
:class:`~datamodules.tools.figures.PlotsUnavailable`, an ``ImportError`` that says how to
install it. Image grids are :func:`torchvision.utils.make_grid` of the batch, placed pixel for
pixel in the picture.

* :func:`plot_tensor_batch`: the default of :meth:`BaseDataModule.plot_batch`: token batches
  row by row (:mod:`datamodules.tools.token_pictures`), an image grid for ``(N, C, H, W)``
  images, else a heat map of the samples' values (z-scored per column
  within the batch) with a label strip and the batch's label counts.
* :func:`plot_image_grid`: a grid of images with their class names.
* :func:`plot_lengths`: a histogram of sequence lengths with the padding efficiency.
* :func:`plot_padding`: a split's length histogram (with one batch marked) above the real and
  padded tokens of every batch of an epoch, beside the same batch sizes drawn at random.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from datamodules.tools.descriptions import (
    LABEL_NAMES,
    MAX_CLASSES_LISTED,
    _flatten,
    batch_tokens,
    is_class_labels,
    length_stats,
    padding_comparison,
    random_batches,
)
from datamodules.tools.figures import (
    FONT,
    TAB10,
    add_axes,
    header,
    new_figure,
    save_figure,
    text_width,
)
from datamodules.tools.tiles import grid_tiles

__all__ = [
    "grid_tiles",
    "plot_image_grid",
    "plot_lengths",
    "plot_padding",
    "plot_tensor_batch",
]

REAL, PADDING, BAND, MARK = "tab:blue", "#f0968c", "#fdd0a2", "tab:red"
#: The heat map of a tensor batch shows at most this many rows and columns.
MAX_ROWS, MAX_COLS = 256, 128


# ---------------------------------------------------------------------- image grids
def plot_image_grid(
    images: torch.Tensor,
    path: str | os.PathLike[str],
    labels: torch.Tensor | Sequence[int] | None = None,
    names: Sequence[str] | None = None,
    title: str | None = None,
    max_images: int = 64,
    max_tile: int = 160,
) -> Path:
    """Draws a grid of ``(N, C, H, W)`` images (uint8, or float scaled to [0, 1]) with labels.

    The grid is :func:`torchvision.utils.make_grid` of the tiles (:func:`grid_tiles`: images
    smaller than 64 pixels enlarged, larger than ``max_tile`` shrunk), ``ceil(sqrt(N))``
    columns on white: 2 pixels apart, or 16 with labels, whose captions are written in the
    gap under each image. It fills the bottom left of the picture, under the title.

    Args:
        images: The batch's images (C of 1 or 3).
        path: Where to write the PNG.
        labels: One label per image, written under it (shortened to the image's width).
        names: Class names indexed by label.
        title: A line above the grid (the picture widens to fit it).
        max_images: At most this many images are drawn.
        max_tile: The longest side, in pixels, an image is drawn at.
    """
    from torchvision.utils import make_grid

    tiles = grid_tiles(images, max_images, max_tile)
    n, _, h, w = tiles.shape
    cols, pad = max(1, math.ceil(math.sqrt(n))), 2 if labels is None else 16
    if n == 1:  # make_grid returns a single image without its padding
        grid = torch.nn.functional.pad(tiles[0], (pad, pad, pad, pad), value=255)
    else:
        grid = make_grid(tiles, nrow=cols, padding=pad, pad_value=255)
    top = 24 if title else 0
    figure = new_figure(grid.shape[2], top + grid.shape[1])
    header(figure, [title] if title else [])
    figure.figimage(grid.permute(1, 2, 0).numpy(), xo=0, yo=0, origin="upper")
    if labels is not None:
        height = figure.bbox.height
        for i, value in enumerate(int(v) for v in torch.as_tensor(labels)[:n].tolist()):
            text = names[value] if names is not None and 0 <= value < len(names) else str(value)
            if text_width(figure, text, 8) > w:
                while len(text) > 1 and text_width(figure, text + "…", 8) > w:
                    text = text[:-1]
                text += "…"
            r, c = divmod(i, cols)
            x, y = pad + c * (w + pad), top + pad + r * (h + pad) + h + 1
            figure.text(
                x / figure.bbox.width,
                1 - y / height,
                text,
                va="top",
                fontsize=8,
                color=TAB10[value % len(TAB10)],
                parse_math=False,
            )
    return save_figure(figure, path)


# ---------------------------------------------------------------------- lengths and padding
def length_histogram(
    ax: Any,
    lengths: torch.Tensor,
    max_bins: int = 60,
    band: tuple[int, int] | None = None,
    mark: int | None = None,
) -> None:
    """A histogram of integer lengths on ``ax``; each bin spans a whole number of lengths.

    ``band`` shades the lengths ``[a, b]`` behind the bars; ``mark`` draws a dashed line
    after length ``mark`` (a padded width: every length left of it fits).
    """
    from matplotlib.ticker import MaxNLocator

    values = lengths.round().to(torch.int64).numpy()
    low, high = int(values.min()), int(values.max())
    width = max(1, math.ceil((high - low + 1) / max_bins))
    edges = np.arange(low, high + width + 1, width) - 0.5
    ax.hist(values, bins=edges, color=REAL, rwidth=0.85 if len(edges) <= 80 else 1.0)
    if band is not None:
        ax.axvspan(band[0] - 0.5, band[1] + 0.5, color=BAND, zorder=0, label="the batch drawn")
    right = edges[-1]
    if mark is not None:
        ax.axvline(mark + 0.5, color=MARK, ls="--", lw=1.5, label=f"padded to {mark}")
        right = max(right, mark + 1)
    ax.set_xlim(edges[0] - 0.5, right + 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=10, integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    ax.grid(axis="y", color="0.88")
    ax.set_axisbelow(True)
    ax.set_xlabel("length (tokens)")
    ax.set_ylabel("sequences")


def token_bars(ax: Any, real: torch.Tensor, padded: torch.Tensor, y_max: float) -> None:
    """Per batch (sorted by padded tokens, then real ones), a bar of padded tokens with its
    real tokens in front."""
    order = torch.argsort(padded.double() + real.double() / (float(padded.max()) + 1))
    edges = np.arange(len(order) + 1)
    ax.stairs(padded[order].double().numpy(), edges, fill=True, color=PADDING, label="padding")
    ax.stairs(real[order].double().numpy(), edges, fill=True, color=REAL, label="real tokens")
    ax.set_xlim(0, len(order))
    ax.set_ylim(0, y_max)
    ax.grid(axis="y", color="0.88")
    ax.set_axisbelow(True)
    ax.set_xlabel(f"{len(order):,} batches, sorted by padded tokens")


def plot_lengths(
    lengths: Sequence[int] | torch.Tensor,
    path: str | os.PathLike[str],
    padded_to: int | None = None,
    title: str | None = None,
    efficiency: float | None = None,
    bins: int = 60,
) -> Path:
    """Draws a histogram of sequence lengths and states the padding efficiency.

    Args:
        lengths: One length per sequence (one batch, or a whole split).
        path: Where to write the PNG.
        padded_to: The length the sequences are padded to (default: the longest); gives
            the efficiency ``sum(lengths) / (len(lengths) * padded_to)``, and a dashed line.
        title: A line above the histogram.
        efficiency: The efficiency to state instead (e.g. over many batches, from
            :func:`padding_efficiency`).
        bins: At most this many bins (each spans a whole number of lengths).
    """
    values = torch.as_tensor(lengths, dtype=torch.float64).flatten()
    if values.numel() == 0:
        raise ValueError("plot_lengths needs at least one length.")
    padded = int(values.max().item()) if padded_to is None else int(padded_to)
    if efficiency is None:
        efficiency = float(values.sum().item()) / (values.numel() * max(padded, 1))
    figure = new_figure(760, 400)
    header(
        figure,
        [
            title or f"{values.numel()} sequence lengths",
            length_stats(values),
            f"padding efficiency {efficiency:.1%} (real tokens / padded tokens, padded to "
            f"{padded})",
        ],
    )
    ax = add_axes(figure, 70, 74, 740, 350)
    length_histogram(ax, values, bins, mark=padded)
    ax.legend(loc="upper right", fontsize=8)
    return save_figure(figure, path)


def plot_padding(
    lengths: Sequence[int] | torch.Tensor,
    batches: Sequence[torch.Tensor],
    path: str | os.PathLike[str],
    *,
    batch_lengths: Sequence[int] | torch.Tensor | None = None,
    padded_to: int | None = None,
    pad_to_multiple_of: int | None = None,
    title: str | None = None,
    seed: int = 0,
    bins: int = 60,
) -> Path:
    """Draws what a batch sampler does to padding, over a split's batches of one epoch.

    Top: the histogram of the split's lengths, with one batch's range of lengths shaded and
    its padded width dashed. Bottom left: each batch's padded tokens (red) with its real
    tokens in front (blue), sorted; bottom right: the same for random batches of the same
    sizes (:func:`random_batches`), i.e. the epoch without length buckets, on the same scale.
    The header states both padding efficiencies (real tokens / padded tokens).

    Args:
        lengths: The length of every sample of the split.
        batches: The epoch's batches: index tensors into ``lengths``.
        path: Where to write the PNG.
        batch_lengths: The lengths of one batch to mark (e.g. ``batch["lengths"]``).
        padded_to: That batch's padded width (default: its longest length).
        pad_to_multiple_of: Padded widths are rounded up to a multiple of this.
        title: The first line.
        seed: Seed of the random comparison batches.
        bins: At most this many histogram bins (each spans a whole number of lengths).
    """
    values = torch.as_tensor(lengths, dtype=torch.int64).flatten()
    if values.numel() == 0 or not batches:
        raise ValueError("plot_padding needs at least one length and one batch.")
    real, padded = batch_tokens(values, batches, pad_to_multiple_of)
    base_real, base_padded = batch_tokens(
        values, random_batches(len(values), [len(b) for b in batches], seed), pad_to_multiple_of
    )
    efficiency, baseline = padding_comparison(values, batches, pad_to_multiple_of, seed)
    lines = [
        title or f"{len(values):,} sequences in {len(batches):,} batches",
        f"lengths: {length_stats(values)}",
        f"padding efficiency (real tokens / padded tokens): {efficiency:.1%} in these batches, "
        f"{baseline:.1%} in random batches of the same sizes",
    ]
    band = mark = None
    if batch_lengths is not None and len(batch_lengths):
        marked = torch.as_tensor(batch_lengths, dtype=torch.int64).flatten()
        band = (int(marked.min()), int(marked.max()))
        mark = band[1] if padded_to is None else int(padded_to)
        span = str(band[0]) if band[0] == band[1] else f"{band[0]}-{band[1]}"
        share = float(marked.sum()) / (len(marked) * max(mark, 1))
        lines.append(
            f"shaded: the batch drawn, {len(marked)} sequences of {span} tokens "
            f"padded to {mark} ({share:.1%} real)"
        )
    figure = new_figure(900, 700)
    y = header(figure, lines) + 10
    left, right, middle = 70, 880, 475
    top = add_axes(figure, left, y + 22, right, y + 222)
    length_histogram(top, values.double(), bins, band, mark)
    top.set_title("sequences per length, whole split", loc="left", fontsize=FONT + 1)
    if band is not None:
        top.legend(loc="upper right", fontsize=8)
    y += 272
    y_max = float(max(int(padded.max()), int(base_padded.max()))) * 1.05
    ours = add_axes(figure, left, y + 30, middle - 30, y + 240)
    token_bars(ours, real, padded, y_max)
    ours.set_title(
        f"these batches: {efficiency:.1%} of tokens are real", loc="left", fontsize=FONT + 1
    )
    ours.set_ylabel("tokens per batch")
    theirs = add_axes(figure, middle + 40, y + 30, right, y + 240)
    token_bars(theirs, base_real, base_padded, y_max)
    theirs.set_title(f"random batches, same sizes: {baseline:.1%}", loc="left", fontsize=FONT + 1)
    ours.legend(loc="upper left", fontsize=8)
    return save_figure(figure, path)


# ---------------------------------------------------------------------- tensor batches
def _split_batch(
    batch: Any,
) -> tuple[list[tuple[str, torch.Tensor]], tuple[str, torch.Tensor] | None]:
    """(feature tensors, label tensor) of a batch.

    The labels are the last 1-D integer tensor with one value per sample (per row of the first
    tensor) named like labels (``y``, ``label(s)``, ``target(s)``), else the batch's last such
    tensor.
    """
    tensors = [(n, v) for n, v in _flatten(batch) if isinstance(v, torch.Tensor) and v.dim() >= 1]
    rows = len(tensors[0][1]) if tensors else 0
    candidates = [
        (n, v) for n, v in tensors if len(tensors) > 1 and len(v) == rows and is_class_labels(v)
    ]
    named = [(n, v) for n, v in candidates if n.rsplit(".", 1)[-1] in LABEL_NAMES]
    label = (named or candidates or [None])[-1]
    features = [(n, v) for n, v in tensors if label is None or n != label[0]]
    return features, label


def plot_tensor_batch(
    batch: Any,
    path: str | os.PathLike[str],
    title: str | None = None,
    *,
    image_token_id: int | None = None,
) -> Path:
    """Draws one batch of tensors (the default of :meth:`BaseDataModule.plot_batch`).

    A dict with 2-D ``input_ids`` (token batches, padded or packed, with or without images)
    is drawn row by row by :func:`~datamodules.tools.token_pictures.plot_token_batch`.
    ``(N, C, H, W)`` images with C of 1 or 3 become an image grid. Otherwise the first
    feature tensor, flattened to ``(N, features)``, becomes a heat map: one row per sample
    (sorted by label), one column per feature, coloured by the value's z-score within the
    batch (blue -3, grey 0, red +3), beside a strip of label colours and the batch's label
    counts. Labels: see :func:`_split_batch`.

    Args:
        batch: A tensor, or a tuple / dict of tensors.
        path: Where to write the PNG.
        title: A line above the picture.
        image_token_id: In a token batch, the id of image positions (drawn as ticks).
    """
    from datamodules.tools.token_pictures import is_token_batch, plot_token_batch

    if is_token_batch(batch):
        return plot_token_batch(batch, path, title, image_token_id=image_token_id)
    features, label = _split_batch(batch)
    if not features:
        raise ValueError(f"plot_tensor_batch found no tensor to draw in a {type(batch).__name__}.")
    name, x = features[0]
    labels = None if label is None else label[1].detach().cpu()
    if x.dim() == 4 and x.shape[1] in (1, 3):
        return plot_image_grid(x.detach().cpu(), path, labels, title=title)
    x = x.detach().cpu().float().reshape(len(x), -1)
    n_total, f_total = x.shape
    order = torch.arange(n_total) if labels is None else torch.argsort(labels, stable=True)
    x = x[order][:MAX_ROWS, :MAX_COLS]
    n, f = x.shape
    mean, std = x.mean(dim=0), x.std(dim=0, unbiased=False)
    z = torch.where(std > 0, (x - mean) / std.clamp_min(1e-12), torch.zeros_like(x))
    heat_w, heat_h = f * max(6, min(40, 720 // f)), n * max(3, min(24, 480 // n))
    left, top = 60 if labels is None else 76, 80
    counts_w = 260 if labels is not None else 0
    width = max(640, left + heat_w + 30 + counts_w)
    figure = new_figure(width, max(top + heat_h + 100, 300))
    shapes = ", ".join(
        f"{k} {tuple(v.shape)} {str(v.dtype).replace('torch.', '')}"
        for k, v in [*features, *([label] if label else [])]
    )
    shown = f" (first {n} rows x {f} columns)" if n_total > n or f_total > f else ""
    header(
        figure,
        [
            title or f"one batch of {n_total}: {shapes}",
            f"heat map of '{name}': rows = samples"
            + (" sorted by label" if labels is not None else "")
            + f", columns = its {f_total} values{shown}",
            "colour = z-score within the batch: blue -3, grey 0, red +3",
        ],
    )
    ax = add_axes(figure, left, top, left + heat_w, top + heat_h)
    image = ax.imshow(
        z.numpy(), cmap="coolwarm", vmin=-3, vmax=3, aspect="auto", interpolation="nearest"
    )
    if heat_w / f >= 18:
        ax.set_xticks(range(f))
    else:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_yticks([])
    ax.set_xlabel("feature")
    bar_top = top + heat_h + 56
    bar = add_axes(figure, left, bar_top, left + max(min(heat_w, 240), 120), bar_top + 10)
    figure.colorbar(image, cax=bar, orientation="horizontal", ticks=[-3, 0, 3])
    if labels is not None:
        from matplotlib.colors import to_rgb

        strip = add_axes(figure, 40, top, 56, top + heat_h)
        colours = [to_rgb(TAB10[int(v) % 10]) for v in labels[order][:n].tolist()]
        strip.imshow(np.array(colours)[:, None, :], aspect="auto", interpolation="nearest")
        strip.set_xticks([])
        strip.set_yticks([])
        strip.set_ylabel("samples by label")
        values, counts = torch.unique(labels, return_counts=True)
        values, counts = values[:MAX_CLASSES_LISTED].tolist(), counts[:MAX_CLASSES_LISTED]
        rows = len(values)
        side = add_axes(
            figure, left + heat_w + 50, top, width - 70, top + min(heat_h, 22 * rows + 10)
        )
        bars = side.barh(
            range(rows), counts.numpy(), color=[TAB10[int(v) % 10] for v in values], height=0.7
        )
        texts = [f"{v}: {c}" for v, c in zip(values, counts.tolist(), strict=True)]
        side.bar_label(bars, labels=texts, padding=3)
        side.set_ylim(rows - 0.5, -0.5)
        side.set_xlim(0, float(counts.max()) * 1.6)
        side.set_yticks([])
        side.set_xticks([])
        side.set_frame_on(False)
        side.set_title("labels in this batch", loc="left", fontsize=FONT)
    return save_figure(figure, path)
