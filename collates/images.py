"""Batching of ``uint8`` images: a list of ``(C, H, W)`` tensors -> one ``(B, C, H, W)`` tensor.

Images stay ``uint8`` on the way out of the DataLoader workers (a quarter of the bytes of
``float32`` through the worker queue, pinned memory and the host-to-device copy);
conversion to float and normalisation belong on the device, after the transfer.

Memory layout matters on the CPU side. Image decoders produce interleaved pixels
(``H, W, C`` in memory) and torchvision's uint8 resize is about twice as fast on that
layout, whose output keeps it. Stacking such images into a contiguous NCHW batch means a
transposing copy (about 80 us per 224x224 image with ``torch.stack``), whereas stacking
them into a ``torch.channels_last`` batch is a plain copy (about 7 us). A channels-last
batch is still a ``(B, C, H, W)`` tensor; ``.to(device)`` and ``.float()`` keep its layout
and convolutions accept it (cuDNN prefers it).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.data import get_worker_info

__all__ = ["check_uint8_image", "stack_uint8_images"]

_FORMATS = (torch.contiguous_format, torch.channels_last, torch.preserve_format)


def check_uint8_image(image: object, index: int, shape: tuple[int, ...] | None) -> None:
    """Checks that batch element ``index`` is a ``uint8`` ``(C, H, W)`` tensor of ``shape``.

    Args:
        image: The element.
        index: Its position in the batch (named in the error).
        shape: The shape every image of the batch must have (None: any 3-D shape).

    Raises:
        TypeError: ``image`` is not a ``uint8`` tensor.
        ValueError: It is not 3-D, or its shape differs from ``shape``.
    """
    if not isinstance(image, torch.Tensor):
        raise TypeError(
            f"stack_uint8_images() expects torch.uint8 tensors (C, H, W); image {index} is a "
            f"{type(image).__name__}"
        )
    if image.dtype != torch.uint8:
        raise TypeError(
            f"stack_uint8_images() expects torch.uint8 tensors (C, H, W); image {index} has "
            f"dtype {image.dtype}"
        )
    if image.ndim != 3:
        raise ValueError(
            f"stack_uint8_images() expects tensors of shape (C, H, W); image {index} has shape "
            f"{tuple(image.shape)}"
        )
    if shape is not None and tuple(image.shape) != shape:
        raise ValueError(
            f"cannot stack images of different shapes: image {index} has shape "
            f"{tuple(image.shape)} but image 0 has {shape}; resize or crop "
            f"every image to one size (e.g. Resize + CenterCrop) before batching"
        )


def stack_uint8_images(
    images: Sequence[torch.Tensor],
    *,
    memory_format: torch.memory_format = torch.contiguous_format,
) -> torch.Tensor:
    """Stack same-sized ``uint8`` images ``(C, H, W)`` into one batch ``(B, C, H, W)``.

    Any input layout is accepted; the copy is chosen for speed (``torch.stack`` when the
    inputs already have the target layout, numpy's strided copy, about twice as fast,
    when they need transposing). Inside a DataLoader worker the batch is written straight
    into shared memory, as ``default_collate`` does, so sending it to the main process
    costs no extra copy.

    Args:
        images: A non-empty sequence of CPU ``torch.uint8`` tensors of shape ``(C, H, W)``
            (``C`` is 3 for RGB), all of the same shape.
        memory_format: ``torch.contiguous_format`` (default: a contiguous NCHW batch),
            ``torch.channels_last`` (NHWC in memory; the fast choice when the images come
            from ``decode_image(..., channels_last=True)`` and uint8 resizing), or
            ``torch.preserve_format``: the layout of the first image (channels-last if its
            channels are interleaved, i.e. its channel stride is 1; contiguous otherwise),
            which makes the copy cheapest whatever the transforms did.

    Returns:
        A ``torch.uint8`` tensor of shape ``(len(images), C, H, W)`` in ``memory_format``
        (``torch.channels_last`` or ``torch.contiguous_format`` for ``preserve_format``).

    Raises:
        ValueError: ``images`` is empty, an image is not 3-D, or its shape differs from the
            first image's (the message names the index of the first such image and both
            shapes); or ``memory_format`` is not one of the three above.
        TypeError: An element is not a ``uint8`` tensor (the message names its index).
    """
    if memory_format not in _FORMATS:
        raise ValueError(
            f"memory_format must be torch.contiguous_format, torch.channels_last or "
            f"torch.preserve_format, got {memory_format}"
        )
    if len(images) == 0:
        raise ValueError("stack_uint8_images() needs at least one image, got an empty sequence")
    first = images[0]
    for i, image in enumerate(images):
        check_uint8_image(image, i, tuple(first.shape) if isinstance(first, torch.Tensor) else None)

    if memory_format is torch.preserve_format:
        channels_last = first.stride(0) == 1 and first.shape[0] > 1
    else:
        channels_last = memory_format is torch.channels_last
    batch = len(images)
    c, h, w = first.shape
    if get_worker_info() is not None:
        # As default_collate: allocate the batch in shared memory, so the worker -> main
        # process queue passes a handle instead of copying the batch into shm.
        storage = first._typed_storage()._new_shared(batch * first.numel(), device=first.device)
        flat = first.new(storage)
        out = flat.view(batch, h, w, c) if channels_last else flat.view(batch, c, h, w)
    else:
        shape = (batch, h, w, c) if channels_last else (batch, c, h, w)
        out = torch.empty(shape, dtype=torch.uint8, device=first.device)
    # `out` holds the batch in memory order: NHWC for channels_last, NCHW otherwise.
    views = [image.permute(1, 2, 0) for image in images] if channels_last else list(images)
    if first.device.type != "cpu" or all(v.is_contiguous() for v in views):
        torch.stack(views, out=out)
    else:
        target = out.numpy()
        for i, view in enumerate(views):
            target[i] = view.numpy()
    return out.permute(0, 3, 1, 2) if channels_last else out
