"""Images as the RGB uint8 tiles the inspect pictures draw: the image grids of
:mod:`~datamodules.tools.pictures` and the images beside a token batch in
:mod:`~datamodules.tools.token_pictures` both use them.
"""

from __future__ import annotations

import math

import torch

__all__ = ["grid_tiles", "to_uint8_images"]


def to_uint8_images(images: torch.Tensor) -> torch.Tensor:
    """uint8 images as they are; others scaled to [0, 1] (if outside it), then to 0-255."""
    if images.dtype == torch.uint8:
        return images
    x = images.detach().float()
    if x.numel() and (x.min() < 0 or x.max() > 1):
        x = (x - x.min()) / (x.max() - x.min()).clamp_min(1e-12)
    return (x.clamp(0, 1) * 255).round().to(torch.uint8)


def grid_tiles(images: torch.Tensor, max_images: int = 64, max_tile: int = 160) -> torch.Tensor:
    """The RGB uint8 tiles of :func:`plot_image_grid`: images smaller than 64 pixels enlarged
    (nearest neighbour, by a whole factor), larger than ``max_tile`` shrunk (antialiased)."""
    from torchvision.transforms.v2.functional import resize

    if images.dim() != 4 or images.shape[1] not in (1, 3):
        raise ValueError(f"images of shape {tuple(images.shape)}: expected (N, 1 or 3, H, W).")
    tiles = to_uint8_images(images[:max_images].detach().cpu())
    tiles = tiles.expand(-1, 3, -1, -1) if tiles.shape[1] == 1 else tiles
    h, w = tiles.shape[-2:]
    scale = max(1, math.ceil(64 / max(1, min(h, w))))
    if scale > 1:
        tiles = tiles.repeat_interleave(scale, dim=-2).repeat_interleave(scale, dim=-1)
        h, w = h * scale, w * scale
    if max(h, w) > max_tile:
        shrink = max_tile / max(h, w)
        size = [max(1, round(h * shrink)), max(1, round(w * shrink))]
        tiles = resize(tiles, size, antialias=True)
    return tiles.contiguous()
