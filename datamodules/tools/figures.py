"""matplotlib for the inspect pictures: a figure of a given size in pixels, on an Agg canvas.

matplotlib is the optional extra ``plots``. :func:`new_figure` imports it (raising
:class:`PlotsUnavailable`, an ``ImportError`` that says how to install it, when it is
missing) and gives a ``matplotlib.figure.Figure`` on a ``FigureCanvasAgg``: pyplot and its
global state are never used. :func:`header`, :func:`add_axes` and :func:`save_figure` place
text lines and axes in pixels and write the figure as an RGB PNG.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DPI",
    "FONT",
    "PLOTS_HINT",
    "TAB10",
    "PlotsUnavailable",
    "add_axes",
    "header",
    "new_figure",
    "save_figure",
    "text_width",
]

PLOTS_HINT = 'pip install "lightning-datamodules[plots]" (or pip install matplotlib)'
#: Pixels per inch of every figure: sizes below are in pixels.
DPI = 100
#: Header lines: font size (points) and line height (pixels).
FONT, LINE = 9.5, 17
#: matplotlib's qualitative colours, for class labels (by name, so styles do not change them).
TAB10 = (
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:red",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:gray",
    "tab:olive",
    "tab:cyan",
)


class PlotsUnavailable(ImportError):
    """matplotlib, which draws the pictures, is not installed."""


def new_figure(width: int, height: int) -> Any:
    """An empty white matplotlib ``Figure`` of ``width`` x ``height`` pixels on an Agg canvas.

    Raises:
        PlotsUnavailable: matplotlib is not installed (the message says how to install it).
    """
    try:
        import matplotlib  # noqa: F401  (first: a missing package fails here)
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise PlotsUnavailable(
            f"the pictures are drawn with matplotlib, which is not installed: {PLOTS_HINT}"
        ) from error
    # A thousandth of a pixel more: the canvas truncates the size to whole pixels.
    size = ((width + 1e-3) / DPI, (height + 1e-3) / DPI)
    figure = Figure(figsize=size, dpi=DPI, facecolor="white")
    FigureCanvasAgg(figure)
    return figure


def add_axes(figure: Any, left: float, top: float, right: float, bottom: float) -> Any:
    """Axes over the pixel box ``(left, top, right, bottom)``, measured from the top left."""
    width, height = figure.bbox.width, figure.bbox.height
    box = (left / width, 1 - bottom / height, (right - left) / width, (bottom - top) / height)
    return figure.add_axes(box)


def header(figure: Any, lines: Sequence[str], x: float = 10, y: float = 6) -> float:
    """Writes text lines from pixel ``(x, y)`` (top left) down; returns the y below them.

    The figure widens to fit the longest line (call it before placing axes).
    """
    width = x + 10 + max((text_width(figure, line, FONT) for line in lines), default=0)
    if width > figure.bbox.width:
        figure.set_size_inches((math.ceil(width) + 1e-3) / DPI, figure.get_figheight())
    for line in lines:
        figure.text(
            x / figure.bbox.width,
            1 - y / figure.bbox.height,
            line,
            va="top",
            fontsize=FONT,
            parse_math=False,
        )
        y += LINE
    return y


def text_width(figure: Any, text: str, size: float) -> float:
    """The width in pixels of ``text`` at font ``size`` on ``figure``."""
    from matplotlib.font_manager import FontProperties

    renderer = figure.canvas.get_renderer()
    return renderer.get_text_width_height_descent(text, FontProperties(size=size), False)[0]


def save_figure(figure: Any, path: str | os.PathLike[str]) -> Path:
    """Renders ``figure`` and writes it to ``path`` as an RGB PNG; returns the path."""
    from PIL import Image

    figure.canvas.draw()
    pixels = np.asarray(figure.canvas.buffer_rgba())[..., :3]
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.ascontiguousarray(pixels)).save(out, format="PNG")
    return out
