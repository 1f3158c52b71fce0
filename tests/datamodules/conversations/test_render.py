"""ChatRenderer: ids equal to apply_chat_template's, the loss mask rules, formats, bad records."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

from datamodules.conversations import ChatRenderer, ConversationError
from tests import subprocesses
from tests.datamodules.conversations.chat_tokenizers import (
    CHATML,
    TALK,
    chat_tokenizer,
    transformers_mask,
    trl_template,
)

ROOT = Path(__file__).resolve().parents[3]
#: ChatML with generation marks around each assistant message's content and end of turn.
CHATML_MARKED = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] + '<|im_end|>' }}"
    "{% endgeneration %}{{ '\\n' }}{% else %}{{ message['content'] + '<|im_end|>\\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def tok():
    return chat_tokenizer(CHATML)


def tokens(tok, ids, trained) -> list[str]:
    """The trained tokens' text."""
    return [tok.decode([int(i)]) for i, t in zip(ids, trained, strict=True) if t]


def test_chatml_ids_equal_apply_chat_template_and_train_content_and_end_of_turn(tok) -> None:
    ids, trained = ChatRenderer(tok)({"messages": TALK})
    assert ids.dtype == np.int32 and trained.dtype == bool and len(ids) == len(trained)
    want = tok.apply_chat_template(TALK, tokenize=True, return_dict=True)["input_ids"]
    assert ids.tolist() == want
    # every content token and <|im_end|> (and the newline after it), nothing of a header
    assert "".join(tokens(tok, ids, trained)) == "five.<|im_end|>\nworld yes\n\nno<|im_end|>\n"


@pytest.mark.parametrize("train_on", ["assistant", "last", "all"])
def test_generation_marks_give_transformers_assistant_masks(tok, train_on) -> None:
    renderer = ChatRenderer(tok, chat_template=CHATML_MARKED, train_on=train_on)
    ids, trained = renderer({"messages": TALK})
    want_ids, mask = transformers_mask(tok, TALK, CHATML_MARKED)
    assert ids.tolist() == want_ids
    if train_on == "assistant":
        assert trained.tolist() == mask.tolist()
    elif train_on == "last":
        runs = np.flatnonzero(np.diff(np.r_[0, mask.astype(int)]) == 1)
        last = mask.copy()
        last[: runs[-1]] = False
        assert trained.tolist() == last.tolist() and trained.sum() < mask.sum()
        assert "".join(tokens(tok, ids, trained)) == "world yes\n\nno<|im_end|>"
    else:
        assert trained.all()


def test_without_marks_equals_the_marked_twin_on_chatml(tok) -> None:
    # The same text; the unmarked template's mask adds only the newline after <|im_end|>.
    for messages in (TALK, TALK[1:3], TALK[1:]):
        ids, trained = ChatRenderer(tok)({"messages": messages})
        want_ids, mask = transformers_mask(tok, messages, CHATML_MARKED)
        assert ids.tolist() == want_ids
        extra = np.flatnonzero(trained & ~mask)
        assert not (mask & ~trained).any()
        assert [tok.decode([int(ids[i])]) for i in extra] == ["\n"] * (len(messages) // 2)


def test_train_on_last_and_all_without_marks(tok) -> None:
    ids, last = ChatRenderer(tok, train_on="last")({"messages": TALK})
    assert "".join(tokens(tok, ids, last)) == "world yes\n\nno<|im_end|>\n"
    _, every = ChatRenderer(tok, train_on="all")({"messages": TALK})
    assert every.all() and len(every) == len(ids)


def test_llama3_prefix_alone_merges_the_header_newlines_differently() -> None:
    # Llama 3's assistant header ends "<|end_header_id|>\n\n". Tokenized alone the prompt ends
    # in one "\n\n" token; inside the conversation the same text is "\n", "\n" (the BPE's
    # pre-tokenizer keeps the last whitespace for the word that follows). A mask counted from
    # the prompt's own length starts one token early.
    template = trl_template("llama3")
    tok = chat_tokenizer(template)
    messages = TALK[1:3]
    ids, trained = ChatRenderer(tok)({"messages": messages})
    prompt = tok.apply_chat_template(
        messages[:1], add_generation_prompt=True, tokenize=True, return_dict=True
    )["input_ids"]
    assert tok.convert_ids_to_tokens(prompt[-1:]) == ["ĊĊ"]
    assert tok.convert_ids_to_tokens(ids[len(prompt) - 1 : len(prompt) + 1].tolist()) == ["Ċ", "Ċ"]
    first = int(np.flatnonzero(trained)[0])
    assert first == len(prompt) + 1  # not len(prompt), where the naive mask starts
    assert "".join(tokens(tok, ids, trained)) == "five.<|eot_id|>"
    _, twin = transformers_mask(tok, messages, trl_template("llama3_training"))
    assert trained.tolist() == twin.tolist()


def test_phi3_masks_each_turn_where_the_renderings_agree() -> None:
    # Phi-3 writes EOS (here </s>) only after the conversation's last message: the first turn,
    # rendered alone, ends with it; inside the conversation it does not.
    tok = chat_tokenizer(trl_template("phi3"))
    ids, trained = ChatRenderer(tok)({"messages": TALK[1:]})
    text = "".join(tokens(tok, ids, trained))
    assert text == "five.<|end|>\nworld yes\n\nno<|end|>\n</s>"


def test_sharegpt_is_mapped_to_roles(tok) -> None:
    record = {
        "conversations": [
            {"from": "system", "value": "be nice"},
            {"from": "human", "value": "what is two plus three"},
            {"from": "gpt", "value": "five."},
        ]
    }
    ids, trained = ChatRenderer(tok)(record)
    want_ids, want = ChatRenderer(tok).render_messages(TALK[:3])
    assert ids.tolist() == want_ids.tolist() and trained.tolist() == want.tolist()
    keyed = ChatRenderer(tok, messages_key="talk")({"talk": record["conversations"]})
    assert keyed[0].tolist() == want_ids.tolist()


def test_prompt_completion_message_lists_train_on_the_completion_only(tok) -> None:
    record = {"prompt": TALK[:3] + TALK[3:4], "completion": TALK[4:]}
    ids, trained = ChatRenderer(tok)(record)
    assert (
        ids.tolist() == tok.apply_chat_template(TALK, tokenize=True, return_dict=True)["input_ids"]
    )
    assert "".join(tokens(tok, ids, trained)) == "world yes\n\nno<|im_end|>\n"
    marked = ChatRenderer(tok, chat_template=CHATML_MARKED)(record)
    assert "".join(tokens(tok, *marked)) == "world yes\n\nno<|im_end|>"


def test_prompt_completion_strings_are_prompt_completion_eos(tok) -> None:
    renderer = ChatRenderer(tok)
    ids, trained = renderer({"prompt": "what is two plus", "completion": " three"})
    whole = tok("what is two plus three", add_special_tokens=True)["input_ids"]
    assert ids.tolist() == whole + [tok.eos_token_id]
    assert "".join(tokens(tok, ids, trained)) == " three</s>"
    _, every = ChatRenderer(tok, train_on="all")({"prompt": "a", "completion": "b"})
    assert every.all()


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"text": "hi", "id": 3}, "record has no 'messages' key (nor 'prompt' and 'completion'; "
         "keys: ['id', 'text'])"),
        ([1, 2], "record is a list, not a mapping"),
        ({"messages": "hi"}, "'messages' is a str, not a list of messages"),
        ({"messages": []}, "'messages' is an empty list"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]},
         "unknown role 'bot' in message 2 (accepted: system, user, assistant, tool; "
         "ShareGPT: human, gpt, system)"),
        ({"conversations": [{"from": "robot", "value": "b"}]}, "unknown role 'robot' in message 1"),
        ({"messages": [{"role": "user"}]}, "message 1 has no 'content'"),
        ({"messages": [{"from": "human"}]}, "message 1 has no 'value'"),
        ({"messages": [{"content": "a"}]}, "message 1 has no 'role'"),
        ({"messages": [{"role": "user", "content": 3}]}, "message 1's 'content' is a int"),
        ({"messages": [{"role": "user", "content": "a"}]},
         "nothing to train on under train_on='assistant': no assistant message"),
        ({"prompt": TALK[:2], "completion": [TALK[3]]},
         "nothing to train on under train_on='assistant': no assistant message in the completion"),
        ({"prompt": "a"}, "record has 'prompt' but no 'completion'"),
        ({"prompt": "a", "completion": TALK[2:3]}, "'prompt' is a str and 'completion' a list"),
        ({"prompt": "a", "completion": ""}, "nothing to train on under train_on='assistant'"),
    ],
)  # fmt: skip
def test_bad_records_name_the_key_or_role(tok, record, message) -> None:
    with pytest.raises(ConversationError) as caught:
        ChatRenderer(tok)(record)
    assert message in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_a_template_error_is_a_conversation_error() -> None:
    tok = chat_tokenizer(trl_template("gemma"))  # refuses a system message
    with pytest.raises(ConversationError, match="the chat template refused the conversation: "
                       "System role not supported"):  # fmt: skip
        ChatRenderer(tok)({"messages": TALK})


def test_arguments_are_checked_at_once(tok) -> None:
    bare = chat_tokenizer(None)
    with pytest.raises(ValueError, match="chat_template=None is not accepted"):
        ChatRenderer(bare)
    with pytest.raises(ValueError, match="chat_template"):
        ChatRenderer(bare.backend_tokenizer)
    with pytest.raises(TypeError, match="tokenizer='gpt2' is not accepted"):
        ChatRenderer("gpt2")
    with pytest.raises(TypeError, match=r"tokenizer=\{'vocab': 1\} is not accepted"):
        ChatRenderer({"vocab": 1})
    from transformers import ByT5Tokenizer  # a Python tokenizer: no offsets

    with pytest.raises(TypeError, match=r"tokenizer=ByT5Tokenizer\(...\) .* use a fast"):
        ChatRenderer(ByT5Tokenizer(), chat_template=CHATML)
    with pytest.raises(ValueError, match="train_on='prompt' is not accepted"):
        ChatRenderer(tok, train_on="prompt")
    with pytest.raises(TypeError, match="train_on=1"):
        ChatRenderer(tok, train_on=1)
    with pytest.raises(TypeError, match="chat_template=3"):
        ChatRenderer(tok, chat_template=3)


def test_a_tokenizers_tokenizer_with_a_template(tok) -> None:
    renderer = ChatRenderer(tok.backend_tokenizer, chat_template=CHATML)
    ids, trained = renderer({"messages": TALK})
    assert ids.tolist() == ChatRenderer(tok)({"messages": TALK})[0].tolist()
    assert renderer.eos_id is None and renderer.pad_id == 0
    assert renderer.vocab_size == len(tok)


def test_ids_and_attributes(tok) -> None:
    renderer = ChatRenderer(tok)
    assert renderer.eos_id == tok.convert_tokens_to_ids("</s>")
    assert renderer.pad_id == tok.convert_tokens_to_ids("<|endoftext|>")
    assert renderer.vocab_size == len(tok)


def test_pickles_and_fingerprint_names_what_changes_the_output(tok) -> None:
    renderer = ChatRenderer(tok)
    again = pickle.loads(pickle.dumps(renderer))
    assert again({"messages": TALK})[0].tolist() == renderer({"messages": TALK})[0].tolist()
    assert again.fingerprint() == renderer.fingerprint()
    assert ChatRenderer(chat_tokenizer(CHATML)).fingerprint() == renderer.fingerprint()
    others = {
        ChatRenderer(tok, train_on="last").fingerprint(),
        ChatRenderer(tok, messages_key="talk").fingerprint(),
        ChatRenderer(tok, chat_template=CHATML_MARKED).fingerprint(),
        ChatRenderer(chat_tokenizer(CHATML, vocab_size=300)).fingerprint(),
    }
    assert len(others) == 4 and renderer.fingerprint() not in others


def test_fingerprint_is_the_same_in_a_fresh_process(tok) -> None:
    code = (
        "from datamodules.conversations import ChatRenderer\n"
        "from tests.datamodules.conversations.chat_tokenizers import CHATML, chat_tokenizer\n"
        "print(ChatRenderer(chat_tokenizer(CHATML)).fingerprint())\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "123", "PYTHONPATH": str(ROOT)}
    out = subprocesses.run([sys.executable, "-c", code], env=env, cwd=ROOT, text=True, check=True)
    assert out.stdout.strip() == ChatRenderer(tok).fingerprint()
