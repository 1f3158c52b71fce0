"""The pictures of ``python -m datamodules inspect``: PNG files drawn with Pillow.

Pillow is already required by torchvision; no plotting library is needed. The functions are
also importable from :mod:`datamodules.tools.descriptions`; their primitives are in
:mod:`datamodules.tools.drawing`.

* :func:`plot_tensor_batch`: the default of :meth:`BaseDataModule.plot_batch`: an image grid
  for ``(N, C, H, W)`` images, else a heat map of the samples' values (z-scored per column
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

import torch
from PIL import Image, ImageDraw

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

#: Tableau's 10 qualitative colours, for class labels.
from datamodules.tools.drawing import (
    BACKGROUND,
    BAND,
    INK,
    PADDING,
    PALETTE,
    diverging,
    fit_text,
    legend,
    length_histogram,
    load_font,
    save_png,
    text_block,
    to_uint8_images,
    token_bars,
)

#: The heat map of a tensor batch shows at most this many rows and columns.
MAX_ROWS, MAX_COLS = 256, 128


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

    Images smaller than 64 pixels are enlarged (nearest neighbour, by a whole factor) and
    images larger than ``max_tile`` are shrunk to it, so that every picture is legible.

    Args:
        images: The batch's images (C of 1 or 3).
        path: Where to write the PNG.
        labels: One label per image, written under it (shortened to the image's width).
        names: Class names indexed by label.
        title: A line above the grid (the canvas widens to fit it).
        max_images: At most this many images are drawn.
        max_tile: The longest side, in pixels, an image is drawn at.
    """
    if images.dim() != 4 or images.shape[1] not in (1, 3):
        raise ValueError(f"images of shape {tuple(images.shape)}: expected (N, 1 or 3, H, W).")
    pixels = to_uint8_images(images[:max_images].cpu())
    if pixels.shape[1] == 1:
        pixels = pixels.expand(-1, 3, -1, -1)
    n, _, h, w = pixels.shape
    scale = max(1, math.ceil(64 / max(1, min(h, w))))  # small images are drawn at least 64 px
    h, w = h * scale, w * scale
    if max(h, w) > max_tile:
        shrink = max_tile / max(h, w)
        h, w = max(1, round(h * shrink)), max(1, round(w * shrink))
    cols = max(1, math.ceil(math.sqrt(n)))
    rows = math.ceil(n / cols)
    pad, caption = 4, 16 if labels is not None else 0
    header = 24 if title else 4
    font = load_font(12)
    width = cols * (w + pad) + pad
    if title:
        probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
        width = max(width, math.ceil(probe.textlength(title, font=font)) + 2 * pad)
    canvas = Image.new("RGB", (width, header + rows * (h + caption + pad)), BACKGROUND)
    draw = ImageDraw.Draw(canvas)
    if title:
        draw.text((pad, 4), title, fill=INK, font=font)
    label_list = None if labels is None else [int(v) for v in torch.as_tensor(labels).tolist()]
    for i in range(n):
        r, c = divmod(i, cols)
        x, y = pad + c * (w + pad), header + r * (h + caption + pad)
        tile = Image.fromarray(pixels[i].permute(1, 2, 0).contiguous().numpy(), "RGB")
        if tile.size != (w, h):
            resample = Image.Resampling.NEAREST if scale > 1 else Image.Resampling.BILINEAR
            tile = tile.resize((w, h), resample)
        canvas.paste(tile, (x, y))
        if label_list is not None:
            value = label_list[i]
            text = names[value] if names is not None and 0 <= value < len(names) else str(value)
            text = fit_text(draw, text, w, font)
            draw.text((x, y + h + 1), text, fill=PALETTE[value % len(PALETTE)], font=font)
    return save_png(canvas, path)


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
    canvas = Image.new("RGB", (760, 400), BACKGROUND)
    draw = ImageDraw.Draw(canvas)
    text_block(
        draw,
        (10, 6),
        [
            title or f"{values.numel()} sequence lengths",
            length_stats(values),
            f"padding efficiency {efficiency:.1%} (real tokens / padded tokens, padded to "
            f"{padded})",
        ],
    )
    length_histogram(draw, (70, 74, 740, 350), values, bins, mark=padded)
    return save_png(canvas, path)


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
    width, left, right = 900, 70, 880
    canvas = Image.new("RGB", (width, 700), BACKGROUND)
    draw = ImageDraw.Draw(canvas)
    y = text_block(draw, (10, 6), lines) + 10
    heading = load_font(13)
    draw.text((left, y), "sequences per length, whole split", fill=INK, font=heading)
    length_histogram(draw, (left, y + 22, right, y + 222), values.double(), bins, band, mark)
    y += 272
    y_max = float(max(int(padded.max()), int(base_padded.max()))) * 1.05
    middle = (left + right) / 2
    panels = (
        ((left, middle - 30), f"these batches: {efficiency:.1%} of tokens are real", real, padded),
        (
            (middle + 40, right),
            f"random batches, same sizes: {baseline:.1%}",
            base_real,
            base_padded,
        ),
    )
    for (x0, x1), heading_text, r, p in panels:
        draw.text((x0, y), heading_text, fill=INK, font=heading)
        token_bars(draw, (x0, y + 40, x1, y + 260), r, p, y_max)
    draw.text((left - 60, y + 20), "tokens per batch", fill=INK, font=load_font(11))
    legend(
        draw,
        (left, y + 292),
        [(PALETTE[0], "real tokens"), (PADDING, "padding"), (BAND, "the batch drawn")]
        + ([("dashed", "its padded width")] if mark is not None else []),
    )
    return save_png(canvas, path)


def _split_batch(
    batch: Any,
) -> tuple[list[tuple[str, torch.Tensor]], tuple[str, torch.Tensor] | None]:
    """(feature tensors, label tensor) of a batch.

    The labels are the last 1-D integer tensor named like labels (``y``, ``label(s)``,
    ``target(s)``), else the batch's last 1-D integer tensor.
    """
    tensors = [(n, v) for n, v in _flatten(batch) if isinstance(v, torch.Tensor) and v.dim() >= 1]
    candidates = [(n, v) for n, v in tensors if len(tensors) > 1 and is_class_labels(v)]
    named = [(n, v) for n, v in candidates if n.rsplit(".", 1)[-1] in LABEL_NAMES]
    label = (named or candidates or [None])[-1]
    features = [(n, v) for n, v in tensors if label is None or n != label[0]]
    return features, label


def plot_tensor_batch(batch: Any, path: str | os.PathLike[str], title: str | None = None) -> Path:
    """Draws one batch of tensors (the default of :meth:`BaseDataModule.plot_batch`).

    ``(N, C, H, W)`` images with C of 1 or 3 become an image grid. Otherwise the first
    feature tensor, flattened to ``(N, features)``, becomes a heat map: one row per sample
    (sorted by label), one column per feature, coloured by the value's z-score within the
    batch (blue -3, grey 0, red +3), beside a strip of label colours and the batch's label
    counts. Labels: see :func:`_split_batch`.

    Args:
        batch: A tensor, or a tuple / dict of tensors.
        path: Where to write the PNG.
        title: A line above the picture.
    """
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
    row_labels = None if labels is None else labels[order][:MAX_ROWS]
    n, f = x.shape
    mean, std = x.mean(dim=0), x.std(dim=0, unbiased=False)
    z = torch.where(std > 0, (x - mean) / std.clamp_min(1e-12), torch.zeros_like(x)) / 3
    cell_w = max(6, min(40, 720 // f))
    cell_h = max(3, min(24, 480 // n))
    heat = Image.fromarray(diverging(z).numpy(), "RGB").resize(
        (f * cell_w, n * cell_h), Image.Resampling.NEAREST
    )
    strip, gap, legend_w = 16, 8, 240 if labels is not None else 0
    left, top = 12 + strip + gap, 70
    width = left + heat.width + 20 + legend_w
    height = max(top + heat.height + 60, top + 40 + 20 * MAX_CLASSES_LISTED * (labels is not None))
    canvas = Image.new("RGB", (width, height), BACKGROUND)
    draw = ImageDraw.Draw(canvas)
    shape_text = ", ".join(
        f"{k} {tuple(v.shape)} {str(v.dtype).replace('torch.', '')}"
        for k, v in [*features, *([label] if label else [])]
    )
    text_block(
        draw,
        (10, 6),
        [
            title or f"one batch of {n_total}: {shape_text}",
            f"heat map of '{name}': rows = samples"
            + (" sorted by label" if labels is not None else "")
            + f", columns = its {f_total} values"
            + (
                f" (first {f} rows x {min(f_total, MAX_COLS)} columns)"
                if n_total > n or f_total > f
                else ""
            ),
            "colour = z-score within the batch: blue -3, grey 0, red +3",
        ],
    )
    canvas.paste(heat, (left, top))
    font = load_font(11)
    if row_labels is not None:
        for i, value in enumerate(row_labels.tolist()):
            y = top + i * cell_h
            draw.rectangle((12, y, 12 + strip - 1, y + cell_h - 1), fill=PALETTE[int(value) % 10])
        x0 = left + heat.width + 20
        draw.text((x0, top), "labels in this batch:", fill=INK, font=load_font(13))
        values, counts = torch.unique(labels, return_counts=True)
        peak = int(counts.max().item())
        for i, (value, count) in enumerate(
            list(zip(values.tolist(), counts.tolist(), strict=True))[:MAX_CLASSES_LISTED]
        ):
            y = top + 22 + i * 20
            bar = int(150 * count / peak)
            draw.rectangle((x0, y, x0 + max(bar, 1), y + 14), fill=PALETTE[int(value) % 10])
            draw.text((x0 + bar + 6, y), f"{value}: {count}", fill=INK, font=font)
    if cell_w >= 18:
        for j in range(f):
            draw.text((left + j * cell_w + 2, top - 14), str(j), fill=INK, font=font)
    # Colour bar.
    bar_top = top + heat.height + 14
    ramp = torch.linspace(-1, 1, 200).unsqueeze(0).expand(10, -1)
    canvas.paste(Image.fromarray(diverging(ramp).numpy(), "RGB"), (left, bar_top))
    for x, text in ((left - 6, "-3"), (left + 96, "0"), (left + 192, "+3")):
        draw.text((x, bar_top + 12), text, fill=INK, font=font)
    return save_png(canvas, path)
