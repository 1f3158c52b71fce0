"""A text blend resumed with a changed mix: other weights, a source added, a source removed
mid-epoch, another world size; the same source name over other files refused.

One first run (web weight 3, code weight 1, packed rows, every unit of both sources per epoch)
saves a checkpoint after 3 of its epoch-0 batches; each test resumes it through the Trainer
with another mix. A unit is a packed row, named by its tokens."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from datamodules import Source, TextDataModule
from tests.datamodules.contract import quiet_trainer
from tests.datamodules.text.test_blends import (
    assert_balanced,
    docs_of,
    tokens_of,
    write_flat,
    write_megatron,
)
from tests.recording import RecordingModel

MATH = 5000  # math tokens are 5000..5999 (web 1000.., code 3000..)
DONE = 3  # epoch-0 batches of the first run before its checkpoint


def units(batch: dict[str, torch.Tensor]) -> list[str]:
    """Each row of a batch named by its real tokens (a packed row never mixes sources)."""
    real = batch["attention_mask"].bool()
    return [
        " ".join(map(str, row[m].tolist())) for row, m in zip(batch["input_ids"], real, strict=True)
    ]


def source_of(unit: str) -> str:
    first = next(int(t) for t in unit.split() if t != "0")  # 0: code's eos
    return "web" if first < 2000 else "code" if first < MATH else "math"


def by_source(batches: list[list[str]]) -> Counter[str]:
    return Counter(source_of(u) for b in batches for u in b)


class Recorder(RecordingModel):
    def __init__(self) -> None:
        super().__init__(units)
        self.batches: list[dict[str, torch.Tensor]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.batches.append({k: v.clone() for k, v in batch.items() if torch.is_tensor(v)})
        return super().training_step(batch, batch_idx)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The corpora, the first run's epoch 0 (units per batch) and its checkpoint."""
    root = tmp_path_factory.mktemp("blend_resume")
    web, code, maths = docs_of(1000, 60, 1), docs_of(3000, 30, 2), docs_of(MATH, 20, 3)
    write_megatron(root / "web", web)
    write_flat(root / "code.bin", code)
    write_megatron(root / "math", maths)
    paths = {"web": str(root / "web"), "code": str(root / "code.bin"), "math": str(root / "math")}
    out: dict[str, Any] = {"paths": paths, "docs": {"web": web, "code": [[*d, 0] for d in code]}}
    out["docs"]["math"] = maths
    model = Recorder()
    saving = ModelCheckpoint(
        dirpath=root / "first", every_n_train_steps=1, save_top_k=-1, filename="{step}"
    )
    quiet_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[saving]).fit(
        model, datamodule=make(out, web=3, code=1)
    )
    out["epoch0"] = model.train_epochs()[0]
    out["batches0"] = model.batches
    out["ckpt"] = root / "first" / f"step={DONE}.ckpt"
    return out


def make(run: dict[str, Any], workers: int = 0, **weights: Any) -> TextDataModule:
    """A blend of the named sources (in web, code, math order) with these weights."""
    sources = [Source(run["paths"][n], weight=w, name=n) for n, w in weights.items()]
    return TextDataModule(
        token_files=sources, eos_id=0, vocab_size=6000, val_split=0, num_workers=workers,
        packing=True, seq_length=32, batch_size=4,
    )  # fmt: skip


def resume(run: dict[str, Any], dm: TextDataModule, epochs: int) -> Recorder:
    model = Recorder()
    quiet_trainer(max_epochs=epochs).fit(model, datamodule=dm, ckpt_path=run["ckpt"])
    return model


def rest_is_exact(run: dict[str, Any], got: list[list[list[str]]]) -> None:
    """The resumed run's epoch 0 is exactly the rest of the first run's planned epoch."""
    assert got[0] == run["epoch0"][DONE:]


def test_other_weights_apply_from_the_next_epoch(first_run, caplog) -> None:
    dm = make(first_run, web=1, code=1)
    with caplog.at_level("INFO", logger="datamodules"):
        model = resume(first_run, dm, epochs=3)
    assert "the train mix differs from the checkpoint's: 'web' weight=3 -> weight=1" in caplog.text
    assert "Epoch 0 ends as it was planned, the new mix applies from epoch 1" in caplog.text
    got = model.train_epochs()
    rest_is_exact(first_run, got)
    total = sum(by_source(first_run["epoch0"]).values())  # every unit of both sources
    half = {"web": math.ceil(total / 2), "code": total // 2}  # 1:1, the remainder to web
    assert by_source(got[1]) == by_source(got[2]) == half
    # each source continues its run: no token of a pass twice before all of it once
    everything = first_run["batches0"] + model.batches[len(got[0]) :]
    assert_balanced(tokens_of(everything, "web"), first_run["docs"]["web"], 0)
    assert_balanced(tokens_of(everything, "code"), first_run["docs"]["code"], 60)


def test_a_source_added_starts_at_its_beginning(first_run, caplog) -> None:
    dm = make(first_run, web=3, code=1, math=1)
    with caplog.at_level("INFO", logger="datamodules"):
        model = resume(first_run, dm, epochs=2)
    assert "'math' added (from its start)" in caplog.text
    got = model.train_epochs()
    rest_is_exact(first_run, got)
    fresh = make(first_run, web=3, code=1, math=1)
    fresh.setup("fit")
    expected = fresh.quotas(1)  # a bigger epoch: every unit of the three sources
    assert sum(expected.values()) > sum(by_source(first_run["epoch0"]).values())
    assert by_source(got[1]) == expected and dm.quotas(1) == expected
    assert len(got[1]) == math.ceil(sum(expected.values()) / 4)  # the Trainer measured it
    later = model.batches[len(got[0]) :]
    assert_balanced(tokens_of(later, "math"), first_run["docs"]["math"], 90)  # its first rows


def test_a_source_removed_mid_epoch_ends_the_epoch_then_gives_nothing(first_run, caplog) -> None:
    dm = make(first_run, workers=2, web=1)  # the workers' views read the removed source
    saving = ModelCheckpoint(dirpath=first_run["ckpt"].parent.parent / "removed", save_last=True)
    model = Recorder()
    with caplog.at_level("INFO", logger="datamodules"):
        quiet_trainer(max_epochs=2, enable_checkpointing=True, callbacks=[saving]).fit(
            model, datamodule=dm, ckpt_path=first_run["ckpt"]
        )
    assert "'code' removed (keeps its place)" in caplog.text
    got = model.train_epochs()
    rest_is_exact(first_run, got)  # code's rows of epoch 0 read from the files it names
    assert by_source(got[0])["code"] > 0
    web_units = dm.view("train").units[0].count
    assert by_source(got[1]) == {"web": web_units}  # every web unit, nothing of code
    assert len(got[1]) == math.ceil(web_units / 4)
    state = torch.load(saving.last_model_path, weights_only=True)["TextDataModule"]
    mix = {s["name"]: s for s in state["train_sampler"]["mix"]["sources"]}
    code = by_source(first_run["epoch0"])["code"]
    assert mix["code"]["hidden"] and mix["code"]["start"] == code and mix["code"]["quota"] == 0
    assert mix["code"]["files"] == first_run["paths"]["code"]


def test_another_world_size_with_a_changed_mix(first_run) -> None:
    old = make(first_run, web=3, code=1)
    old.setup("fit")
    view = old.view("train")
    samplers = [old.make_sampler("train", view, r, 2) for r in range(2)]
    heads = [[b for _, b in zip(range(2), s, strict=False)] for s in samplers]
    state = samplers[0].state_dict()
    new = make(first_run, web=1, code=1, math=1)
    new.setup("fit")
    now = [new.make_sampler("train", new.view("train"), r, 3) for r in range(3)]
    for sampler in now:
        sampler.load_state_dict(state)
    rest = [list(s) for s in now]
    assert len({len(r) for r in rest}) == 1  # even across the 3 ranks
    delivered = [u for h in heads for b in h for u in units(view[b])]
    delivered += [u for r in rest for b in r for u in units(new.view("train")[b])]
    planned = [u for b in old.make_sampler("train", view, 0, 1).batches(0) for u in units(view[b])]
    assert sorted(delivered) == sorted(planned)  # the epoch as planned, each unit once
    epoch1 = [[units(new.view("train")[b]) for b in s] for s in now]  # next epoch: new mix
    assert len({len(r) for r in epoch1}) == 1
    assert by_source([b for r in epoch1 for b in r]) == new.quotas(1)
    assert set(new.quotas(1)) == {"web", "code", "math"} and new.quotas(1)["math"] > 0


def test_the_same_name_over_other_files_is_refused(first_run) -> None:
    dm = TextDataModule(
        token_files=[Source(first_run["paths"]["web"], weight=3, name="web"),
                     Source(first_run["paths"]["math"], weight=1, name="code")],
        eos_id=0, vocab_size=6000, val_split=0, num_workers=0, packing=True, seq_length=32,
        batch_size=4,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"source 'code' holds other data .*no longer has"):
        resume(first_run, dm, epochs=1)


def test_other_sources_with_a_random_val_split_are_refused(first_run) -> None:
    before = make(first_run, web=3, code=1)
    before.val_split = 0.1
    before.setup("fit")
    state = before.state_dict() | {"train_sampler": before.make_sampler(
        "train", before.view("train"), 0, 1).state_dict()}  # fmt: skip
    after = make(first_run, web=3, code=1, math=1)
    after.val_split = 0.1
    after.setup("fit")
    with pytest.raises(ValueError, match=r"sources added \(\['math'\]\) or removed \(\[\]\)"):
        after.load_state_dict(state)


def test_a_checkpoint_at_the_end_of_the_held_epoch(first_run) -> None:
    """Saved after the last batch of an epoch whose count differs from the next one's: the
    restoring Trainer first sees the ended epoch's length, then the next epoch's."""
    old = make(first_run, web=3, code=1)
    old.setup("fit")
    sampler = old.make_sampler("train", old.view("train"), 0, 1)
    ended = len(list(sampler))
    state = sampler.state_dict()
    new = make(first_run, web=3, code=1, math=1)
    new.setup("fit")
    resumed = new.make_sampler("train", new.view("train"), 0, 1)
    resumed.load_state_dict(state)
    assert len(resumed) == ended  # what the Trainer compares its restored count with
    resumed.ended_length = None  # (the loader clears it at the next epoch's second batch)
    batches = list(resumed)
    total = sum(new.quotas(1).values())
    assert resumed.epoch == 1 and len(batches) == len(resumed) == math.ceil(total / 4)
    assert by_source([units(new.view("train")[b]) for b in batches]) == new.quotas(1)
