"""Our mask on TRL's shipped templates equals transformers' mask on their ``_training`` twins.

TRL ships released chat templates with a ``_training`` twin that adds ``{% generation %}``
marks. On every pair that renders the same ids, our mask on the original (no marks) equals
transformers' ``assistant_masks`` on the twin, up to whitespace tokens at a turn's edges;
except where the twin also trains what the generation prompt writes (see ``DIFFERENT``).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from datamodules.conversations import ChatRenderer
from tests.datamodules.conversations.chat_tokenizers import (
    CONVERSATIONS,
    TRL_TEMPLATES,
    chat_tokenizer,
    transformers_mask,
    trl_template,
    words,
)

#: The pairs the contract names: same ids, same mask up to whitespace at the edges.
REQUIRED = (
    "llama3", "qwen2_5", "qwen3_instruct_2507", "phi3", "gemma3", "smolvlm", "idefics3",
    "cohere", "lfm2",
)  # fmt: skip
#: Twins that also train text the generation prompt writes (the role header, an empty think
#: block): the tokens of that text, which we leave untrained, by template.
DIFFERENT = {
    "deepseek_r1_distill": {"<｜Assistant｜>"},
    "deepseekv3": {"<｜Assistant｜>"},
    "gptoss": {"<|start|>", "assistant", "<|end|>"},
    "muse_glimmer": {"<|start|>", "assistant"},
    "nemotron_3_5_lightning": {"<think>"},
    "nemotron_3_nano": {"<think>"},
    "nemotron_3_super": {"<think>"},
    "nemotron_3_ultra": {"<think>"},
    "qwen3_5_nothink": {"<think>", "</think>"},
    "qwen3_5_think": {"<think>"},
    "qwen3_6": {"<think>"},
    "qwen3_8": {"<think>"},
}
PAIRS = sorted(
    p.name.removesuffix("_training.jinja") for p in TRL_TEMPLATES.glob("*_training.jinja")
)


@pytest.fixture(scope="module")
def tok():
    return chat_tokenizer(None)


def compare(
    tok, name: str, messages: list[dict]
) -> tuple[list[int], np.ndarray, np.ndarray] | None:
    """(ids, our mask on the original, transformers' mask on the twin), or None where the pair
    does not render the same ids (or the template refuses the conversation)."""
    original, twin = trl_template(name), trl_template(f"{name}_training")
    try:
        ids = tok.apply_chat_template(
            messages, chat_template=original, tokenize=True, return_dict=True
        )["input_ids"]
        want_ids, want = transformers_mask(tok, messages, twin)
    except Exception:  # noqa: BLE001 - a template that refuses this conversation
        return None
    if want_ids != ids:
        return None
    ours, trained = ChatRenderer(tok, chat_template=original).render_messages(messages)
    assert ours.tolist() == ids
    return ids, trained, want


def edge_whitespace_only(tok, ids, ours, theirs) -> bool:
    """Every token where the masks differ is whitespace next to a trained run's edge."""
    for i in np.flatnonzero(ours != theirs):
        if tok.decode([ids[i]]).strip():
            return False
        near = [j for j in (i - 1, i + 1) if 0 <= j < len(ids)]
        if not any(ours[j] or theirs[j] for j in near):
            return False
    return True


@pytest.mark.parametrize("name", REQUIRED)
def test_required_templates_match_their_twins(tok, name) -> None:
    for messages in CONVERSATIONS:
        found = compare(tok, name, messages)
        assert found is not None, f"{name}: the pair renders different ids"
        ids, ours, theirs = found
        assert ours.any()
        assert edge_whitespace_only(tok, ids, ours, theirs), name


@pytest.mark.parametrize("name", PAIRS)
def test_every_pair_with_the_same_ids_matches_or_differs_as_documented(tok, name) -> None:
    compared = 0
    for messages in CONVERSATIONS:
        found = compare(tok, name, messages)
        if found is None:
            continue
        compared += 1
        ids, ours, theirs = found
        if name not in DIFFERENT:
            assert edge_whitespace_only(tok, ids, ours, theirs), name
            continue
        # The twin trains more, never less: the documented tokens (and the block's whitespace).
        assert not (ours & ~theirs).any()
        more = np.flatnonzero(theirs & ~ours)
        extra = {tok.convert_ids_to_tokens(ids[i]) for i in more if tok.decode([ids[i]]).strip()}
        assert extra and extra <= DIFFERENT[name], (name, extra)
    if name in ("glm4moe", "llava_next"):  # GLM's twin renders other ids; LLaVA needs parts
        assert compared == 0
    else:
        assert compared > 0


def random_conversations(count: int, seed: int) -> list[list[dict]]:
    """Conversations whose texts start and end with spaces, newlines or nothing (or are
    empty): where masks go off by a token, at the edges of a turn."""
    rng = random.Random(seed)

    def text() -> str:
        edges = ["", " ", "\n", "\n\n", "  ", ".", "?\n"]
        return rng.choice(edges[:5]) + words(rng, 0, 8) + rng.choice(edges)

    out = []
    for _ in range(count):
        messages = [{"role": "system", "content": text()}] if rng.random() < 0.4 else []
        for _ in range(rng.randint(1, 3)):
            messages += [{"role": "user", "content": text()}]
            messages += [{"role": "assistant", "content": text()}]
        out.append(messages)
    return out


@pytest.mark.parametrize("name", REQUIRED)
def test_required_templates_match_on_random_conversations(tok, name) -> None:
    compared = 0
    for messages in random_conversations(25, seed=1):
        try:  # SmolVLM's and Idefics3's templates index content[0]: an empty one fails
            tok.apply_chat_template(messages, chat_template=trl_template(name), tokenize=False)
        except Exception:  # noqa: BLE001
            continue
        found = compare(tok, name, messages)
        assert found is not None, f"{name}: the pair renders different ids"
        ids, ours, theirs = found
        assert edge_whitespace_only(tok, ids, ours, theirs), (name, messages)
        compared += 1
    assert compared >= 15


TOOLS = [
    {"role": "user", "content": "what is two plus three"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2}}}],
    },
    {"role": "tool", "content": "5"},
    {"role": "assistant", "content": "five."},
]


@pytest.mark.parametrize("name", ["qwen2_5", "qwen3_instruct_2507", "llama3"])
def test_a_tool_call_turn_is_trained_as_the_twin_trains_it(tok, name) -> None:
    found = compare(tok, name, TOOLS)
    assert found is not None
    ids, ours, theirs = found
    assert edge_whitespace_only(tok, ids, ours, theirs)
    text = tok.decode([i for i, t in zip(ids, ours, strict=True) if t])
    assert text.endswith("five.<|im_end|>\n" if name != "llama3" else "five.<|eot_id|>")
    if name != "llama3":  # Llama 3's template writes no tool call it is not given tools for
        assert text.startswith('<tool_call>\n{"name": "add", "arguments": {"a": 2}}')


PARTS = [
    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what is this"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "a cat"}]},
]


@pytest.mark.parametrize(
    ("name", "trained"),
    [
        ("qwen2_5_vl", "a cat<|im_end|>\n"),
        ("qwen3_vl", "a cat<|im_end|>\n"),
        ("smolvlm", " a cat<end_of_utterance>\n"),
        ("idefics3", " a cat<end_of_utterance>\n"),
        ("gemma3", "a cat<end_of_turn>\n"),
        ("llava_next", " a cat</s> "),  # its template reads content parts only
    ],
)
def test_content_parts_with_an_image_are_masked_as_the_twin_masks(tok, name, trained) -> None:
    found = compare(tok, name, PARTS)
    assert found is not None
    ids, ours, theirs = found
    assert edge_whitespace_only(tok, ids, ours, theirs)
    assert tok.decode([i for i, t in zip(ids, ours, strict=True) if t]) == trained
