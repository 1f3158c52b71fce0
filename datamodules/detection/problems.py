"""How a format parser reports a bad annotation: raised, or kept and counted under skip.

:func:`segmentation_problem` says what is wrong with a COCO segmentation (polygons or an RLE):
the check the COCO parsers and detection shards share.

Every message names the file and the place in it (an annotation id, a line, an object), as
``"coco.json: annotation id 7: category_id 5 is not among the categories [1, 3]"``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AnnotationError", "Problems", "segmentation_problem"]


class AnnotationError(ValueError):
    """A bad annotation, named with its file and place."""


class Problems:
    """Raises each problem (``on_error="raise"``) or records it (``"skip"``).

    Args:
        on_error: ``"raise"`` or ``"skip"``.
        skipped: The list that keeps ``(where, why)`` pairs under skip.
    """

    def __init__(self, on_error: str, skipped: list[tuple[str, str]]) -> None:
        self.on_error = on_error
        self.skipped = skipped

    def __call__(self, where: str, why: str) -> None:
        """Reports the problem ``why`` at ``where`` (a file, and a place in it)."""
        if self.on_error == "raise":
            raise AnnotationError(f"{where}: {why} (on_error='skip' leaves it out, counted)")
        self.skipped.append((where, why))


_NUMBERS = frozenset((int, float))


def segmentation_problem(segmentation: Any) -> str | None:
    """What is wrong with a COCO ``segmentation`` (polygons or an RLE), or None."""
    if segmentation is None or segmentation == []:
        return None
    if isinstance(segmentation, list):
        for k, polygon in enumerate(segmentation):
            # set(map(type, ...)) runs in C: a tenth of a check per value, on COCO's 860k.
            if not isinstance(polygon, list) or not set(map(type, polygon)) <= _NUMBERS:
                return f"polygon {k} is not a list of numbers"
            if len(polygon) % 2 or len(polygon) < 6:
                return (
                    f"polygon {k} has {len(polygon)} numbers; a polygon is x, y pairs of at "
                    "least 3 points (an even count, 6 or more)"
                )
        return None
    if isinstance(segmentation, dict):
        size, counts = segmentation.get("size"), segmentation.get("counts")
        sized = isinstance(size, list) and len(size) == 2
        if not (sized and all(isinstance(v, int) for v in size)):
            return f"RLE size {size!r} is not [height, width]"
        if not isinstance(counts, (str, list)):
            return f"RLE counts {type(counts).__name__} is neither a string nor a list"
        return None
    return f"segmentation {type(segmentation).__name__} is neither polygons nor an RLE"
