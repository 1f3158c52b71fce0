"""The inspect picture of a token batch, padded or packed: what each row holds.

:func:`plot_token_batch` draws (with matplotlib, the ``plots`` extra; see
:mod:`datamodules.tools.figures`) one bar per row of a batch of token ids:

* each document (a padded row's one sequence, or each piece of a packed row) in its own
  colour, with a thin white gap between documents;
* the tokens the loss trains on (``labels != -100``, or ``completion_mask``) in full colour,
  the rest of a document (prompts, system text, context) pale;
* image tokens (``input_ids == image_token_id``) as black ticks under the row;
* padding in grey; a notch where a packed piece continues from the row before or into the next.

The header states the rows, real and trained tokens, documents, padding, and (packed) the
longest piece. A batch that also holds images (``pixel_values`` of conversations about images,
or ``image`` of caption pairs) gets their grid below the rows. This is the default picture of
every batch with 2-D ``input_ids`` (chat, image-text, preference, text), padded or packed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from datamodules.tools.figures import TAB10, add_axes, header, new_figure, save_figure

__all__ = ["is_token_batch", "plot_token_batch", "token_batch_lines", "token_layout"]

PAD_GREY = "0.88"
#: Document colours: the palette without its grey, which would read as padding.
COLOURS = tuple(c for c in TAB10 if c != "tab:gray")
#: Alpha of a document's tokens that are not trained.
PALE = 0.3
IGNORE_INDEX = -100


def is_token_batch(batch: Any) -> bool:
    """Whether ``batch`` is a dict whose ``input_ids`` are a 2-D tensor (rows of token ids)."""
    ids = batch.get("input_ids") if isinstance(batch, Mapping) else None
    return isinstance(ids, torch.Tensor) and ids.dim() == 2


def token_layout(batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Per token of a token batch (R, L): ``document`` (int64, -1 at padding), ``trained``
    (bool) and ``real`` (bool).

    Documents: ``document_ids`` when packed, else one per row (the row number). Real tokens:
    ``attention_mask`` (a packed batch's 2-D one), else ``document_ids >= 0``, else all.
    Trained: ``completion_mask`` (preference batches), else ``labels != -100`` (labels of the
    rows' shape), else every real token.
    """
    ids = batch["input_ids"].detach().cpu()
    rows, width = ids.shape
    docs = batch.get("document_ids")
    mask = batch.get("attention_mask")
    if isinstance(mask, torch.Tensor) and tuple(mask.shape) == (rows, width):
        real = mask.detach().cpu().bool()
    elif isinstance(docs, torch.Tensor):
        real = docs.detach().cpu() >= 0
    else:
        real = torch.ones(rows, width, dtype=torch.bool)
    if isinstance(docs, torch.Tensor) and tuple(docs.shape) == (rows, width):
        document = docs.detach().cpu().to(torch.int64).clone()
    else:
        document = torch.arange(rows, dtype=torch.int64)[:, None].expand(rows, width).clone()
    document[~real] = -1
    completion = batch.get("completion_mask")
    labels = batch.get("labels")
    if isinstance(completion, torch.Tensor) and tuple(completion.shape) == (rows, width):
        trained = completion.detach().cpu().bool()
    elif isinstance(labels, torch.Tensor) and tuple(labels.shape) == (rows, width):
        trained = labels.detach().cpu() != IGNORE_INDEX
    else:
        trained = real.clone()
    return {"document": document, "trained": trained & real, "real": real}


def token_batch_lines(batch: Mapping[str, Any], image_token_id: int | None = None) -> list[str]:
    """The header's statistics of a token batch: rows, real / trained / padding tokens,
    documents (pieces), images."""
    layout = token_layout(batch)
    document, real, trained = layout["document"], layout["real"], layout["trained"]
    rows, width = document.shape
    total = max(rows * width, 1)
    n_real, n_trained = int(real.sum()), int(trained.sum())
    starts = torch.ones_like(real)
    starts[:, 1:] = document[:, 1:] != document[:, :-1]
    pieces = int((starts & real).sum())
    packed = "cu_seqlens" in batch or "document_ids" in batch
    kind = f"packed, {pieces} document pieces" if packed else "padded, one sequence a row"
    lines = [
        f"{rows} rows x {width} tokens ({kind}): {n_real:,} real ({n_real / total:.1%}), "
        f"{n_trained:,} trained ({n_trained / max(n_real, 1):.1%} of the real ones), "
        f"{total - n_real:,} padding ({(total - n_real) / total:.1%})",
    ]
    per_row = real.sum(1).float()
    line = (
        f"real tokens per row: min {int(per_row.min())}, mean {float(per_row.mean()):.1f}, "
        f"max {int(per_row.max())}"
    )
    if "max_seqlen" in batch:
        line += f"; longest piece (max_seqlen) {int(batch['max_seqlen'])}"
    lines.append(line)
    images = _images(batch)
    if image_token_id is not None:
        n = int((batch["input_ids"] == image_token_id).sum())
        lines.append(f"image tokens (id {image_token_id}): {n:,}")
    if images is not None:
        name, pixels = images
        lines.append(f"'{name}': {pixels.shape[0]} images {tuple(pixels.shape[1:])}, drawn below")
    return lines


def _images(batch: Mapping[str, Any]) -> tuple[str, torch.Tensor] | None:
    for name in ("pixel_values", "image", "images"):
        value = batch.get(name)
        if isinstance(value, torch.Tensor) and value.dim() == 4 and value.shape[1] in (1, 3):
            return name, value
    return None


def _runs(values: torch.Tensor) -> list[tuple[int, int, int]]:
    """``(value, begin, count)`` of each run of equal values of a 1-D tensor."""
    found, counts = torch.unique_consecutive(values, return_counts=True)
    begins = (torch.cumsum(counts, 0) - counts).tolist()
    return list(zip(found.tolist(), begins, counts.tolist(), strict=True))


def plot_token_batch(
    batch: Mapping[str, Any],
    path: str | os.PathLike[str],
    title: str | Sequence[str] | None = None,
    extra_lines: Sequence[str] | None = None,
    *,
    image_token_id: int | None = None,
    max_rows: int = 64,
    max_images: int = 32,
) -> Path:
    """Writes a PNG of a token batch's rows (see the module docstring).

    Args:
        batch: A dict with 2-D ``input_ids`` and any of ``attention_mask``, ``labels``,
            ``completion_mask``, ``document_ids``, ``position_ids``, ``pixel_values`` /
            ``image``.
        path: The PNG to write.
        title: The first line(s) of the header (default: the batch's shape and kind).
        extra_lines: More header lines (e.g. a split's fill per epoch).
        image_token_id: The id of image positions, drawn as ticks (None: none drawn).
        max_rows: Rows drawn at most (the first ones).
        max_images: Images drawn at most under the rows.

    Returns:
        The path written.

    Raises:
        ValueError: ``batch`` has no 2-D ``input_ids``.
    """
    if not is_token_batch(batch):
        raise ValueError("plot_token_batch needs a dict whose 'input_ids' are (rows, tokens).")
    layout = token_layout(batch)
    document, trained = layout["document"], layout["trained"]
    ids = batch["input_ids"].detach().cpu()
    positions = batch.get("position_ids")
    packed = isinstance(batch.get("document_ids"), torch.Tensor)
    rows, width = document.shape
    shown = min(rows, max_rows)
    titles = [title] if isinstance(title, str) else list(title or [])
    if not titles:
        titles = [f"one batch of {rows} rows of token ids"]
    legend = (
        "colours: " + ("documents" if packed else "one sequence a row") + "; full colour: "
        "trained tokens (the loss's), pale: not trained; grey: padding"
        + ("; black ticks: image tokens" if image_token_id is not None else "")
        + ("; notches: a piece continued across rows" if packed else "")
    )
    lines = [*titles, *token_batch_lines(batch, image_token_id), legend, *(extra_lines or [])]
    images = _images(batch)
    tiles = None
    if images is not None:
        from torchvision.utils import make_grid

        from datamodules.tools.tiles import grid_tiles

        small = grid_tiles(images[1][:max_images], max_images, max_tile=96)
        tiles = make_grid(small, nrow=min(len(small), 16), padding=2, pad_value=255)
    left, right, plot_w = 60, 20, max(600, min(1400, width * 4))
    top = 16 + 17 * len(lines) + 10
    rows_h = shown * 18
    images_h = 0 if tiles is None else tiles.shape[1] + 20
    figure_w = max(left + plot_w + right, 0 if tiles is None else tiles.shape[2] + 20)
    figure = new_figure(figure_w, top + rows_h + 50 + images_h)
    header(figure, lines)
    ax = add_axes(figure, left, top, left + plot_w, top + rows_h)
    notches: dict[str, list[tuple[int, int]]] = {">": [], "<": []}
    for r in range(shown):
        ax.broken_barh([(0, width)], (r - 0.4, 0.8), facecolors=PAD_GREY)
        pieces = [p for p in _runs(document[r]) if p[0] >= 0]
        colours = [COLOURS[doc % len(COLOURS)] for doc, _, _ in pieces]
        ax.broken_barh(
            [(b, n) for _, b, n in pieces], (r - 0.4, 0.8), facecolors=colours, alpha=PALE
        )
        key = torch.where(trained[r], document[r], torch.full_like(document[r], -1))
        runs = [p for p in _runs(key) if p[0] >= 0]
        ax.broken_barh(
            [(b, n) for _, b, n in runs],
            (r - 0.4, 0.8),
            facecolors=[COLOURS[doc % len(COLOURS)] for doc, _, _ in runs],
        )
        ax.broken_barh(  # the gaps between documents
            [(b, 0.0001) for _, b, _ in pieces[1:]], (r - 0.4, 0.8), edgecolor="white", lw=1.2
        )
        if image_token_id is not None:
            where = (ids[r] == image_token_id).nonzero().flatten().tolist()
            if where:
                ax.plot(where, [r + 0.42] * len(where), ls="none", marker="|", color="k", ms=4)
        if packed and isinstance(positions, torch.Tensor):
            notches[">"] += [(b, r) for _, b, _ in pieces if int(positions[r, b]) != 0]
            if pieces and r + 1 < rows:
                doc, b, n = pieces[-1]
                if b + n == width and int(document[r + 1, 0]) == doc:
                    notches["<"].append((width, r))
    for marker, where in notches.items():
        if where:
            x, y = zip(*where, strict=True)
            ax.plot(x, y, ls="none", marker=marker, color="0.1", ms=5, clip_on=False)
    ax.set_xlim(0, width)
    ax.set_ylim(shown - 0.5, -0.5)
    ax.set_yticks(range(shown), [f"row {r}" for r in range(shown)], fontsize=7)
    ax.set_xlabel("token position" + (f" ({rows - shown} more rows not drawn)" * (shown < rows)))
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if tiles is not None:  # figimage counts from the bottom left, in pixels
        figure.figimage(tiles.permute(1, 2, 0).numpy(), xo=10, yo=10, origin="upper")
    return save_figure(figure, path)
