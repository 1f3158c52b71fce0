"""Image placeholders of conversations about images: where each image's tokens go.

Hugging Face's LLaVA convention: the text marks each image with a placeholder (``"<image>"``,
added to the tokenizer as one special token, so it renders as one id); each placeholder becomes
``image_tokens`` copies of the image token's id, the k-th placeholder is the k-th image, and the
model scatters its image features into the positions where ``input_ids == image_token_id``.

* :func:`add_image_placeholder`: before rendering, a conversation without a placeholder gets
  one at the start of the first user message's content.
* :func:`expand_image_placeholders`: after rendering (token ids and the trained mask of a chat
  renderer), each placeholder id becomes ``image_tokens`` image ids with no loss on them; the
  result also gives where each image's block starts, in placeholder order.

Both are pure (nothing is changed in place) and need only ids and messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from collates._checks import check_int

__all__ = ["ExpandedImages", "add_image_placeholder", "expand_image_placeholders"]


class ExpandedImages(NamedTuple):
    """A conversation's token ids with each image placeholder expanded.

    Attributes:
        input_ids: int32 (N,): the ids, each placeholder replaced by ``image_tokens`` copies of
            the image token's id.
        trained: bool (N,): the trained mask carried over; False at every image position.
        image_starts: int64 (K,): where image ``k``'s block starts (it spans ``image_tokens``
            positions), in placeholder order: the k-th placeholder is the k-th image.
    """

    input_ids: np.ndarray
    trained: np.ndarray
    image_starts: np.ndarray


def expand_image_placeholders(
    input_ids: Sequence[int] | np.ndarray,
    trained: Sequence[bool] | np.ndarray,
    *,
    placeholder_id: int,
    image_tokens: int,
    image_token_id: int | None = None,
    num_images: int | None = None,
) -> ExpandedImages:
    """Replaces each image placeholder id by ``image_tokens`` image ids, with no loss on them.

    Example:
        >>> out = expand_image_placeholders([5, 9, 6, 9], [False, False, True, True],
        ...                                 placeholder_id=9, image_tokens=3, num_images=2)
        >>> out.input_ids.tolist(), out.trained.tolist(), out.image_starts.tolist()
        ([5, 9, 9, 9, 6, 9, 9, 9], [False, False, False, False, True, False, False, False], [1, 5])

    Args:
        input_ids: The rendered token ids of one conversation.
        trained: Per id, whether it is trained (the same length).
        placeholder_id: The id the placeholder string renders as.
        image_tokens: Positions per image (the vision encoder's tokens per image).
        image_token_id: The id to repeat (None: ``placeholder_id``, as LLaVA does).
        num_images: The record's images: the placeholders must be as many (None: not checked).

    Returns:
        The expanded ids (int32), the mask, and each image's first position.

    Raises:
        TypeError: If an id or count is not an int.
        ValueError: If an id or count is out of range, the lengths differ, or the placeholders
            are not ``num_images`` (the message names both counts).
    """
    check_int(placeholder_id, "placeholder_id", 0)
    check_int(image_tokens, "image_tokens", 1)
    check_int(image_token_id, "image_token_id", 0, allow_none=True)
    check_int(num_images, "num_images", 0, allow_none=True)
    ids = np.asarray(input_ids)
    mask = np.asarray(trained, dtype=bool)
    if ids.ndim != 1 or mask.shape != ids.shape:
        raise ValueError(
            f"input_ids and trained must be 1-D of one length, got shapes {ids.shape} and "
            f"{mask.shape}."
        )
    at = ids == placeholder_id
    where = np.flatnonzero(at)
    if num_images is not None and len(where) != num_images:
        raise ValueError(
            f"{len(where)} image placeholder(s) (id {placeholder_id}) in the conversation but "
            f"{num_images} image(s) in the record: each image needs one placeholder."
        )
    repeats = np.where(at, image_tokens, 1)
    out_ids = np.repeat(ids.astype(np.int32), repeats)
    if image_token_id is not None and image_token_id != placeholder_id:
        out_ids[np.repeat(at, repeats)] = image_token_id
    out_mask = np.repeat(mask & ~at, repeats)
    starts = where + np.arange(len(where), dtype=np.int64) * (image_tokens - 1)
    return ExpandedImages(out_ids, out_mask, starts.astype(np.int64))


def add_image_placeholder(
    messages: Sequence[Mapping[str, Any]], image_token: str = "<image>", count: int = 1
) -> list[dict[str, Any]]:
    """The messages with ``count`` placeholders before the first user message's content, when
    no message's content holds ``image_token`` (else the messages unchanged, copied).

    Example:
        >>> add_image_placeholder([{"role": "user", "content": "Which digit?"}])
        [{'role': 'user', 'content': '<image>Which digit?'}]

    Args:
        messages: ``{"role", "content"}`` messages (content a string).
        image_token: The placeholder string.
        count: Placeholders to insert (1: one for the record, as LLaVA's data has it).

    Returns:
        A new list of new dicts; the input is not changed.

    Raises:
        TypeError: If ``image_token`` is not a string or a content is not a string.
        ValueError: If ``image_token`` is empty, ``count`` below 1, or placeholders are needed
            and no message has the role ``user``.
    """
    if not isinstance(image_token, str):
        raise TypeError(f"image_token must be a string, got {type(image_token).__name__}.")
    if not image_token:
        raise ValueError("image_token must be a non-empty string, got ''.")
    check_int(count, "count", 1)
    out = [dict(m) for m in messages]
    for i, m in enumerate(out):
        if not isinstance(m.get("content", ""), str):
            raise TypeError(
                f"message {i} has a content of type {type(m['content']).__name__}; "
                "add_image_placeholder expects strings."
            )
    if any(image_token in m.get("content", "") for m in out):
        return out
    for m in out:
        if m.get("role") == "user":
            m["content"] = image_token * count + m.get("content", "")
            return out
    roles = [m.get("role") for m in out]
    raise ValueError(f"no user message to hold the image placeholder (roles: {roles}).")
