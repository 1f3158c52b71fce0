"""Drawing primitives of the inspect pictures (Pillow): colours, fonts, axes, histograms, bars.

The building blocks of :mod:`datamodules.tools.pictures`: a palette and inks, text that fits,
nice axis ticks, a length histogram and real-versus-padded token bars.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from PIL import Image, ImageDraw, ImageFont

#: Tableau's 10 qualitative colours, for class labels.


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


# ---------------------------------------------------------------------- drawing helpers
def load_font(size: int = 12) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # pragma: no cover - Pillow < 10.1
        return ImageFont.load_default()


def diverging(z: torch.Tensor) -> torch.Tensor:
    """Maps values in [-1, 1] to RGB (blue - light grey - red), uint8 (..., 3)."""
    low = torch.tensor([59.0, 76.0, 192.0])
    mid = torch.tensor([221.0, 221.0, 221.0])
    high = torch.tensor([180.0, 4.0, 38.0])
    z = z.clamp(-1, 1).unsqueeze(-1)
    rgb = torch.where(z < 0, mid + (low - mid) * (-z), mid + (high - mid) * z)
    return rgb.round().to(torch.uint8)


def save_png(image: Image.Image, path: str | os.PathLike[str]) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(out, format="PNG")
    return out


def text_block(draw: ImageDraw.ImageDraw, xy: tuple[int, int], lines: list[str]) -> int:
    """Draws lines of text; returns the y below them."""
    font = load_font(13)
    x, y = xy
    for line in lines:
        draw.text((x, y), line, fill=INK, font=font)
        y += 17
    return y


def to_uint8_images(images: torch.Tensor) -> torch.Tensor:
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


def fit_text(draw: ImageDraw.ImageDraw, text: str, width: float, font: Any) -> str:
    """``text``, shortened with an ellipsis until it fits ``width`` pixels."""
    if draw.textlength(text, font=font) <= width:
        return text
    while len(text) > 1 and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…"


def nice_ticks(low: float, high: float, target: int = 5, integer: bool = True) -> list[float]:
    """Round tick values (steps of 1, 2 or 5 x 10^k) from ``low`` to ``high``."""
    span = max(high - low, 1e-12)
    raw = span / max(target, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if raw <= m * magnitude)
    if integer:
        step = max(1.0, float(math.ceil(step)))
    start = math.ceil(low / step) * step
    return [start + k * step for k in range(int((high - start) // step) + 1)]


def y_axis(
    draw: ImageDraw.ImageDraw, box: tuple[float, float, float, float], y_max: float
) -> Callable[[float], float]:
    """Draws horizontal grid lines with labels left of ``box``; returns value -> y."""
    left, top, right, bottom = box
    font = load_font(11)

    def y_of(value: float) -> float:
        return bottom - (bottom - top) * value / y_max

    for value in nice_ticks(0, y_max, 4):
        y = y_of(value)
        draw.line((left, y, right, y), fill=GRID)
        text = f"{value:,.0f}"
        draw.text((left - 6 - draw.textlength(text, font=font), y - 7), text, fill=INK, font=font)
    draw.line((left, top, left, bottom), fill=INK)
    draw.line((left, bottom, right, bottom), fill=INK)
    return y_of


def dashed_vline(draw: ImageDraw.ImageDraw, x: float, top: float, bottom: float) -> None:
    y = top
    while y < bottom:
        draw.line((x, y, x, min(y + 5, bottom)), fill=PALETTE[3], width=2)
        y += 9


def length_histogram(
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

    y_of = y_axis(draw, box, float(counts.max()) * 1.08)
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
    font = load_font(11)
    for tick in nice_ticks(low, x_high - 1, 8):
        x = x_of(tick + 0.5) if width == 1 else x_of(tick)
        draw.line((x, bottom, x, bottom + 4), fill=INK)
        text = f"{tick:.0f}"
        draw.text((x - draw.textlength(text, font=font) / 2, bottom + 6), text, fill=INK, font=font)
    if mark is not None:
        x = x_of(mark + 1)
        dashed_vline(draw, x, top, bottom)
        text = f"padded to {mark}"
        text_w = draw.textlength(text, font=font)
        x_text = x + 4 if x + 4 + text_w <= right else x - 4 - text_w  # keep it on the canvas
        draw.rectangle((x_text - 2, top + 1, x_text + text_w + 2, top + 15), fill=BACKGROUND)
        draw.text((x_text, top + 2), text, fill=PALETTE[3], font=font)
    draw.text(((left + right) / 2 - 45, bottom + 22), "length (tokens)", fill=INK, font=font)


def token_bars(
    draw: ImageDraw.ImageDraw,
    box: tuple[float, float, float, float],
    real: torch.Tensor,
    padded: torch.Tensor,
    y_max: float,
) -> None:
    """Per batch (sorted by padded tokens), a bar of padded tokens with its real tokens in
    front; more batches than pixels are averaged in groups of neighbours."""
    left, top, right, bottom = box
    y_of = y_axis(draw, box, y_max)
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
    font = load_font(11)
    text = f"{n:,} batches, sorted by padded tokens"
    draw.text(
        ((left + right - draw.textlength(text, font=font)) / 2, bottom + 6),
        text,
        fill=INK,
        font=font,
    )


def legend(
    draw: ImageDraw.ImageDraw, xy: tuple[float, float], items: list[tuple[Any, str]]
) -> None:
    x, y = xy
    font = load_font(12)
    for colour, text in items:
        if colour == "dashed":
            dashed_vline(draw, x + 6, y, y + 12)
        else:
            draw.rectangle((x, y + 1, x + 12, y + 12), fill=colour)
        draw.text((x + 18, y), text, fill=INK, font=font)
        x += 18 + draw.textlength(text, font=font) + 22


# ---------------------------------------------------------------------- pictures
