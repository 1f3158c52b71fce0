"""Preference tuning with DPO: a small causal LM learns to prefer the right sum to a wrong one.

The data needs no download. First, as ``examples/finetune_chat.py`` does, a small causal LM
(``examples/train_lm.py``'s ``TinyLM``) is fine-tuned on generated arithmetic chats ("What is
7 plus 5?" -> "12.") over every question with numbers up to ``--max-number``: that model is the
DPO reference. Then pairs of a right and a wrong answer (the wrong sum off by 1 or 2) for four
fifths of the questions train it with the DPO loss (Rafailov et al., 2023), from
``PreferenceDataModule(packing=True)`` batches: every sequence whole, a pair's chosen and
rejected sequences in one row, their log-probabilities summed over each ``cu_seqlens`` segment
and picked by ``chosen_index`` / ``rejected_index``.

The held-out preference accuracy is the share of held-out pairs whose implicit reward ``beta *
(log pi(y|x) - log pi_ref(y|x))`` is higher for the right answer than for the wrong one (ties
count half); the held-out pairs are those of the same questions whose wrong answer (off by 3)
no DPO pair had. At the start the policy is the reference, every reward is 0, and the accuracy
is 0.5. The script also prints the accuracy on the DPO pairs, and on the pairs of the fifth of
the questions that no DPO step saw (which needs the model to add, not only to prefer).

Run: ``python examples/train_dpo.py``, or ``--fast`` (fewer steps: the test's). It prints the
accuracies before and after, and the time taken.
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datamodules import ChatDataModule, PreferenceDataModule  # noqa: E402
from examples.finetune_chat import SYSTEM, chat_tokenizer, conversations, question  # noqa: E402
from examples.train_lm import TinyLM, default_cache  # noqa: E402

OFFSETS = (-3, -2, -1, 1, 2, 3)


def dpo_pairs(
    questions: list[tuple[int, int]], offsets: Sequence[int], seed: int = 2
) -> list[dict[str, Any]]:
    """A pair per question and offset: the right sum chosen, the sum off by ``offset``
    rejected (offsets that would give a negative number are left out)."""
    rng = random.Random(seed)
    out = []
    for a, b in questions:
        for offset in offsets:
            if a + b + offset < 0:
                continue
            prompt = [{"role": "system", "content": SYSTEM}] if rng.random() < 1 / 3 else []
            prompt.append({"role": "user", "content": question(a, b)})
            out.append({
                "prompt": prompt,
                "chosen": [{"role": "assistant", "content": f"{a + b}."}],
                "rejected": [{"role": "assistant", "content": f"{a + b + offset}."}],
            })  # fmt: skip
    return out


def sequence_logps(model: TinyLM, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Each sequence's summed log-probability of its completion tokens, per ``cu_seqlens``
    segment of a packed batch."""
    ids = batch["input_ids"]
    logits = model(ids, batch["position_ids"], batch["document_ids"])
    token = logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]
    cu = batch["cu_seqlens"].long()
    segment = torch.repeat_interleave(torch.arange(len(cu) - 1), cu.diff()).view_as(ids)
    weight = batch["completion_mask"][:, 1:].to(token.dtype)  # the target's mask
    sums = torch.zeros(len(cu) - 1, dtype=token.dtype, device=token.device)
    return sums.index_add(0, segment[:, 1:].reshape(-1), (token * weight).reshape(-1))


class DPO(pl.LightningModule):
    """The DPO loss on packed preference batches, against a frozen copy of the start model.

    Args:
        policy: The model trained.
        beta: The loss's temperature on the log-ratio margins.
        lr: AdamW learning rate.
    """

    def __init__(self, policy: TinyLM, beta: float = 0.1, lr: float = 1e-3) -> None:
        super().__init__()
        self.policy, self.beta, self.lr = policy, beta, lr
        self.reference = copy.deepcopy(policy).eval().requires_grad_(False)

    def rewards(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The implicit rewards of each pair's chosen and rejected sequence."""
        policy = sequence_logps(self.policy, batch)
        with torch.no_grad():
            reference = sequence_logps(self.reference, batch)
        reward = self.beta * (policy - reference)
        return reward[batch["chosen_index"]], reward[batch["rejected_index"]]

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        chosen, rejected = self.rewards(batch)
        loss = -F.logsigmoid(chosen - rejected).mean()
        self.log("dpo_loss", loss, prog_bar=True, batch_size=len(chosen))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.policy.parameters(), lr=self.lr)


@torch.no_grad()
def preference_accuracy(dpo: DPO, dm: PreferenceDataModule) -> float:
    """The share of held-out pairs whose chosen reward is above the rejected one (ties half)."""
    dpo.eval()
    right = total = 0.0
    for batch in dm.train_dataloader():
        chosen, rejected = dpo.rewards(batch)
        right += float((chosen > rejected).sum() + 0.5 * (chosen == rejected).sum())
        total += len(chosen)
    dpo.train()
    return right / total


def quiet_trainer(**kwargs: Any) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, **kwargs,
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Fine-tunes, then trains with DPO; prints and returns the held-out preference accuracy
    before and after."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="a short run (the test's)")
    parser.add_argument("--max-number", type=int, default=6)
    parser.add_argument("--sft-steps", type=int, default=100)
    parser.add_argument("--dpo-steps", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=16, help="packed rows a batch")
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-3, help="DPO's learning rate")
    parser.add_argument("--beta", type=float, default=0.1)
    parser.add_argument("--cache", type=Path, default=None, help="the token stores")
    args = parser.parse_args(argv)
    if args.fast:
        args.sft_steps, args.dpo_steps = 60, 100
    pl.seed_everything(0, verbose=False)
    start = time.perf_counter()
    every = [(a, b) for a in range(args.max_number + 1) for b in range(args.max_number + 1)]
    random.Random(0).shuffle(every)
    unseen, train = every[: len(every) // 5], every[len(every) // 5 :]
    chats = conversations(every, 2000)
    texts = [m["content"] for r in chats for m in r["messages"]]
    tokenizer = chat_tokenizer(texts + ["system user assistant"])
    cache = (args.cache or default_cache().parent / "train_dpo") / "tokens"
    common = {"tokenizer": tokenizer, "packing": True, "seq_length": args.seq_length,
              "batch_size": args.batch_size, "val_split": 0, "token_cache": cache,
              "num_workers": 0, "tokenize_workers": 0}  # fmt: skip

    # 1. Supervised fine-tuning on the chats: the reference model.
    sft = ChatDataModule(chats, **common)
    model = TinyLM(vocab=sft.vocab_size, dim=96, layers=2, heads=4, lr=3e-3)
    quiet_trainer(max_steps=args.sft_steps).fit(model, datamodule=sft)
    reference_s = time.perf_counter() - start

    # 2. DPO on pairs of a right and a wrong answer (off by -2, -1, 1 or 2). Held out: the
    # same questions' pairs whose wrong answer is off by -3 or 3 (never a DPO pair), and the
    # pairs of a fifth of the questions no DPO step saw.
    pairs = PreferenceDataModule(dpo_pairs(train, (-2, -1, 1, 2)), **common)
    held_out = PreferenceDataModule(dpo_pairs(train, (-3, 3), seed=3), shuffle=False, **common)
    other = PreferenceDataModule(dpo_pairs(unseen, OFFSETS, seed=4), shuffle=False, **common)
    dpo = DPO(model, beta=args.beta, lr=args.lr)
    before = preference_accuracy(dpo, held_out)
    quiet_trainer(max_steps=args.dpo_steps).fit(dpo, datamodule=pairs)
    after = preference_accuracy(dpo, held_out)
    trained, unseen_after = preference_accuracy(dpo, pairs), preference_accuracy(dpo, other)
    print(pairs.summary())
    print(
        f"{pairs.split_size('train'):,} DPO pairs over {len(train)} questions; held out: "
        f"{held_out.split_size('train')} pairs of those questions with wrong answers no DPO "
        f"pair had, {other.split_size('train')} pairs of {len(unseen)} other questions"
    )
    print(
        f"held-out preference accuracy: {before:.3f} before DPO, {after:.3f} after "
        f"{args.dpo_steps} DPO steps (the DPO pairs: {trained:.3f}; the other questions' "
        f"pairs: {unseen_after:.3f}); {time.perf_counter() - start:.0f} s in all, "
        f"{reference_s:.0f} s to the reference model"
    )
    return {"before": before, "after": after, "trained": trained, "unseen": unseen_after}


if __name__ == "__main__":
    main()
