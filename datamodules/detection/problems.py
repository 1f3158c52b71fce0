"""How a format parser reports a bad annotation: raised, or kept and counted under skip.

Every message names the file and the place in it (an annotation id, a line, an object), as
``"coco.json: annotation id 7: category_id 5 is not among the categories [1, 3]"``.
"""

from __future__ import annotations

__all__ = ["AnnotationError", "Problems"]


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
