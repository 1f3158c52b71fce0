"""The pictures of ``python -m datamodules inspect``: PNG files drawn with Pillow.

Pillow is already required by torchvision; no plotting library is needed. The functions are
also importable from :mod:`datamodules.inspection`.

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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image, ImageDraw, ImageFont

from datamodules.inspection import (
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
PALETTE = (
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
)
BACKGROUND = (255, 255, 255)
INK = (30, 30, 30)
MAX_ROWS, MAX_COLS = 256, 128


# ---------------------------------------------------------------------- drawing helpers
def _font(size: int = 12) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # pragma: no cover - Pillow < 10.1
        return ImageFont.load_default()


def _diverging(z: torch.Tensor) -> torch.Tensor:
    """Maps values in [-1, 1] to RGB (blue - light grey - red), uint8 (..., 3)."""
    low = torch.tensor([59.0, 76.0, 192.0])
    mid = torch.tensor([221.0, 221.0, 221.0])
    high = torch.tensor([180.0, 4.0, 38.0])
    z = z.clamp(-1, 1).unsqueeze(-1)
    rgb = torch.where(z < 0, mid + (low - mid) * (-z), mid + (high - mid) * z)
    return rgb.round().to(torch.uint8)


def _save(image: Image.Image, path: str | os.PathLike[str]) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(out, format="PNG")
    return out


def _text_block(draw: ImageDraw.ImageDraw, xy: tuple[int, int], lines: list[str]) -> int:
    """Draws lines of text; returns the y below them."""
    font = _font(13)
    x, y = xy
    for line in lines:
        draw.text((x, y), line, fill=INK, font=font)
        y += 17
    return y


def _to_uint8_images(images: torch.Tensor) -> torch.Tensor:
    if images.dtype == torch.uint8:
        return images
    x = images.detach().float()
    if x.numel() and (x.min() < 0 or x.max() > 1):
        x = (x - x.min()) / (x.max() - x.min()).clamp_min(1e-12)
    return (x.clamp(0, 1) * 255).round().to(torch.uint8)


# ---------------------------------------------------------------------- charts
GRID = (225, 225, 225)
PADDING = (240, 150, 140)
BAND = (253, 208, 162)


def _fit_text(draw: ImageDraw.ImageDraw, text: str, width: float, font: Any) -> str:
    """``text``, shortened with an ellipsis until it fits ``width`` pixels."""
    if draw.textlength(text, font=font) <= width:
        return text
    while len(text) > 1 and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…"


def _nice_ticks(low: float, high: float, target: int = 5, integer: bool = True) -> list[float]:
    """Round tick values (steps of 1, 2 or 5 x 10^k) from ``low`` to ``high``."""
    span = max(high - low, 1e-12)
    raw = span / max(target, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if raw <= m * magnitude)
    if integer:
        step = max(1.0, float(math.ceil(step)))
    start = math.ceil(low / step) * step
    return [start + k * step for k in range(int((high - start) // step) + 1)]


def _y_axis(
    draw: ImageDraw.ImageDraw, box: tuple[float, float, float, float], y_max: float
) -> Callable[[float], float]:
    """Draws horizontal grid lines with labels left of ``box``; returns value -> y."""
    left, top, right, bottom = box
    font = _font(11)

    def y_of(value: float) -> float:
        return bottom - (bottom - top) * value / y_max

    for value in _nice_ticks(0, y_max, 4):
        y = y_of(value)
        draw.line((left, y, right, y), fill=GRID)
        text = f"{value:,.0f}"
        draw.text((left - 6 - draw.textlength(text, font=font), y - 7), text, fill=INK, font=font)
    draw.line((left, top, left, bottom), fill=INK)
    draw.line((left, bottom, right, bottom), fill=INK)
    return y_of


def _dashed_vline(draw: ImageDraw.ImageDraw, x: float, top: float, bottom: float) -> None:
    y = top
    while y < bottom:
        draw.line((x, y, x, min(y + 5, bottom)), fill=PALETTE[3], width=2)
        y += 9


def _length_histogram(
    draw: ImageDraw.ImageDraw,
    box: tuple[float, float, float, float],
    lengths: torch.Tensor,
    max_bins: int = 60,
    band: tuple[int, int] | None = None,
    mark: int | None = None,
) -> None:
    """Draws a histogram of integer lengths in ``box``; bins span whole numbers of tokens.

    ``band`` shades the lengths ``[a, b]`` behind the bars; ``mark`` draws a dashed line
    after length ``mark`` (a padded width: every length left of it fits).
    """
    left, top, right, bottom = box
    values = lengths.round().to(torch.int64)
    low, high = int(values.min()), int(values.max())
    width = max(1, math.ceil((high - low + 1) / max_bins))
    counts = torch.bincount((values - low) // width)
    x_high = max(low + len(counts) * width, (mark + 1) if mark is not None else 0)

    def x_of(value: float) -> float:
        return left + (right - left) * (value - low) / max(x_high - low, 1)

    y_of = _y_axis(draw, box, float(counts.max()) * 1.08)
    if band is not None:
        draw.rectangle((x_of(band[0]), top, x_of(band[1] + 1), bottom - 1), fill=BAND)
    for k, count in enumerate(counts.tolist()):
        if count:
            x0, x1 = x_of(low + k * width), x_of(low + (k + 1) * width)
            gap = 1 if x1 - x0 >= 4 else 0
            draw.rectangle(
                (x0 + gap, min(y_of(count), bottom - 1), max(x0 + gap, x1 - gap - 1), bottom - 1),
                fill=PALETTE[0],
            )
    font = _font(11)
    for tick in _nice_ticks(low, x_high - 1, 8):
        x = x_of(tick + 0.5) if width == 1 else x_of(tick)
        draw.line((x, bottom, x, bottom + 4), fill=INK)
        text = f"{tick:.0f}"
        draw.text((x - draw.textlength(text, font=font) / 2, bottom + 6), text, fill=INK, font=font)
    if mark is not None:
        x = x_of(mark + 1)
        _dashed_vline(draw, x, top, bottom)
        text = f"padded to {mark}"
        text_w = draw.textlength(text, font=font)
        x_text = x + 4 if x + 4 + text_w <= right else x - 4 - text_w  # keep it on the canvas
        draw.rectangle((x_text - 2, top + 1, x_text + text_w + 2, top + 15), fill=BACKGROUND)
        draw.text((x_text, top + 2), text, fill=PALETTE[3], font=font)
    draw.text(((left + right) / 2 - 45, bottom + 22), "length (tokens)", fill=INK, font=font)


def _token_bars(
    draw: ImageDraw.ImageDraw,
    box: tuple[float, float, float, float],
    real: torch.Tensor,
    padded: torch.Tensor,
    y_max: float,
) -> None:
    """Per batch (sorted by padded tokens), a bar of padded tokens with its real tokens in
    front; more batches than pixels are averaged in groups of neighbours."""
    left, top, right, bottom = box
    y_of = _y_axis(draw, box, y_max)
    n = len(real)
    if not n:
        return
    order = torch.argsort(padded.double() + real.double() / (float(padded.max()) + 1))
    columns = min(n, int(right - left))
    edges = torch.linspace(0, n, columns + 1).round().to(torch.int64).tolist()
    step = (right - left) / columns
    gap = 1 if step >= 4 else 0
    for c in range(columns):
        group = order[edges[c] : edges[c + 1]]
        if not len(group):
            continue
        x0 = left + c * step + gap
        x1 = max(x0, left + (c + 1) * step - gap - 1)
        pad_top = min(y_of(float(padded[group].double().mean())), bottom - 1)
        real_top = min(y_of(float(real[group].double().mean())), bottom - 1)
        draw.rectangle((x0, pad_top, x1, bottom - 1), fill=PADDING)
        draw.rectangle((x0, real_top, x1, bottom - 1), fill=PALETTE[0])
    font = _font(11)
    text = f"{n:,} batches, sorted by padded tokens"
    draw.text(
        ((left + right - draw.textlength(text, font=font)) / 2, bottom + 6),
        text,
        fill=INK,
        font=font,
    )


def _legend(
    draw: ImageDraw.ImageDraw, xy: tuple[float, float], items: list[tuple[Any, str]]
) -> None:
    x, y = xy
    font = _font(12)
    for colour, text in items:
        if colour == "dashed":
            _dashed_vline(draw, x + 6, y, y + 12)
        else:
            draw.rectangle((x, y + 1, x + 12, y + 12), fill=colour)
        draw.text((x + 18, y), text, fill=INK, font=font)
        x += 18 + draw.textlength(text, font=font) + 22


# ---------------------------------------------------------------------- pictures
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
    pixels = _to_uint8_images(images[:max_images].cpu())
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
    font = _font(12)
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
            text = _fit_text(draw, text, w, font)
            draw.text((x, y + h + 1), text, fill=PALETTE[value % len(PALETTE)], font=font)
    return _save(canvas, path)


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
    _text_block(
        draw,
        (10, 6),
        [
            title or f"{values.numel()} sequence lengths",
            length_stats(values),
            f"padding efficiency {efficiency:.1%} (real tokens / padded tokens, padded to "
            f"{padded})",
        ],
    )
    _length_histogram(draw, (70, 74, 740, 350), values, bins, mark=padded)
    return _save(canvas, path)


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
    y = _text_block(draw, (10, 6), lines) + 10
    heading = _font(13)
    draw.text((left, y), "sequences per length, whole split", fill=INK, font=heading)
    _length_histogram(draw, (left, y + 22, right, y + 222), values.double(), bins, band, mark)
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
        _token_bars(draw, (x0, y + 40, x1, y + 260), r, p, y_max)
    draw.text((left - 60, y + 20), "tokens per batch", fill=INK, font=_font(11))
    _legend(
        draw,
        (left, y + 292),
        [(PALETTE[0], "real tokens"), (PADDING, "padding"), (BAND, "the batch drawn")]
        + ([("dashed", "its padded width")] if mark is not None else []),
    )
    return _save(canvas, path)


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
    heat = Image.fromarray(_diverging(z).numpy(), "RGB").resize(
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
    _text_block(
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
    font = _font(11)
    if row_labels is not None:
        for i, value in enumerate(row_labels.tolist()):
            y = top + i * cell_h
            draw.rectangle((12, y, 12 + strip - 1, y + cell_h - 1), fill=PALETTE[int(value) % 10])
        x0 = left + heat.width + 20
        draw.text((x0, top), "labels in this batch:", fill=INK, font=_font(13))
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
    canvas.paste(Image.fromarray(_diverging(ramp).numpy(), "RGB"), (left, bar_top))
    for x, text in ((left - 6, "-3"), (left + 96, "0"), (left + 192, "+3")):
        draw.text((x, bar_top + 12), text, fill=INK, font=font)
    return _save(canvas, path)
