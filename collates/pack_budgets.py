"""Pack plans under two budgets: tokens per row and images per batch (vision-language models).

A record of a conversation about images holds ``tokens`` sequence positions (its text and the
image tokens its placeholders expand to) and ``images`` images. Rows hold at most
``seq_length`` tokens; a batch holds at most ``batch_size`` rows and at most ``max_images``
images, which is what the vision encoder must hold at once. Each record stays whole in one row.

* :func:`budget_plan`: best fit over both budgets. Batches are filled one at a time, row by
  row; each step adds the record that fits the row's tokens and the batch's images and keeps
  the batch's two remaining budgets most balanced, larger records first (a bin-centric
  heuristic for two-dimensional bin packing). Best-fit decreasing on tokens alone segregates:
  the long records fill rows with few images, the short ones image-bound rows with few tokens.
* :func:`first_fit_plan`: the common approach, for comparison: first fit on tokens alone in
  the order given (a row takes a record while tokens and ``max_images`` allow), then batches
  cut from consecutive rows where the next row would pass ``batch_size`` or ``max_images``.

A record over either budget alone (``tokens > seq_length`` or ``images > max_images``) is not
placed: both plans return it in :attr:`BudgetPlan.over` for the caller's overlong policy. The
plans depend only on the counts, their order, ``pool`` and ``seed``, so a DataLoader worker can
recompute one. :attr:`BudgetPlan.token_efficiency` and :attr:`BudgetPlan.image_efficiency`
are the two figures to report.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from collates._checks import check_int
from collates.pack_plan import POOL_DOCUMENTS, PackPlan

__all__ = ["BudgetPlan", "budget_plan", "first_fit_plan"]

_SHIFT = 32  # sorted keys: space left << 32 | row
_MASK = (1 << _SHIFT) - 1


@dataclass(frozen=True)
class BudgetPlan:
    """Rows of whole records grouped into batches under two budgets.

    Attributes:
        rows: The rows (:class:`~collates.pack_plan.PackPlan`: one piece per record, ``doc`` its
            position in the counts given, ``start`` 0), batch after batch.
        batch_ptr: int64 (B + 1,): batch ``k`` holds rows ``batch_ptr[k]:batch_ptr[k + 1]``.
        row_images: int64 (R,): images per row.
        over: int64: the records over either budget, ascending; they are in no row.
        seq_length: Tokens per row.
        batch_size: Rows per batch, at most.
        max_images: Images per batch, at most.
    """

    rows: PackPlan
    batch_ptr: np.ndarray
    row_images: np.ndarray
    over: np.ndarray
    seq_length: int
    batch_size: int
    max_images: int

    @property
    def num_batches(self) -> int:
        """Batches of the plan."""
        return len(self.batch_ptr) - 1

    @property
    def num_images(self) -> int:
        """Images over all rows."""
        return int(self.row_images.sum())

    def batch_images(self) -> np.ndarray:
        """int64 (B,): images per batch."""
        return (
            np.add.reduceat(self.row_images, self.batch_ptr[:-1])
            if self.num_batches
            else (np.zeros(0, np.int64))
        )

    @property
    def token_efficiency(self) -> float:
        """Tokens per row slot: real tokens over ``num_batches * batch_size * seq_length``
        (a batch with fewer rows counts its missing rows as empty)."""
        slots = self.num_batches * self.batch_size * self.seq_length
        return self.rows.num_tokens / slots if slots else 0.0

    @property
    def image_efficiency(self) -> float:
        """Images per batch against ``max_images``: images over ``num_batches * max_images``."""
        slots = self.num_batches * self.max_images
        return self.num_images / slots if slots else 0.0


def _counts(name: str, values: np.ndarray, minimum: int) -> np.ndarray:
    raw = np.asarray(values)
    if raw.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {raw.shape}.")
    if len(raw) and not np.issubdtype(raw.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {raw.dtype}.")
    out = raw.astype(np.int64)
    if len(out) and int(out.min()) < minimum:
        i = int(np.argmin(out))
        raise ValueError(f"{name} must be >= {minimum}: record {i} has {int(out[i])}.")
    return out


def _inputs(
    tokens: np.ndarray,
    images: np.ndarray,
    seq_length: int,
    batch_size: int,
    max_images: int,
    pool: int | None,
    seed: int | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Checked counts, the records that fit (positions) and those over a budget."""
    check_int(seq_length, "seq_length", 1)
    check_int(batch_size, "batch_size", 1)
    check_int(max_images, "max_images", 1)
    check_int(pool, "pool", 1, allow_none=True)
    check_int(seed, "seed", 0, allow_none=True)
    tokens = _counts("tokens", tokens, 1)
    images = _counts("images", images, 0)
    if len(tokens) != len(images):
        raise ValueError(
            f"tokens and images must have one count per record, got {len(tokens)} and "
            f"{len(images)}."
        )
    over = (tokens > seq_length) | (images > max_images)
    return tokens, images, np.flatnonzero(~over), np.flatnonzero(over)


def _two_budget_pool(
    tokens: list[int], images: list[int], seq_length: int, batch_size: int, max_images: int
) -> tuple[np.ndarray, list[int]]:
    """Fills one pool's batches one at a time, row by row.

    Each step looks, for each image count that the batch still has room for, at the longest
    record of that count that fits the row, and takes the one that scores best: its size
    (tokens and images, each over the batch's expected use) minus twice the imbalance it
    leaves between the batch's two remaining budgets. The expected use is the pool's tokens
    and images spread over its estimated batch count, ``max(tokens / (batch_size *
    seq_length), images / max_images)``, so the budget that binds overall is the one filled.

    Returns:
        Each record's row, and each row's batch (rows numbered in opening order).
    """
    # by_count[c]: sorted keys (tokens << 32 | record) of the records with c images left.
    by_count: list[list[int]] = [[] for _ in range(max_images + 1)]
    for k, (need, pics) in enumerate(zip(tokens, images, strict=True)):
        by_count[pics].append((need << _SHIFT) | k)
    for keys in by_count:
        keys.sort()
    present = [c for c, keys in enumerate(by_count) if keys]  # the counts left, ascending
    capacity = batch_size * seq_length
    batches_needed = max(sum(tokens) / capacity, sum(images) / max_images, 1e-9)
    use_t = max(sum(tokens) / batches_needed, 1.0)  # expected tokens of a batch
    use_i = max(sum(images) / batches_needed, 1e-9)  # expected images of a batch
    spare_t, spare_i = capacity - use_t, max_images - use_i
    row_of = np.empty(len(tokens), dtype=np.int64)
    row_batch: list[int] = []
    left, batch = len(tokens), -1
    while left:
        batch += 1
        room, rows_in = max_images, 0
        while rows_in < batch_size and left:
            free, row, placed = seq_length, len(row_batch), False
            while True:
                # The batch's remaining budgets, over its expected use.
                rest_t = (free + (batch_size - rows_in - 1) * seq_length - spare_t) / use_t
                rest_i = (room - spare_i) / use_i
                probe = (free << _SHIFT) | _MASK
                best, best_c, best_at = 0.0, -1, 0
                for c in present:
                    if c > room:
                        break
                    keys = by_count[c]
                    at = bisect.bisect_right(keys, probe) - 1
                    if at >= 0:
                        a, b = (keys[at] >> _SHIFT) / use_t, c / use_i
                        score = a + b - 2.0 * abs((rest_t - a) - (rest_i - b))
                        if best_c < 0 or score > best:
                            best, best_c, best_at = score, c, at
                if best_c < 0:
                    break
                key = by_count[best_c].pop(best_at)
                if not by_count[best_c]:
                    present.remove(best_c)
                row_of[key & _MASK] = row
                free -= key >> _SHIFT
                room -= best_c
                left -= 1
                placed = True
            if not placed:
                break
            row_batch.append(batch)
            rows_in += 1
    return row_of, row_batch


def _assemble(
    tokens: np.ndarray,
    images: np.ndarray,
    doc: np.ndarray,
    row: np.ndarray,
    row_batch: np.ndarray,
    over: np.ndarray,
    sizes: tuple[int, int, int],
    seed: int | None,
) -> BudgetPlan:
    """The plan from each placed record's row and each row's batch (rows numbered globally)."""
    num_rows = len(row_batch)
    num_batches = int(row_batch.max()) + 1 if num_rows else 0
    # Rows batch after batch (in opening order within a batch); batches shuffled by seed.
    batch_rank = np.arange(num_batches, dtype=np.int64)
    if seed is not None and num_batches:
        batch_rank[np.random.default_rng(seed).permutation(num_batches)] = batch_rank.copy()
    row_order = np.lexsort((np.arange(num_rows), batch_rank[row_batch]))
    new_row = np.empty(num_rows, dtype=np.int64)
    new_row[row_order] = np.arange(num_rows, dtype=np.int64)
    row = new_row[row] if len(row) else row
    # Within a row: longest first, ties in the order given.
    by_length = np.lexsort((doc, -tokens[doc], row))
    doc, row = doc[by_length], row[by_length]
    row_ptr = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=num_rows), out=row_ptr[1:])
    batch_ptr = np.zeros(num_batches + 1, dtype=np.int64)
    np.cumsum(np.bincount(batch_rank[row_batch], minlength=num_batches), out=batch_ptr[1:])
    row_images = np.bincount(row, weights=images[doc], minlength=num_rows).astype(np.int64)
    plan = PackPlan(doc, np.zeros(len(doc), np.int64), tokens[doc], row_ptr)
    return BudgetPlan(plan, batch_ptr, row_images, over, *sizes)


def budget_plan(
    tokens: np.ndarray,
    images: np.ndarray,
    *,
    seq_length: int,
    batch_size: int,
    max_images: int,
    pool: int | None = POOL_DOCUMENTS,
    seed: int | None = None,
) -> BudgetPlan:
    """Packs whole records into rows and batches by best fit over both budgets.

    Within pools of consecutive records (the order given), batches are filled one at a time,
    row by row. For each image count the batch still has room for, the longest record of that
    count that fits the row is a candidate; the step takes the candidate whose tokens and
    images (each over the batch's expected use: the pool's totals over its estimated batch
    count) are largest less twice the imbalance it leaves between the batch's two remaining
    budgets. A row closes when nothing fits it, a batch when its rows are used or its next row
    takes nothing. Rows hold their records longest first. About 5 µs a record with 1-3
    images a record (the placement loop is Python; a step bisects one sorted list per image
    count still present).

    Example:
        >>> plan = budget_plan([5, 3, 4, 2], [2, 0, 1, 1], seq_length=8, batch_size=1,
        ...                    max_images=3)
        >>> plan.rows.doc.tolist(), plan.rows.row_ptr.tolist(), plan.row_images.tolist()
        ([0, 1, 2, 3], [0, 2, 4], [2, 2])

    Args:
        tokens: Tokens per record (>= 1), image tokens included, in order.
        images: Images per record (>= 0).
        seq_length: Tokens per row.
        batch_size: Rows per batch, at most.
        max_images: Images per batch, at most.
        pool: Consecutive records packed together (None: all of them).
        seed: Shuffles the order of the batches (None: the order they were opened, which puts
            the longest records first).

    Returns:
        The plan; records over either budget are in :attr:`BudgetPlan.over`, in no row.

    Raises:
        TypeError: If a size, ``pool`` or ``seed`` is not an int, or the counts not integers.
        ValueError: If a size is below 1, a count below its minimum, or the counts' lengths
            differ.
    """
    tokens, images, keep, over = _inputs(
        tokens, images, seq_length, batch_size, max_images, pool, seed
    )
    size = len(keep) if pool is None else pool
    docs, rows, batches = [], [], []
    row_base = batch_base = 0
    for lo in range(0, len(keep), max(size, 1)):
        members = keep[lo : lo + size]
        row_of, batch_of = _two_budget_pool(
            tokens[members].tolist(), images[members].tolist(), seq_length, batch_size, max_images
        )
        docs.append(members)
        rows.append(row_of + row_base)
        batches.append(np.asarray(batch_of, dtype=np.int64) + batch_base)
        row_base += len(batch_of)
        batch_base = int(batches[-1].max()) + 1
    empty = np.zeros(0, np.int64)
    return _assemble(
        tokens,
        images,
        np.concatenate(docs) if docs else empty,
        np.concatenate(rows) if rows else empty,
        np.concatenate(batches) if batches else empty,
        over,
        (seq_length, batch_size, max_images),
        seed,
    )


def first_fit_plan(
    tokens: np.ndarray,
    images: np.ndarray,
    *,
    seq_length: int,
    batch_size: int,
    max_images: int,
    pool: int | None = POOL_DOCUMENTS,
    seed: int | None = None,
) -> BudgetPlan:
    """First fit on tokens alone, the common approach, made to respect the image budget.

    Within pools, each record (in the order given) goes into the first open row with room for
    its tokens and with at most ``max_images`` images after it (else a new row); then batches
    take consecutive rows until the next would pass ``batch_size`` rows or ``max_images``
    images. Arguments, result and errors as :func:`budget_plan`'s.
    """
    tokens, images, keep, over = _inputs(
        tokens, images, seq_length, batch_size, max_images, pool, seed
    )
    size = len(keep) if pool is None else pool
    row = np.empty(len(keep), dtype=np.int64)
    row_images: list[int] = []
    base = 0
    for lo in range(0, len(keep), max(size, 1)):
        members = keep[lo : lo + size]
        free = np.full(len(members), seq_length, dtype=np.int64)
        pics = np.zeros(len(members), dtype=np.int64)
        opened = 0
        for k, (need, count) in enumerate(
            zip(tokens[members].tolist(), images[members].tolist(), strict=True)
        ):
            fits = (free[:opened] >= need) & (pics[:opened] <= max_images - count)
            at = int(np.argmax(fits)) if opened else 0
            if not opened or not fits[at]:
                at = opened
                opened += 1
            free[at] -= need
            pics[at] += count
            row[lo + k] = base + at
        row_images.extend(pics[:opened].tolist())
        base += opened
    # Batches of consecutive rows, cut where the next row would pass either batch budget.
    row_batch = np.empty(base, dtype=np.int64)
    batch, rows_in, pics_in = -1, batch_size, 0
    for r, count in enumerate(row_images):
        if rows_in == batch_size or pics_in + count > max_images:
            batch, rows_in, pics_in = batch + 1, 0, 0
        row_batch[r] = batch
        rows_in += 1
        pics_in += count
    return _assemble(
        tokens, images, keep, row, row_batch, over, (seq_length, batch_size, max_images), seed
    )
