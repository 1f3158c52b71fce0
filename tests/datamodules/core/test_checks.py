"""The one set of argument checks: a wrong type raises TypeError, a wrong value ValueError, and
every message names the argument, the value and what is accepted."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from datamodules.core.checks import (
    check_bool,
    check_callable,
    check_choice,
    check_fraction,
    check_int,
    check_mean_std,
    check_number,
    check_on_error,
    check_path,
    check_size,
    check_string,
    int_mistake,
    rejected,
)
from tests import subprocesses

ROOT = Path(__file__).resolve().parents[3]

SIZE = "a number of bytes > 0 or a string such as '50GB', '512MB' or '8GiB'"
PACKING = {"when": " with packing=True", "note": "(tokens per row)"}
WORKERS = {"words": ("auto", "tune")}

#: (checker, positional arguments, keyword arguments, exception, the whole message).
BAD: list[tuple[Any, tuple, dict, type[Exception], str]] = [
    # ints: a bool, a float, a string or None is a wrong type; out of range a wrong value
    (check_int, (True, "batch_size", 1), {}, TypeError, "batch_size=True ...: use an int >= 1."),
    (check_int, (2.0, "batch_size", 1), {}, TypeError, "batch_size=2.0 ...: use an int >= 1."),
    (check_int, ("2", "batch_size", 1), {}, TypeError, "batch_size='2' ...: use an int >= 1."),
    (check_int, (None, "batch_size", 1), {}, TypeError, "batch_size=None ...: use an int >= 1."),
    (check_int, (0, "batch_size", 1), {}, ValueError, "batch_size=0 ...: use an int >= 1."),
    (check_int, (-1, "epoch", 0), {}, ValueError, "epoch=-1 ...: use an int >= 0."),
    (check_int, (2, "rank", 0, 1), {}, ValueError, "rank=2 ...: use an int in [0, 1]."),
    (check_int, (9, "level"), {"maximum": 3}, ValueError, "level=9 ...: use an int <= 3."),
    (check_int, (1.5, "seed"), {}, TypeError, "seed=1.5 ...: use an int."),
    (check_int, (0, "max_length", 1), {"allow_none": True}, ValueError,
     "max_length=0 ...: use an int >= 1 or None."),
    (check_int, ("many", "num_workers", 0), WORKERS, ValueError,
     "num_workers='many' ...: use an int >= 0, 'auto' or 'tune'."),
    (check_int, (1.5, "num_workers", 0), WORKERS, TypeError,
     "num_workers=1.5 ...: use an int >= 0, 'auto' or 'tune'."),
    (check_int, (True, "prefetch_factor", 1), {"allow_none": True, "words": ("auto",)}, TypeError,
     "prefetch_factor=True ...: use an int >= 1, None or 'auto'."),
    (check_int, (0, "seq_length", 1), PACKING, ValueError,
     "seq_length=0 ... with packing=True: use an int >= 1 (tokens per row)."),
    # numbers: a bool or a string is a wrong type; out of range (or NaN) a wrong value
    (check_number, ("1", "timeout"), {"above": 0}, TypeError, "timeout='1' ...: use a number > 0."),
    (check_number, (True, "weight"), {"above": 0}, TypeError, "weight=True ...: use a number > 0."),
    (check_number, (0, "timeout"), {"above": 0, "what": "a number of seconds"}, ValueError,
     "timeout=0 ...: use a number of seconds > 0."),
    (check_number, (-1, "repeat", 0), {"allow_none": True}, ValueError,
     "repeat=-1 ...: use a number >= 0 or None."),
    (check_number, (float("nan"), "weight"), {"above": 0}, ValueError,
     "weight=nan ...: use a number > 0."),
    (check_number, (5, "x", 0, 1), {}, ValueError, "x=5 ...: use a number in [0, 1]."),
    (check_fraction, (1.5, "threshold"), {}, ValueError,
     "threshold=1.5 ...: use a number in (0, 1)."),
    (check_fraction, (0, "threshold"), {}, ValueError, "threshold=0 ...: use a number in (0, 1)."),
    (check_fraction, (1.0, "tolerance"), {"zero": True}, ValueError,
     "tolerance=1.0 ...: use a number in [0, 1)."),
    (check_fraction, ("0.5", "threshold"), {}, TypeError,
     "threshold='0.5' ...: use a number in (0, 1)."),
    # flags: anything but True/False is a wrong type, an unknown word a wrong value
    (check_bool, (1, "shuffle"), {}, TypeError, "shuffle=1 ...: use True or False."),
    (check_bool, ("yes", "shuffle"), {}, TypeError, "shuffle='yes' ...: use True or False."),
    (check_bool, (None, "pin_memory"), {"words": ("auto",)}, TypeError,
     "pin_memory=None ...: use True, False or 'auto'."),
    (check_bool, ("yes", "pin_memory"), {"words": ("auto",)}, ValueError,
     "pin_memory='yes' ...: use True, False or 'auto'."),
    # choices: an unknown word is a wrong value, a non-string among words a wrong type
    (check_choice, ("up", "padding_side", ("left", "right")), {}, ValueError,
     "padding_side='up' ...: use 'left' or 'right'."),
    (check_choice, ("xml", "fmt", ("jsonl", "csv", "txt")), {"allow_none": True}, ValueError,
     "fmt='xml' ...: use 'jsonl', 'csv', 'txt' or None."),
    (check_choice, (1, "padding_side", ("left", "right")), {}, TypeError,
     "padding_side=1 ...: use 'left' or 'right'."),
    (check_choice, (3, "level", (1, 2)), {}, ValueError, "level=3 ...: use 1 or 2."),
    (check_on_error, ("ignore",), {}, ValueError, "on_error='ignore' ...: use 'raise' or 'skip'."),
    (check_on_error, (True,), {}, TypeError, "on_error=True ...: use 'raise' or 'skip'."),
    # names, callables, paths
    (check_string, ("", "source_key", "a field name or None"), {"allow_none": True}, ValueError,
     "source_key='' ...: use a field name or None."),
    (check_string, (3, "Source name"), {}, TypeError, "Source name=3 ...: use a non-empty string."),
    (check_callable, (3, "transform"), {}, TypeError, "transform=3 ...: use a callable or None."),
    (check_callable, (None, "fn"), {"allow_none": False}, TypeError,
     "fn=None ...: use a callable."),
    (check_path, (3, "root", "a folder path"), {}, TypeError, "root=3 ...: use a folder path."),
    (check_path, (None, "root"), {}, TypeError, "root=None ...: use a path."),
    # mean / std: not numbers is a wrong type; another count or a std <= 0 a wrong value
    (check_mean_std, ((0.5,), (1, 1, 1)), {}, ValueError,
     "mean=(0.5,) ...: use 3 numbers (R, G, B)."),
    (check_mean_std, ((0, 0, 0), (0, 0, 0)), {}, ValueError,
     "std=(0, 0, 0) ...: use 3 numbers > 0 (R, G, B)."),
    (check_mean_std, (0.5, (1, 1, 1)), {}, TypeError, "mean=0.5 ...: use 3 numbers (R, G, B)."),
    (check_mean_std, ("abc", (1, 1, 1)), {}, TypeError,
     "mean='abc' ...: use 3 numbers (R, G, B)."),
    (check_mean_std, ((0, 0, 0), (1, "1", 1)), {}, TypeError,
     "std=(1, '1', 1) ...: use 3 numbers > 0 (R, G, B)."),
    (check_mean_std, ((0, 0), (1, 1)), {"channels": 1}, ValueError,
     "mean=(0, 0) ...: use 1 numbers, one per channel."),
    # sizes in bytes: an int or a string; a float or a bool is a wrong type
    (check_size, (0, "cache_limit"), {}, ValueError, f"cache_limit=0 ...: use {SIZE}."),
    (check_size, ("lots", "max_bytes"), {}, ValueError, f"max_bytes='lots' ...: use {SIZE}."),
    (check_size, ("5 parsecs", "max_bytes"), {}, ValueError,
     f"max_bytes='5 parsecs' ...: use {SIZE}."),
    (check_size, (2.5, "max_bytes"), {}, TypeError, f"max_bytes=2.5 ...: use {SIZE}."),
    (check_size, (True, "cache_limit"), {"allow_none": True}, TypeError,
     f"cache_limit=True ...: use {SIZE} or None."),
    (check_size, (None, "max_bytes"), {}, TypeError, f"max_bytes=None ...: use {SIZE}."),
]  # fmt: skip


@pytest.mark.parametrize(
    ("check", "args", "kwargs", "error", "message"), BAD, ids=[m.split(" ...")[0] for *_, m in BAD]
)
def test_a_bad_value_raises_its_kind_naming_argument_value_and_what_is_accepted(
    check: Any, args: tuple, kwargs: dict, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        check(*args, **kwargs)
    assert type(raised.value) is error  # not a subclass standing in for the other kind
    assert str(raised.value) == message.replace(" ...", " is not accepted")


GOOD: list[tuple[Any, Any]] = [
    (lambda: check_int(3, "batch_size", 1), 3),
    (lambda: check_int(np.int64(3), "batch_size", 1), 3),
    (lambda: check_int(None, "max_length", 1, allow_none=True), None),
    (lambda: check_int("auto", "num_workers", 0, words=("auto", "tune")), "auto"),
    (lambda: check_int(1, "rank", 0, 1), 1),
    (lambda: check_number(0.5, "threshold", above=0, below=1), 0.5),
    (lambda: check_number(np.float32(2.0), "timeout", above=0), np.float32(2.0)),
    (lambda: check_fraction(0, "tolerance", zero=True), 0),
    (lambda: check_bool(False, "shuffle"), False),
    (lambda: check_bool("auto", "pin_memory", words=("auto",)), "auto"),
    (lambda: check_choice("skip", "on_error", ("raise", "skip")), "skip"),
    (lambda: check_choice(None, "fmt", ("jsonl",), allow_none=True), None),
    (lambda: check_on_error("raise"), "raise"),
    (lambda: check_string("label", "label_key"), "label"),
    (lambda: check_string("", "text_key", allow_empty=True), ""),
    (lambda: check_callable(len, "transform"), len),
    (lambda: check_path(Path("a/b"), "root"), "a/b"),
    (lambda: check_path(None, "val_root", allow_none=True), None),
    (lambda: check_mean_std([0.5, 0.5, 0.5], np.array([1, 2, 3])), ((0.5,) * 3, (1.0, 2.0, 3.0))),
    (lambda: check_size(123, "cache_limit"), 123),
    (lambda: check_size("50GB", "cache_limit"), 50 * 10**9),
    (lambda: check_size("512 MiB", "cache_limit"), 512 * 2**20),
    (lambda: check_size("1.5kb", "cache_limit"), 1500),
    (lambda: check_size(None, "cache_limit", allow_none=True), None),
]


@pytest.mark.parametrize(("call", "expected"), GOOD)
def test_an_accepted_value_is_returned(call: Any, expected: Any) -> None:
    value = call()
    assert value == expected and type(value) is type(expected)


def test_the_kind_of_mistake_is_one_rule() -> None:
    assert [int_mistake(v, 1) for v in (True, 2.0, "2", None, 0, 1)] == [
        TypeError, TypeError, TypeError, TypeError, ValueError, None,
    ]  # fmt: skip
    error = rejected("prefix", "a/b", "a file name prefix")
    assert type(error) is ValueError and str(error) == (
        "prefix='a/b' is not accepted: use a file name prefix."
    )


def test_the_checks_import_neither_torch_nor_lightning() -> None:
    # The shard CLI's arguments are checked here before anything heavy is imported.
    code = (
        "import sys, datamodules.core.checks, datamodules.shards.cli\n"
        "heavy = sorted(m for m in ('torch', 'lightning') if m in sys.modules)\n"
        "assert not heavy, heavy"
    )
    result = subprocesses.run([sys.executable, "-c", code], cwd=ROOT, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_the_names_that_moved_still_import() -> None:
    from datamodules.core import checks
    from datamodules.core.common_arguments import check_common_arguments
    from datamodules.core.loaders import WeakCall

    assert checks.WeakCall is WeakCall
    assert checks.check_common_arguments is check_common_arguments
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = checks.nothing


def test_every_message_has_one_form() -> None:
    form = re.compile(r"^\S+(?: \S+)?=.+ is not accepted(?: with .+)?: use .+\.$")
    for *_, message in BAD:
        assert form.match(message.replace(" ...", " is not accepted")), message
