"""Tests for collates.image_placeholders: the expansion against transformers' LlavaProcessor."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from collates.image_placeholders import add_image_placeholder, expand_image_placeholders

transformers = pytest.importorskip("transformers")

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' }}"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] + '<|im_end|>' }}"
    "{% endgeneration %}{% else %}{{ m['content'] + '<|im_end|>' }}{% endif %}{{ '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
PATCH, CROP = 7, 28
IMAGE_TOKENS = (CROP // PATCH) ** 2  # + 1 CLS - 1 under the "default" strategy


@pytest.fixture(scope="module")
def tokenizer() -> transformers.PreTrainedTokenizerFast:
    words = [
        "which",
        "digit",
        "is",
        "this",
        "the",
        "left",
        "one",
        "larger",
        "right",
        "two",
        "three",
        "seven",
        "zero",
    ]
    texts = [" ".join(words[(i * 5 + j) % len(words)] for j in range(9)) for i in range(200)]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator(
        texts,
        trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
    )
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, chat_template=CHATML, pad_token="<pad>"
    )
    tok.add_special_tokens({"additional_special_tokens": ["<image>", "<|im_start|>", "<|im_end|>"]})
    return tok


@pytest.fixture(scope="module")
def processor(tokenizer: transformers.PreTrainedTokenizerFast) -> transformers.LlavaProcessor:
    image_processor = transformers.CLIPImageProcessor(
        size={"shortest_edge": CROP}, crop_size={"height": CROP, "width": CROP}
    )
    return transformers.LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHATML,
    )


def images(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(n)
    return [rng.integers(0, 256, (30 + 4 * k, 40, 3), dtype=np.uint8) for k in range(n)]


CONVERSATIONS = {
    1: [
        {"role": "user", "content": "which digit is this"},
        {"role": "assistant", "content": "seven"},
    ],
    2: [
        {"role": "system", "content": "two three"},
        {"role": "user", "content": "<image> the left one <image> the right one: which larger"},
        {"role": "assistant", "content": "the left one"},
        {"role": "user", "content": "which digit is the right one"},
        {"role": "assistant", "content": "zero"},
    ],
}


@pytest.mark.parametrize("n", [1, 2])
def test_the_expansion_is_the_llava_processors(n, tokenizer, processor) -> None:
    messages = add_image_placeholder(CONVERSATIONS[n])
    assert sum(m["content"].count("<image>") for m in messages) == n
    rendered = tokenizer.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, trained = rendered["input_ids"], np.asarray(rendered["assistant_masks"], dtype=bool)
    placeholder = tokenizer.convert_tokens_to_ids("<image>")
    assert ids.count(placeholder) == n  # one id per placeholder
    out = expand_image_placeholders(
        ids, trained, placeholder_id=placeholder, image_tokens=IMAGE_TOKENS, num_images=n
    )
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    theirs = processor(images=images(n), text=text, return_tensors="np")
    assert theirs["pixel_values"].shape == (n, 3, CROP, CROP)
    assert out.input_ids.tolist() == theirs["input_ids"][0].tolist()
    assert out.input_ids.dtype == np.int32
    # The image positions, block by block in placeholder order, carry no loss.
    image_at = np.flatnonzero(out.input_ids == processor.image_token_id)
    blocks = np.concatenate([np.arange(s, s + IMAGE_TOKENS) for s in out.image_starts])
    assert image_at.tolist() == blocks.tolist()
    assert len(image_at) == n * IMAGE_TOKENS
    assert not out.trained[image_at].any()
    # Elsewhere the mask is the renderer's, shifted past the blocks.
    others = np.setdiff1d(np.arange(len(out.input_ids)), image_at)
    assert out.trained[others].tolist() == trained[np.asarray(ids) != placeholder].tolist()
    assert out.trained.sum() == trained.sum() > 0


def test_placeholders_are_images_in_order() -> None:
    ids = [1, 7, 2, 7, 3, 7]
    out = expand_image_placeholders(
        ids, [True] * 6, placeholder_id=7, image_tokens=2, image_token_id=9, num_images=3
    )
    assert out.input_ids.tolist() == [1, 9, 9, 2, 9, 9, 3, 9, 9]
    assert out.trained.tolist() == [True, False, False, True, False, False, True, False, False]
    assert out.image_starts.tolist() == [1, 4, 7]


def test_no_placeholder_no_image() -> None:
    out = expand_image_placeholders([4, 5], [False, True], placeholder_id=7, image_tokens=3)
    assert out.input_ids.tolist() == [4, 5]
    assert out.trained.tolist() == [False, True]
    assert out.image_starts.tolist() == []


def test_a_placeholder_count_that_differs_names_both_counts() -> None:
    with pytest.raises(ValueError, match=r"2 image placeholder\(s\).*but 3 image\(s\)"):
        expand_image_placeholders(
            [7, 1, 7], [False] * 3, placeholder_id=7, image_tokens=4, num_images=3
        )


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"image_tokens": 0}, ValueError, "image_tokens=0 is not accepted: use an int >= 1"),
        ({"image_tokens": 2.0}, TypeError, "image_tokens=2.0 is not accepted: use an int >= 1"),
        (
            {"placeholder_id": "<image>"},
            TypeError,
            "placeholder_id='<image>' is not accepted: use an int >= 0",
        ),
        ({"num_images": -1}, ValueError, "num_images=-1 is not accepted: use an int >= 0 or None"),
    ],
)
def test_bad_arguments(kwargs, error, match) -> None:
    args = {"placeholder_id": 7, "image_tokens": 2, **kwargs}
    with pytest.raises(error, match=match):
        expand_image_placeholders([1, 7], [False, True], **args)


def test_lengths_that_differ_are_refused() -> None:
    with pytest.raises(ValueError, match=r"shapes \(2,\) and \(3,\)"):
        expand_image_placeholders([1, 7], [True] * 3, placeholder_id=7, image_tokens=2)


class TestAddPlaceholder:
    def test_before_the_first_user_message(self) -> None:
        messages = [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "which digit"},
            {"role": "user", "content": "and this"},
        ]
        out = add_image_placeholder(messages, "<img>", count=2)
        assert [m["content"] for m in out] == ["be brief", "<img><img>which digit", "and this"]
        assert messages[1]["content"] == "which digit"  # not changed in place

    def test_a_conversation_with_placeholders_is_left_as_it_is(self) -> None:
        messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b <image>"}]
        assert add_image_placeholder(messages) == messages

    def test_no_user_message(self) -> None:
        with pytest.raises(ValueError, match=r"no user message.*\['system', 'assistant'\]"):
            add_image_placeholder(
                [{"role": "system", "content": "x"}, {"role": "assistant", "content": "y"}]
            )

    def test_content_that_is_not_a_string(self) -> None:
        with pytest.raises(TypeError, match="message 0 has a content of type list"):
            add_image_placeholder([{"role": "user", "content": [{"type": "image"}]}])

    def test_an_empty_image_token(self) -> None:
        with pytest.raises(ValueError, match="image_token must be a non-empty string"):
            add_image_placeholder([{"role": "user", "content": "x"}], "")
