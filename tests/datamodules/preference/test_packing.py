"""PreferenceDataModule packed: every sequence whole, a pair in one batch, per-pair log-probs
equal to the padded batch's for a causal LM with position ids; overlong pairs; packed resume."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from datamodules import PreferenceDataModule
from tests.datamodules.chat.chat_data import chat_tokenizer
from tests.datamodules.contract import assert_resume_mid_epoch_is_exact
from tests.datamodules.preference.pref_data import messages_pairs, trl_rows
from tests.datamodules.preference.test_datamodule import N, ours

SEQ = 256


def sequences(batch: dict[str, torch.Tensor]) -> list[tuple[list[int], list[int]]]:
    """Each pair's (chosen, rejected) token ids of a packed batch, from its indices."""
    ids = batch["input_ids"].reshape(-1).tolist()
    cu = batch["cu_seqlens"].tolist()
    out = []
    for c, r in zip(batch["chosen_index"].tolist(), batch["rejected_index"].tolist(), strict=True):
        out.append((ids[cu[c] : cu[c + 1]], ids[cu[r] : cu[r + 1]]))
    return out


def packed_ids(batch: dict[str, torch.Tensor]) -> list[int]:
    """A packed batch's pair ids, from its chosen sequences."""
    from tests.datamodules.preference.test_datamodule import _lookup

    return [_lookup()[tuple(chosen)] for chosen, _ in sequences(batch)]


@pytest.mark.parametrize("workers", [0, 2])
def test_every_sequence_whole_a_pair_in_one_batch_once_an_epoch(workers: int) -> None:
    records = messages_pairs(N, seed=1)
    tokenizer = chat_tokenizer()
    rows = trl_rows(records, tokenizer) if workers == 0 else None
    dm = PreferenceDataModule(
        records, tokenizer=tokenizer, packing=True, seq_length=SEQ, batch_size=2, val_split=0,
        tokenize_workers=0, token_cache=False, num_workers=workers,
    )  # fmt: skip
    loader = dm.train_dataloader()
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        seen = []
        for batch in loader:
            assert batch["input_ids"].shape[1] == SEQ
            cu, pos = batch["cu_seqlens"].tolist(), batch["position_ids"].reshape(-1)
            mask = batch["completion_mask"].reshape(-1)
            for start, end in zip(cu[:-1], cu[1:], strict=True):
                assert pos[start:end].tolist() == list(range(end - start))  # restarting
                assert (batch["labels"].reshape(-1)[start] == -100).item()
            ids = packed_ids(batch)
            seen += ids
            if rows is None:
                continue
            for i, k, (chosen, rejected) in zip(
                ids, range(len(ids)), sequences(batch), strict=True
            ):
                row = rows[i]
                assert chosen == row["prompt_ids"] + row["chosen_ids"]
                assert rejected == row["prompt_ids"] + row["rejected_ids"]
                c = batch["chosen_index"][k]
                completion = mask[cu[c] : cu[c + 1]].tolist()
                assert completion == [0] * len(row["prompt_ids"]) + [1] * len(row["chosen_ids"])
        assert sorted(seen) == list(range(N))
    if rows is not None:  # every token of every sequence, none added
        total = sum(
            2 * len(r["prompt_ids"]) + len(r["chosen_ids"]) + len(r["rejected_ids"]) for r in rows
        )
        assert dm.planner("train").num_tokens == total


def _token_logps(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log p(ids[t + 1] | ... ids[t]) at every t, 0 at the last position."""
    logps = torch.log_softmax(logits[..., :-1, :], dim=-1)
    out = logps.gather(-1, ids[..., 1:, None])[..., 0]
    return torch.nn.functional.pad(out, (0, 1))


def test_packed_per_pair_logps_equal_the_padded_batchs() -> None:
    transformers = pytest.importorskip("transformers")
    records = messages_pairs(12, seed=11)
    tokenizer = chat_tokenizer()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    )  # fmt: skip
    # float64: the sums of about 100 log-probs then differ by rounding far below 1e-5
    model = transformers.LlamaForCausalLM(config).double().eval()
    padded = next(iter(ours(records, tokenizer, batch_size=12).train_dataloader()))
    with torch.no_grad():
        logits = model(
            input_ids=padded["input_ids"], attention_mask=padded["attention_mask"]
        ).logits
    per_token = _token_logps(logits, padded["input_ids"])
    # the completion mask marks targets: the logit at t predicts token t + 1
    targets = torch.nn.functional.pad(padded["completion_mask"][:, 1:], (0, 1))
    sums = (per_token * targets).sum(1)
    expected = torch.stack([sums[:12], sums[12:]], 1)  # (pair, chosen / rejected)

    packed_dm = ours(records, tokenizer, packing=True, seq_length=SEQ, batch_size=12)
    got = torch.zeros(12, 2, dtype=torch.float64)
    for batch in packed_dm.train_dataloader():
        flat = batch["input_ids"].reshape(1, -1)
        with torch.no_grad():  # no attention mask: the model reads sequences off position ids
            logits = model(
                input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False
            ).logits.reshape(1, flat.shape[1], -1)
        per_token = _token_logps(logits, flat)[0]
        completion = batch["completion_mask"].reshape(-1)
        cu = batch["cu_seqlens"].tolist()
        for c, r in zip(
            batch["chosen_index"].tolist(), batch["rejected_index"].tolist(), strict=True
        ):
            pair = packed_ids_in_order(records, tokenizer, flat[0, cu[c] : cu[c + 1]].tolist())
            for side, s in ((0, c), (1, r)):
                start, end = cu[s], cu[s + 1]
                target = completion[start + 1 : end]
                got[pair, side] = (per_token[start : end - 1] * target).sum()
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def packed_ids_in_order(records: list[dict[str, Any]], tokenizer: Any, chosen: list[int]) -> int:
    """The index in ``records`` of the pair whose chosen sequence is ``chosen``."""
    for i, record in enumerate(records):
        full = tokenizer.apply_chat_template(
            record["prompt"] + record["chosen"], tokenize=True, return_dict=True
        )["input_ids"]
        if full == chosen:
            return i
    raise AssertionError("no such pair")


def test_overlong_pairs_dropped_truncated_or_refused_counted_with_one_warning() -> None:
    records = messages_pairs(30, seed=12)
    tokenizer = chat_tokenizer()
    rows = trl_rows(records, tokenizer)
    longest = [
        max(len(r["chosen_ids"]), len(r["rejected_ids"])) + len(r["prompt_ids"]) for r in rows
    ]
    limit = sorted(longest)[20]
    over = [i for i, n in enumerate(longest) if n > limit]
    assert over
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dropped = ours(records, tokenizer, max_length=limit, batch_size=30)
        dropped.setup("fit")
    said = [str(w.message) for w in caught if "over max_length" in str(w.message)]
    assert len(said) == 1 and f"{len(over)} records over max_length={limit}" in said[0]
    assert dropped.split_size("train") == 30 - len(over)
    assert f"{len(over)} records over max_length={limit}" in dropped.summary()

    cut = ours(records, tokenizer, max_length=limit, overlong="truncate", batch_size=30)
    batch = next(iter(cut.train_dataloader()))
    assert cut.split_size("train") == 30
    for i in over:  # the prompt's start is cut first, from both sequences alike
        row = rows[i]
        n = len(row["prompt_ids"]) + max(len(row["chosen_ids"]), len(row["rejected_ids"]))
        k = n - limit
        assert k < len(row["prompt_ids"])
        chosen = (row["prompt_ids"] + row["chosen_ids"])[k:]
        rejected = (row["prompt_ids"] + row["rejected_ids"])[k:]
        assert batch["input_ids"][i, : len(chosen)].tolist() == chosen
        assert batch["input_ids"][30 + i, : len(rejected)].tolist() == rejected
        assert batch["attention_mask"][[i, 30 + i]].sum(1).tolist() == [
            len(chosen), len(rejected)
        ]  # fmt: skip
        assert max(len(chosen), len(rejected)) == limit

    with pytest.raises(ValueError, match=r"<conversations>, row \d+: the pair has .* max_length"):
        ours(records, tokenizer, max_length=limit, overlong="error", on_error="skip")
    packed = ours(records, tokenizer, packing=True, seq_length=2 * limit, batch_size=4)
    assert packed.split_size("train") == sum(
        2 * len(r["prompt_ids"]) + len(r["chosen_ids"]) + len(r["rejected_ids"]) <= 2 * limit
        for r in rows
    )


def test_packed_resume_mid_epoch_is_exact(tmp_path: Any) -> None:
    records, tokenizer = messages_pairs(N, seed=1), chat_tokenizer()

    def make() -> PreferenceDataModule:
        return PreferenceDataModule(
            records, tokenizer=tokenizer, packing=True, seq_length=SEQ, batch_size=4,
            val_split=0.2, tokenize_workers=0, token_cache=str(tmp_path / "cache"),
        )  # fmt: skip

    assert_resume_mid_epoch_is_exact(make, packed_ids, tmp_path)
