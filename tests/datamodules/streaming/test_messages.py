"""Batches grouped into messages: packed into one flat tensor and back, exactly."""

from __future__ import annotations

import torch

from datamodules.stream_engine.messages import (
    COPIED_BELOW,
    MESSAGE,
    interleave,
    messages,
    pack,
    unpack,
)


def example_batches() -> list:
    return [
        {"id": torch.arange(4) + 4 * k, "tokens": torch.randint(0, 9, (4, 300 + k)),
         "x": torch.rand(4, dtype=torch.float64), "half": torch.ones(2, 3, dtype=torch.bfloat16),
         "names": ["a", "b"], "pair": (torch.zeros(0, 5), 7), "none": None}
        for k in range(3)
    ]  # fmt: skip


def assert_equal(a, b) -> None:
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_equal(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_equal(x, y)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    else:
        assert a == b


def test_pack_then_unpack_gives_the_batches_back() -> None:
    batches = example_batches()
    packed = pack(batches)
    assert type(packed) is tuple  # (flat, layout): one tensor for the whole message
    back = unpack(packed)
    assert_equal(back, batches)
    tokens, ids = back[0]["tokens"], back[0]["id"]
    start = packed[0].data_ptr()  # a view of the message's flat bytes, not a copy
    assert start <= tokens.data_ptr() < start + packed[0].numel()
    assert ids.numel() * 8 < COPIED_BELOW and ids.untyped_storage().nbytes() == 32  # a copy


def test_what_cannot_be_packed_travels_as_it_is() -> None:
    grad = [{"w": torch.ones(3, requires_grad=True)}]
    strided = [{"t": torch.arange(12).view(3, 4).t()}]
    other = [{"t": torch.ones(2)}, object()]
    for batches in (grad, strided, other, [{"n": 1}], []):
        assert pack(batches) is batches


def test_messages_end_with_an_empty_last_one_and_interleave_keeps_the_order() -> None:
    a = [{"i": torch.tensor([k])} for k in range(0, 10, 2)]
    b = [{"i": torch.tensor([k])} for k in range(1, 8, 2)]
    sent_a, sent_b = list(messages(iter(a), 0)), list(messages(iter(b), 1))
    assert sent_a[-1] == (MESSAGE, 0, True, []) and not any(m[2] for m in sent_a[:-1])
    received = [sent_a[0], sent_b[0], sent_a[1], sent_b[1]]
    order = [int(batch["i"]) for batch in interleave(iter(received), 2)]
    assert order == [0, 1, 2, 3, 4, 5, 6, 7, 8]  # one from each worker in turn, then the rest
