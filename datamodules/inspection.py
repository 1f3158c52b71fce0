"""What ``python -m datamodules inspect`` prints and draws, as reusable functions.

Descriptions (lists of text lines):

* :func:`describe_datamodule`: the default of :meth:`BaseDataModule.describe_data`: per split,
  the sample count and, when :meth:`~BaseDataModule.labels` gives integer classes, the count
  of each class.
* :func:`describe_batch`: the structure of one batch (names, shapes, dtypes, value ranges).
* :func:`length_stats`: min / median / mean / p95 / max of sequence lengths.

Pictures (PNG files, drawn with Pillow, which torchvision already requires; no plotting
library is needed):

* :func:`plot_tensor_batch`: the default of :meth:`BaseDataModule.plot_batch`: an image grid
  for ``(N, C, H, W)`` images, else a heat map of the samples' values (z-scored per column
  within the batch) with a label strip and the batch's label counts.
* :func:`plot_image_grid`: a grid of images with their class names.
* :func:`plot_lengths`: a histogram of sequence lengths with the padding efficiency.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image, ImageDraw, ImageFont

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
MAX_CLASSES_LISTED = 20
MAX_ROWS, MAX_COLS = 256, 128
LABEL_NAMES = ("y", "label", "labels", "target", "targets")


# ---------------------------------------------------------------------- descriptions
def _flatten(batch: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(name, leaf) pairs of a nested batch; tuple positions are named by their index."""
    if isinstance(batch, dict):
        items = [(f"{prefix}{k}", v) for k, v in batch.items()]
    elif isinstance(batch, (list, tuple)) and not _is_sequence_of_scalars(batch):
        items = [(f"{prefix}{i}", v) for i, v in enumerate(batch)]
    else:
        return [(prefix or "batch", batch)]
    out: list[tuple[str, Any]] = []
    for name, value in items:
        if isinstance(value, (dict, list, tuple)) and not _is_sequence_of_scalars(value):
            out.extend(_flatten(value, f"{name}."))
        else:
            out.append((name, value))
    return out


def _is_sequence_of_scalars(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(
        isinstance(v, (int, float, str, bool)) for v in value
    )


def describe_batch(batch: Any) -> list[str]:
    """Lines giving each field of a batch: shape, dtype and value range (or type and length)."""
    lines = []
    for name, value in _flatten(batch):
        if isinstance(value, torch.Tensor):
            text = f"{name}: {tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
            if value.numel() and not value.is_complex():
                flat = value.detach().float()
                text += f", values in [{flat.min().item():.4g}, {flat.max().item():.4g}]"
            lines.append(text)
        elif isinstance(value, (list, tuple)):
            lines.append(f"{name}: {type(value).__name__} of {len(value)}")
        else:
            lines.append(f"{name}: {type(value).__name__}")
    return lines


def is_class_labels(labels: torch.Tensor, max_classes: int = 1000) -> bool:
    """Whether a tensor looks like integer class labels (1-D, integer, few distinct values)."""
    if labels.dim() != 1 or labels.is_floating_point() or labels.is_complex():
        return False
    if labels.dtype == torch.bool:
        return True
    return len(torch.unique(labels)) <= max_classes


def class_counts(labels: torch.Tensor, names: Sequence[str] | None = None) -> str:
    """``"0: 59, 1: 71, 2: 48"`` (most frequent first beyond 20 classes), with class names."""
    values, counts = torch.unique(labels, return_counts=True)
    pairs = list(zip(values.tolist(), counts.tolist(), strict=True))
    if len(pairs) > MAX_CLASSES_LISTED:
        pairs.sort(key=lambda p: -p[1])
    shown = pairs[:MAX_CLASSES_LISTED]

    def label(value: Any) -> str:
        if names is not None and isinstance(value, int) and 0 <= value < len(names):
            return f"{names[value]}"
        return str(value)

    text = ", ".join(f"{label(v)}: {c}" for v, c in shown)
    if len(pairs) > len(shown):
        text += f", ... ({len(pairs)} classes)"
    return text


def length_stats(lengths: Sequence[int] | torch.Tensor) -> str:
    """``"min 3, median 40, mean 55.2, p95 180, max 512"`` for sequence lengths."""
    values = torch.as_tensor(lengths, dtype=torch.float64).flatten()
    if values.numel() == 0:
        return "no sequences"
    q = torch.quantile(values, torch.tensor([0.5, 0.95], dtype=torch.float64)).tolist()
    return (
        f"min {values.min().item():.0f}, median {q[0]:.0f}, mean {values.mean().item():.1f}, "
        f"p95 {q[1]:.0f}, max {values.max().item():.0f}"
    )


def padding_efficiency(batches: Sequence[Sequence[int]]) -> float:
    """Share of real tokens when each batch is padded to its longest sequence."""
    real = sum(sum(b) for b in batches)
    padded = sum(len(b) * max(b) for b in batches if len(b))
    return real / padded if padded else 1.0


def describe_datamodule(dm: Any, names: Sequence[str] | None = None) -> list[str]:
    """Per split: the sample count and, with integer class labels, each class's count.

    Args:
        dm: A set-up :class:`~datamodules.base.BaseDataModule`.
        names: Class names, indexed by label value.
    """
    indices = dm.split_indices
    if indices is None:
        dm.setup("fit")
        indices = dm.split_indices
    try:
        labels = dm.labels()
    except (NotImplementedError, ValueError, TypeError):
        labels = None
    if labels is not None and not (isinstance(labels, torch.Tensor) and is_class_labels(labels)):
        labels = None
    lines = ["data:"]
    for split, idx in indices.items():
        text = f"  {split}: {len(idx)} samples"
        separate = dm.split_datasets.get(split) is not dm.dataset
        if labels is not None and len(idx) and not separate:
            text += f"; classes {class_counts(labels[idx], names)}"
        elif separate:
            text += " (from its own source)"
        lines.append(text)
    return lines


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


# ---------------------------------------------------------------------- pictures
def plot_image_grid(
    images: torch.Tensor,
    path: str | os.PathLike[str],
    labels: torch.Tensor | Sequence[int] | None = None,
    names: Sequence[str] | None = None,
    title: str | None = None,
    max_images: int = 64,
) -> Path:
    """Draws a grid of ``(N, C, H, W)`` images (uint8, or float scaled to [0, 1]) with labels.

    Args:
        images: The batch's images (C of 1 or 3).
        path: Where to write the PNG.
        labels: One label per image, written under it.
        names: Class names indexed by label.
        title: A line above the grid.
        max_images: At most this many images are drawn.
    """
    if images.dim() != 4 or images.shape[1] not in (1, 3):
        raise ValueError(f"images of shape {tuple(images.shape)}: expected (N, 1 or 3, H, W).")
    pixels = _to_uint8_images(images[:max_images].cpu())
    if pixels.shape[1] == 1:
        pixels = pixels.expand(-1, 3, -1, -1)
    n, _, h, w = pixels.shape
    scale = max(1, math.ceil(64 / max(1, min(h, w))))  # small images are drawn at least 64 px
    h, w = h * scale, w * scale
    cols = max(1, math.ceil(math.sqrt(n)))
    rows = math.ceil(n / cols)
    pad, caption = 4, 16 if labels is not None else 0
    header = 24 if title else 4
    canvas = Image.new(
        "RGB", (cols * (w + pad) + pad, header + rows * (h + caption + pad)), BACKGROUND
    )
    draw = ImageDraw.Draw(canvas)
    font = _font(12)
    if title:
        draw.text((pad, 4), title, fill=INK, font=font)
    label_list = None if labels is None else [int(v) for v in torch.as_tensor(labels).tolist()]
    for i in range(n):
        r, c = divmod(i, cols)
        x, y = pad + c * (w + pad), header + r * (h + caption + pad)
        tile = Image.fromarray(pixels[i].permute(1, 2, 0).contiguous().numpy(), "RGB")
        if scale > 1:
            tile = tile.resize((w, h), Image.Resampling.NEAREST)
        canvas.paste(tile, (x, y))
        if label_list is not None:
            value = label_list[i]
            text = names[value] if names is not None and 0 <= value < len(names) else str(value)
            draw.text((x, y + h + 1), text, fill=PALETTE[value % len(PALETTE)], font=font)
    return _save(canvas, path)


def plot_lengths(
    lengths: Sequence[int] | torch.Tensor,
    path: str | os.PathLike[str],
    padded_to: int | None = None,
    title: str | None = None,
    efficiency: float | None = None,
    bins: int = 30,
) -> Path:
    """Draws a histogram of sequence lengths and states the padding efficiency.

    Args:
        lengths: One length per sequence (one batch, or a whole split).
        path: Where to write the PNG.
        padded_to: The length the sequences are padded to (default: the longest); gives
            the efficiency ``sum(lengths) / (len(lengths) * padded_to)``.
        title: A line above the histogram.
        efficiency: The efficiency to state instead (e.g. over many batches, from
            :func:`padding_efficiency`).
        bins: Histogram bins.
    """
    values = torch.as_tensor(lengths, dtype=torch.float64).flatten()
    if values.numel() == 0:
        raise ValueError("plot_lengths needs at least one length.")
    longest = int(values.max().item())
    padded = longest if padded_to is None else int(padded_to)
    if efficiency is None:
        efficiency = float(values.sum().item()) / (values.numel() * max(padded, 1))
    low, high = float(values.min().item()), float(values.max().item())
    bins = max(1, min(bins, int(high - low) + 1))
    counts = torch.histc(values, bins=bins, min=low, max=high if high > low else low + 1)
    width, height, left, top, bottom = 640, 260, 50, 80, 40
    canvas = Image.new("RGB", (width + left + 20, height + top + bottom), BACKGROUND)
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
    peak = float(counts.max().item()) or 1.0
    bar_w = width / bins
    for i, count in enumerate(counts.tolist()):
        bar_h = height * count / peak
        x0 = left + i * bar_w
        draw.rectangle(
            (x0 + 1, top + height - bar_h, x0 + bar_w - 1, top + height), fill=PALETTE[0]
        )
    draw.line((left, top + height, left + width, top + height), fill=INK)
    font = _font(12)
    for frac, value in ((0.0, low), (1.0, high)):
        draw.text((left + frac * width - 10, top + height + 6), f"{value:.0f}", fill=INK, font=font)
    draw.text((left + width / 2 - 30, top + height + 20), "length", fill=INK, font=font)
    draw.text((6, top - 4), f"{peak:.0f}", fill=INK, font=font)
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
