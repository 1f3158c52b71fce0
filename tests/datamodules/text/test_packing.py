"""TextDataModule(packing=True): full rows with document boundaries, DDP, resume, elastic."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from collates import pack_collate
from collates.pack_plan import best_fit_plan
from datamodules import TextDataModule
from datamodules.tokens.packing import PackedRowSampler, PackPlanner
from tests.collates.packed_checks import assert_packed_invariants
from tests.datamodules.contract import (
    ContractCase,
    assert_resume_mid_epoch_is_exact,
    quiet_trainer,
    run_ddp,
)
from tests.recording import RecordingModel

N = 60
L = 16


def make_texts(n: int = N) -> list[str]:
    """Texts of lengths 1..23 (text i is deterministic in i)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(letters[(i * 7 + j) % 26] for j in range(1 + (i * 13) % 23)) for i in range(n)]


def make(**kwargs: Any) -> TextDataModule:
    options = {"packing": True, "seq_length": L, "batch_size": 3, "val_split": 0.2}
    options.update(kwargs)
    return TextDataModule(make_texts(), num_workers=options.pop("num_workers", 0), **options)


def token_ids(batch: dict[str, torch.Tensor]) -> list[int]:
    """Every real token of a batch as one id: document (in its split) x 1000 + position."""
    real = batch["document_ids"] >= 0
    return (batch["document_ids"][real] * 1000 + batch["position_ids"][real]).tolist()


def ddp_datamodule(**kwargs: Any) -> tuple[TextDataModule, Any]:
    """Factory for tests/ddp_runner.py: the same packed data in every process."""
    return make(batch_size=2, **kwargs), token_ids


def expected_ids(dm: TextDataModule, split: str) -> list[int]:
    """Every token of the split once: what an epoch must cover."""
    lengths = dm.split_datasets[split].encoded.lengths[dm.split_indices[split]].tolist()
    return sorted(d * 1000 + p for d, n in enumerate(lengths) for p in range(n))


def epoch_batches(dm: TextDataModule, split: str = "train") -> list[dict[str, Any]]:
    loader = dm.train_dataloader() if split == "train" else dm.val_dataloader()
    return list(loader)


def split_tokens(dm: TextDataModule, split: str, doc: int) -> list[int]:
    encoded = dm.split_datasets[split].encoded
    row = int(dm.split_indices[split][doc])
    return encoded.tokens[encoded.offsets[row] : encoded.offsets[row + 1]].tolist()


class TestSplitMode:
    def test_every_token_exactly_once_per_epoch_in_full_rows(self) -> None:
        dm = make()
        dm.setup("fit")
        total = len(expected_ids(dm, "train"))
        orders = []
        for _ in range(3):
            batches = epoch_batches(dm)
            ids = [i for b in batches for i in token_ids(b)]
            assert sorted(ids) == expected_ids(dm, "train")
            rows = torch.cat([b["attention_mask"] for b in batches])
            assert rows.shape == (-(-total // L), L)
            assert rows[:-1].all(), "only the last row of the epoch is padded"
            assert int(rows[-1].sum()) == total - (len(rows) - 1) * L
            for batch in batches:
                assert_packed_invariants(batch, dm.pad_id)
                real = batch["document_ids"] >= 0
                docs, pos = batch["document_ids"][real], batch["position_ids"][real]
                tokens = batch["input_ids"][real]
                for d, p, t in zip(docs.tolist(), pos.tolist(), tokens.tolist(), strict=True):
                    assert split_tokens(dm, "train", d)[p] == t
            orders.append(ids)
        assert orders[0] != orders[1] != orders[2], "the plan reshuffles every epoch"

    def test_a_continued_piece_goes_on_counting_from_the_row_before(self) -> None:
        dm = make()
        dm.setup("fit")
        rows = dm.planner("train").num_rows
        for epoch in (0, 1):
            whole = dm.view("train")[torch.arange(rows) + epoch * rows]  # the plan, in order
            docs, pos = whole["document_ids"], whole["position_ids"]
            continued = pos[1:, 0] > 0
            assert int(continued.sum()) > 5
            assert torch.equal(docs[1:, 0][continued], docs[:-1, -1][continued])
            assert torch.equal(pos[1:, 0][continued], pos[:-1, -1][continued] + 1)
            assert bool((docs[1:, 0][~continued] != docs[:-1, -1][~continued]).all())

    def test_a_batch_mixes_rows_from_all_over_the_epoch(self) -> None:
        dm = make()
        sampler = dm.train_dataloader().sampler
        rows = dm.planner("train").num_rows
        order = sampler.permutation(1) - rows
        assert sorted(order.tolist()) == list(range(rows)) and order.tolist() != sorted(order)

    def test_eval_is_packed_in_order_the_same_every_epoch(self) -> None:
        dm = make()
        first, second = epoch_batches(dm, "val"), epoch_batches(dm, "val")
        docs = [d for b in first for d in b["document_ids"][b["document_ids"] >= 0].tolist()]
        assert docs == sorted(docs)
        assert [token_ids(b) for b in first] == [token_ids(b) for b in second]

    def test_workers_give_the_same_batches(self) -> None:
        plain, workers = make(), make(num_workers=2)
        for _ in range(2):
            a, b = epoch_batches(plain), epoch_batches(workers)
            assert [token_ids(x) for x in a] == [token_ids(x) for x in b]
            assert all(
                torch.equal(x["cu_seqlens"], y["cu_seqlens"]) for x, y in zip(a, b, strict=True)
            )

    def test_pack_collate_equals_the_datamodule_for_the_same_order(self) -> None:
        # Unshuffled: the rows of the epoch in plan order, in one batch, key by key.
        dm = make(batch_size=1000, shuffle=False)
        (ours,) = epoch_batches(dm)
        samples = [split_tokens(dm, "train", d) for d in range(dm.split_size("train"))]
        theirs = pack_collate(samples, seq_length=L, pad_id=dm.pad_id)
        assert ours.keys() == theirs.keys()
        for key, value in theirs.items():
            assert value == ours[key] if key == "max_seqlen" else torch.equal(value, ours[key])
        # Shuffled: the same rows as pack_collate of the epoch's document order, dealt in the
        # sampler's row order.
        dm = make(batch_size=1000)
        dm.setup("fit")
        rows = dm.planner("train").num_rows
        for epoch in (0, 1):
            loader = dm.train_dataloader()
            loader.sampler.set_epoch(epoch)
            (ours,) = list(loader)
            order = dm.planner("train").order(epoch)
            samples = [split_tokens(dm, "train", int(d)) for d in order]
            theirs = pack_collate(samples, seq_length=L, pad_id=dm.pad_id)
            docs = theirs["document_ids"]
            theirs["document_ids"] = torch.where(docs >= 0, torch.from_numpy(order)[docs], -1)
            dealt = loader.sampler.permutation(epoch) - epoch * rows
            for key in ("input_ids", "position_ids", "document_ids", "labels", "attention_mask"):
                assert torch.equal(theirs[key][dealt], ours[key]), key
            assert_packed_invariants(ours, dm.pad_id)


class TestWholeMode:
    def test_documents_are_never_split_and_rows_reshuffle(self) -> None:
        dm = make(pack_mode="whole", seq_length=24)
        dm.setup("fit")
        lengths = dm.split_datasets["train"].encoded.lengths[dm.split_indices["train"]]
        compositions, counts = [], set()
        for _ in range(3):
            batches = epoch_batches(dm)
            counts.add(len(batches))
            assert sorted(i for b in batches for i in token_ids(b)) == expected_ids(dm, "train")
            rows = []
            for batch in batches:
                assert_packed_invariants(batch, dm.pad_id)
                assert not bool((batch["position_ids"][:, 0] != 0).any()), "no continued piece"
                for docs in batch["document_ids"]:
                    present = [d for d in docs.unique().tolist() if d >= 0]
                    for d in present:
                        assert int((docs == d).sum()) == int(lengths[d]), "a document is whole"
                    rows.append(frozenset(present))
            compositions.append(set(rows))
        assert len(counts) == 1, "the same number of rows every epoch"
        assert compositions[0] != compositions[1] != compositions[2]
        summary = dm.summary()
        assert "0 documents cut across rows" in summary and "rows of 24 per epoch" in summary

    def test_each_epoch_deals_equal_length_documents_to_one_best_fit_plan(self) -> None:
        dm = make(pack_mode="whole", seq_length=24)
        dm.setup("fit")
        planner = dm.planner("train")
        lengths = planner.lengths
        one_pass = best_fit_plan(lengths, 24, pool=None)
        assert planner.num_rows == one_pass.num_rows
        plans = [planner.plan(epoch) for epoch in range(3)]
        for plan in plans:
            assert plan.row_ptr.tolist() == one_pass.row_ptr.tolist()
            assert plan.length.tolist() == one_pass.length.tolist()
            assert lengths[plan.doc].tolist() == plan.length.tolist(), "each place, its length"
            assert sorted(plan.doc.tolist()) == [d for d, n in enumerate(lengths) if n]
        assert plans[0].doc.tolist() != plans[1].doc.tolist() != plans[2].doc.tolist()
        again = PackPlanner(lengths, 24, "whole", shuffle=True, seed=planner.seed)
        assert again.plan(1).doc.tolist() == plans[1].doc.tolist(), "from the seed alone"

    def test_pack_collate_equals_the_eval_packing(self) -> None:
        dm = make(pack_mode="whole", seq_length=24, batch_size=1000)
        (ours,) = epoch_batches(dm, "val")
        samples = [split_tokens(dm, "val", d) for d in range(dm.split_size("val"))]
        theirs = pack_collate(samples, seq_length=24, pack_mode="whole", pad_id=dm.pad_id)
        for key, value in theirs.items():
            assert value == ours[key] if key == "max_seqlen" else torch.equal(value, ours[key])

    def test_a_long_document_fails_naming_file_and_line_unless_truncated(
        self, tmp_path: Path
    ) -> None:
        path = tmp_path / "docs.jsonl"
        texts = ["short", "a bit longer", "x" * 30, "end"]
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        dm = TextDataModule(train_file=path, packing=True, seq_length=16, pack_mode="whole")
        with pytest.raises(ValueError, match=r"docs\.jsonl, line 3: 30 tokens exceed seq_length"):
            dm.setup("fit")
        dm = TextDataModule(
            train_file=path,
            packing=True,
            seq_length=16,
            pack_mode="whole",
            max_length=16,
            val_split=0,
            num_workers=0,
        )
        batches = list(dm.train_dataloader())
        assert sum(int(b["attention_mask"].sum()) for b in batches) == 5 + 12 + 16 + 3


class TestArguments:
    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"seq_length": None}, ValueError, "seq_length=None"),
            ({"seq_length": 0}, ValueError, "seq_length=0"),
            ({"pack_mode": "greedy"}, ValueError, "pack_mode='greedy'"),
            ({"packing": "yes"}, TypeError, "packing='yes'"),
            ({"batch_by": "tokens", "max_tokens": 64}, ValueError, "conflicts.*batch_by"),
            ({"packing": False}, ValueError, "seq_length=16.*no effect without packing"),
        ],
    )
    def test_bad_arguments_raise_naming_them(self, kwargs, error, match) -> None:
        with pytest.raises(error, match=match):
            make(**kwargs)

    def test_labels_conflict_with_packing(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="packing=True conflicts with labels"):
            TextDataModule(make_texts(), [0] * N, packing=True, seq_length=L)
        path = tmp_path / "labelled.jsonl"
        path.write_text('{"text": "abc", "label": 1}\n{"text": "de", "label": 0}\n')
        dm = TextDataModule(train_file=path, packing=True, seq_length=L)
        with pytest.raises(ValueError, match=r"labelled\.jsonl, line 1: packing=True conflicts"):
            dm.setup("fit")

    def test_resume_refuses_another_packing(self) -> None:
        dm = make()
        iterator = iter(dm.train_dataloader())
        next(iterator)
        state = dm.state_dict()
        changes = [
            ({"seq_length": 8}, "seq_length=16"),
            ({"pack_mode": "whole", "max_length": 16}, "pack_mode='split'"),
            ({"max_length": 10}, "lengths differ"),
        ]
        for kwargs, match in changes:
            other = make(**kwargs)
            other.setup("fit")
            other.load_state_dict(state)
            with pytest.raises(ValueError, match=match):
                other.train_dataloader()

    @pytest.mark.parametrize("bucket", [True, False])
    def test_a_packed_checkpoint_is_refused_by_sample_batches(self, bucket: bool) -> None:
        dm = make()
        iterator = iter(dm.train_dataloader())
        next(iterator)
        state = dm.state_dict()
        other = TextDataModule(make_texts(), val_split=0.2, batch_size=3, bucket=bucket)
        other.setup("fit")
        other.load_state_dict(state)
        with pytest.raises(ValueError, match=r"saved with packing=True \(seq_length=16, "):
            other.train_dataloader()


class TestInspect:
    def test_summary_describe_and_picture(self, tmp_path: Path) -> None:
        dm = make()
        batch = next(iter(dm.train_dataloader()))
        summary = dm.summary()
        assert "packing: seq_length=16, pack_mode='split'" in summary
        planner = dm.planner("train")
        fill = len(expected_ids(dm, "train")) / (planner.num_rows * L)
        assert f"{planner.num_rows} rows of 16 per epoch, real tokens {fill:.4f}" in summary
        assert "documents cut across rows" in summary
        lines = "\n".join(dm.describe_data())
        assert "packed rows" in lines and "train:" in lines
        written = dm.plot_batch(batch, tmp_path / "rows.png")
        assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class TestTrainer:
    @pytest.mark.parametrize(("workers", "mode"), [(0, "split"), (2, "split"), (0, "whole")])
    def test_resume_mid_epoch_is_exact(self, tmp_path: Path, workers: int, mode: str) -> None:
        def fresh() -> TextDataModule:
            return make(num_workers=workers, pack_mode=mode, seq_length=24)

        reference = assert_resume_mid_epoch_is_exact(fresh, token_ids, tmp_path)
        assert len(reference[0]) >= 4 and reference[0] != reference[1]

    def test_overfit_batches_repeats_the_first_batches(self) -> None:
        model = RecordingModel(token_ids)
        quiet_trainer(max_epochs=3, overfit_batches=2).fit(model, datamodule=make())
        epochs = model.train_epochs()
        assert len(epochs) == 3 and len(epochs[0]) == 2
        assert epochs[0] == epochs[1] == epochs[2]

    def test_ddp_even_disjoint_and_elastic_resume_on_3_and_1(self, tmp_path: Path) -> None:
        case = ContractCase(
            make=make,
            batch_ids=token_ids,
            num_samples=N,
            ddp_factory="tests.datamodules.text.test_packing:ddp_datamodule",
        )
        dm, _ = ddp_datamodule()
        dm.setup("fit")
        train = expected_ids(dm, "train")
        ckpts = tmp_path / "ckpts"
        first = run_ddp(case, tmp_path / "two", epochs=1, extra=("--ckpt-dir", str(ckpts)))
        per_rank = assert_two_ranks_cover_once(first, train, expected_ids(dm, "val"))
        step = 2
        seen = [i for batches in per_rank for b in batches[:step] for i in b]
        for world in (3, 1):
            resumed = run_ddp(
                case,
                tmp_path / f"on{world}",
                epochs=2,
                devices=world,
                extra=("--resume", str(ckpts / f"epoch=0-step={step}.ckpt")),
            )
            assert_resumed_once(seen, resumed, train)


def assert_two_ranks_cover_once(
    first: list[dict[str, Any]], train: list[int], val: list[int]
) -> list[list[list[int]]]:
    """Two DDP ranks' first epoch: even batch counts, disjoint shares, every train and val
    token once. Returns each rank's train batches."""
    per_rank = [r["train"][0] for r in first]
    assert len(per_rank[0]) == len(per_rank[1]) >= 4, "even batch counts"
    shares = [Counter(i for b in batches for i in b) for batches in per_rank]
    assert not set(shares[0]) & set(shares[1]), "disjoint"
    assert sorted((shares[0] + shares[1]).elements()) == train, "every token once"
    vals = [Counter(i for b in r["val"][0] for i in b) for r in first]
    assert sorted((vals[0] + vals[1]).elements()) == val
    assert len(first[0]["val"][0]) == len(first[1]["val"][0])
    return per_rank


def assert_resumed_once(seen: list[int], resumed: list[dict[str, Any]], train: list[int]) -> None:
    """A resumed run (any world size): the rest of epoch 0 and all of epoch 1, every token
    once across both runs, the same batch count on every rank."""
    world = len(resumed)
    rest = [i for r in resumed for b in r["train"][0] for i in b]
    assert sorted(seen + rest) == train, f"epoch 0 exactly once across 2 -> {world}"
    assert len({len(r["train"][0]) for r in resumed}) == 1, "even after resuming"
    nxt = [i for r in resumed for b in r["train"][1] for i in b]
    assert sorted(nxt) == train and len({len(r["train"][1]) for r in resumed}) == 1


def test_sampler_is_the_core_sampler_over_rows() -> None:
    dm = make()
    loader = dm.train_dataloader()
    assert isinstance(loader.sampler, PackedRowSampler)
    assert len(loader) == -(-dm.planner("train").num_rows // 3)
