"""The worker tuner: the pure decision, the measurement plumbing (fake clock), DDP sharing."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from datamodules import TensorDataModule
from datamodules.core import hooks
from datamodules.core.hardware import Measurement, TuneResult
from datamodules.tools import tuner as tuner_module
from datamodules.tools.tuner import (
    batch_length,
    candidate_workers,
    candidates,
    choose,
    tune_datamodule,
)
from tests.datamodules.contract import ContractCase, quiet_trainer, run_ddp
from tests.recording import RecordingModel


def row(workers: int, prefetch: int | None, *speeds: float) -> Measurement:
    return Measurement(workers, prefetch, tuple(speeds), batches=20)


def make_dm(n: int = 200, **kwargs: Any) -> TensorDataModule:
    ids = torch.arange(n)
    kwargs.setdefault("batch_size", 10)
    kwargs.setdefault("val_split", 0)
    return TensorDataModule(ids.float()[:, None], ids % 3, **kwargs)


class FakeClock:
    """Returns 0, d1, 0, d2, ...: each measurement (two calls) lasts the next duration."""

    def __init__(self, durations: list[float]) -> None:
        self.durations = list(durations)
        self.calls = 0
        self.now = 0.0

    def __call__(self) -> float:
        self.calls += 1
        if self.calls % 2:  # a measurement starts
            return self.now
        self.now += self.durations.pop(0)
        return self.now


# ---------------------------------------------------------------------- the decision
class TestChoose:
    TABLE = [
        row(0, None, 500, 510, 490),
        row(1, 2, 800, 790, 820),
        row(2, 2, 960, 950, 970),
        row(2, 4, 990, 1000, 900),
        row(4, 2, 1000, 1010, 995),
        row(4, 4, 1000, 1005, 1002),
    ]

    def test_fewer_workers_win_within_five_percent(self) -> None:
        pick, reason = choose(self.TABLE)
        # Fastest median: 4 workers, 1002 (prefetch 4). 2 workers / prefetch 2 has 960 >= 951.9.
        assert (pick.num_workers, pick.prefetch_factor) == (2, 2)
        assert reason.startswith("tuned: 960 samples/s, within 5% of the fastest")
        assert "num_workers=4, prefetch_factor=4: 1,002" in reason

    def test_same_table_in_any_order_gives_the_same_choice(self) -> None:
        picks = set()
        rng = random.Random(0)
        for _ in range(20):
            table = self.TABLE[:]
            rng.shuffle(table)
            pick, _ = choose(table)
            picks.add((pick.num_workers, pick.prefetch_factor))
        assert picks == {(2, 2)}

    def test_medians_not_means_decide(self) -> None:
        # One outlier repeat of 10,000 does not make 3 workers the fastest.
        table = [row(1, 2, 100, 100, 100), row(3, 2, 50, 60, 10_000)]
        pick, _ = choose(table)
        assert pick.num_workers == 1
        assert table[1].median == 60

    def test_the_fastest_wins_outside_the_tolerance(self) -> None:
        table = [row(0, None, 100), row(2, 2, 106)]
        pick, reason = choose(table)
        assert pick.num_workers == 2
        assert reason == "tuned: fastest of 2 candidates (106 samples/s)"

    def test_boundary_is_inclusive(self) -> None:
        table = [row(0, None, 95), row(2, 2, 100)]
        assert choose(table)[0].num_workers == 0  # 95 >= 100 * 0.95
        assert choose(table, tolerance=0.04)[0].num_workers == 2

    def test_ties_prefer_smaller_prefetch_then_table_order(self) -> None:
        assert choose([row(2, 4, 100), row(2, 2, 99)])[0].prefetch_factor == 2
        first, second = row(1, 2, 100), row(1, 2, 100)
        assert choose([first, second])[0] is first

    @pytest.mark.parametrize(
        ("table", "tolerance", "match"),
        [
            ([], 0.05, "table is empty"),
            ([row(0, None, 0.0)], 0.05, "0 samples/s"),
            ([row(0, None, 1.0)], 1.0, "tolerance=1.0"),
            ([row(0, None, 1.0)], -0.1, "tolerance=-0.1"),
        ],
    )
    def test_bad_tables(self, table: list[Measurement], tolerance: float, match: str) -> None:
        with pytest.raises(ValueError, match=match):
            choose(table, tolerance)

    def test_spread_and_summary_lines(self) -> None:
        pick, reason = choose(self.TABLE)
        result = TuneResult(
            pick.num_workers, pick.prefetch_factor, tuple(self.TABLE), 0.05, "train", reason
        )
        lines = result.summary_lines()
        assert lines[0].startswith("  tuner (train loader; up to 20 batches timed, 3 time(s)")
        assert len(lines) == 1 + len(self.TABLE)
        chosen = [line for line in lines if line.endswith("<- chosen")]
        assert len(chosen) == 1 and "workers=2   prefetch=2" in chosen[0]
        assert "1,002/s" in lines[1]  # fastest first
        assert row(1, 2, 80, 100, 120).spread == pytest.approx(0.4)


class TestCandidates:
    @pytest.mark.parametrize(
        ("cpus", "expected"),
        [
            (1, [0, 1]),
            (2, [0, 1, 2]),
            (8, list(range(9))),
            (16, [0, 1, 2, 3, 4, 6, 8, 12, 16]),
            (40, [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 40]),
        ],
    )
    def test_worker_counts(self, cpus: int, expected: list[int]) -> None:
        assert candidate_workers(cpus) == expected

    def test_pairs(self) -> None:
        assert candidates([2, 0, 1], [4, 2]) == [(0, None), (1, 2), (1, 4), (2, 2), (2, 4)]
        with pytest.raises(ValueError, match="workers contains -1"):
            candidates([-1], [2])

    def test_batch_length(self) -> None:
        x = torch.zeros(7, 3)
        assert batch_length(x) == 7
        assert batch_length((x, torch.zeros(7))) == 7
        assert batch_length({"a": x}) == 7
        assert batch_length([[x]]) == 7
        assert batch_length({"meta": ["a", "b"], "x": x}) == 7
        assert batch_length(["a", "b", "c"]) == 3
        assert batch_length("text") == 1


# ---------------------------------------------------------------------- measurement
class TestTuneWithFakeClock:
    def test_table_and_choice_come_from_the_clock(self) -> None:
        dm = make_dm()  # 20 train batches of 10
        # Rounds are interleaved: (0 workers, 1 worker) x 2 repeats.
        clock = FakeClock([1.0, 0.5, 1.0, 0.25])
        result = tune_datamodule(
            dm, max_batches=5, workers=(0, 1), prefetch_factors=(2,), repeats=2, timer=clock
        )
        assert clock.calls == 8
        zero, one = result.table
        # 5 batches of 10 samples timed per measurement.
        assert (zero.batches, one.batches) == (5, 5)
        assert zero.samples_per_sec == (50.0, 50.0)
        assert one.samples_per_sec == (100.0, 200.0)
        assert (result.num_workers, result.prefetch_factor) == (1, 2)
        assert result.split == "train"

    def test_fewer_workers_within_tolerance(self) -> None:
        dm = make_dm()
        clock = FakeClock([1.0, 0.97])  # 50 vs 51.5 samples/s: within 5 %
        result = tune_datamodule(
            dm, max_batches=5, workers=(0, 1), prefetch_factors=(2,), repeats=1, timer=clock
        )
        assert result.num_workers == 0 and result.prefetch_factor is None

    def test_short_split_times_what_it_has(self) -> None:
        dm = make_dm(n=30)  # 3 train batches
        result = tune_datamodule(
            dm, max_batches=50, workers=(0,), repeats=1, timer=FakeClock([1.0])
        )
        (only,) = result.table
        assert only.batches == 2  # one batch of warm-up, two timed
        assert only.samples_per_sec == (20.0,)

    def test_a_datamodules_own_tuning_loader_is_timed(self) -> None:
        class Batches(IterableDataset):
            """Ten batches of five samples, without a length (like a stream)."""

            def __iter__(self) -> Iterator[torch.Tensor]:
                return iter([torch.zeros(5, 2)] * 10)

        class StreamLikeDataModule(TensorDataModule):
            def tuning_loader(self, split: str, workers: int, prefetch: int | None) -> Any:
                built.append((split, workers, prefetch))
                return DataLoader(Batches(), batch_size=None, num_workers=workers)

        built: list[tuple[str, int, int | None]] = []
        dm = StreamLikeDataModule(torch.zeros(10, 1), val_split=0)
        result = tune_datamodule(
            dm, max_batches=50, workers=(0,), repeats=2, timer=FakeClock([1.0, 0.5])
        )
        assert built == [("train", 0, None), ("train", 0, None)]
        (only,) = result.table
        assert only.batches == 9  # one of warm-up, then until the iterable ends
        assert only.samples_per_sec == (45.0, 90.0)

    def test_stage_picks_the_split(self) -> None:
        dm = make_dm(val_split=40)
        result = tune_datamodule(
            dm, "validate", max_batches=2, workers=(0,), repeats=1, timer=FakeClock([1.0])
        )
        assert result.split == "val"

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"stage": "train"}, "stage='train'"),
            ({"max_batches": 0}, "max_batches=0"),
            ({"repeats": 0}, "repeats=0"),
        ],
    )
    def test_bad_arguments(self, kwargs: dict[str, Any], match: str) -> None:
        with pytest.raises(ValueError, match=match):
            tune_datamodule(make_dm(), **kwargs)

    def test_empty_split(self) -> None:
        with pytest.raises(ValueError, match="the test split is empty"):
            tune_datamodule(make_dm(), "test")


class TestDataModuleIntegration:
    def test_tune_loader_applies_choice_and_records_table(self) -> None:
        dm = make_dm()
        result = dm.tune_loader(max_batches=5, workers=(0,), repeats=1)
        assert dm.tuned is result
        loader = dm.train_dataloader()
        assert loader.num_workers == 0
        text = dm.summary()
        assert "num_workers=0: tuned: fastest of 1 candidates" in text
        assert "  tuner (train loader" in text
        assert text.count("<- chosen") == 1

    def test_tuned_workers_reach_the_loader(self, monkeypatch: pytest.MonkeyPatch) -> None:
        dm = make_dm()
        pick = Measurement(1, 4, (10.0,), 5)
        fake = TuneResult(1, 4, (pick,), 0.05, "train", "tuned: fake")
        monkeypatch.setitem(hooks._TOOLS, "tune", lambda *a, **k: fake)
        dm.tune_loader()
        settings = dm.loader_settings("train")
        assert (settings.num_workers, settings.prefetch_factor) == (1, 4)
        assert settings.persistent_workers is True  # "auto" follows the tuned worker count
        assert settings.reasons["num_workers"] == "tuned: fake"
        assert settings.reasons["prefetch_factor"] == "tuned together with num_workers"

    def test_num_workers_tune_is_validated(self) -> None:
        make_dm(num_workers="tune")
        with pytest.raises(
            ValueError,
            match="num_workers='tuned' is not accepted: use an int >= 0, 'auto' or 'tune'",
        ):
            make_dm(num_workers="tuned")

    def test_num_workers_tune_runs_when_the_first_loader_is_built(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(tuner_module, "available_cpus", lambda: 1)  # candidates 0 and 1
        dm = make_dm(num_workers="tune")
        before = dm.summary()
        assert "num_workers=0: tune (not measured yet, 'auto' until then)" in before
        model = RecordingModel(lambda batch: batch[0][:, 0].long().tolist())
        quiet_trainer(max_epochs=1).fit(model, datamodule=dm)
        assert dm.tuned is not None
        assert [(m.num_workers, m.prefetch_factor) for m in dm.tuned.table] == [
            (0, None),
            (1, 2),
            (1, 4),
        ]
        assert all(len(m.samples_per_sec) == 3 for m in dm.tuned.table)
        assert sorted(i for batch in model.train_epochs()[0] for i in batch) == list(range(200))


# ---------------------------------------------------------------------- DDP
class RecordingTuneDataModule(TensorDataModule):
    """Writes, per rank, how often this process measured and what the tuner chose."""

    def __init__(self, out: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.out = out
        self.measured = 0

    def load_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.arange(120)
        return ids.float()[:, None], ids % 3

    def tune_loader(self, stage: str = "fit", max_batches: int = 20, **options: Any) -> Any:
        # Two candidates, measured once: the test is about who measures, not about speed.
        options.update(workers=(0, 1), prefetch_factors=(2,), repeats=1)
        return super().tune_loader(stage, max_batches, **options)

    def make_sampler(self, split: str, view: Any, rank: int, world: int) -> Any:
        if world == 1 and self.trainer is not None and self.trainer.world_size > 1:
            self.measured += 1  # only the tuner asks for an unsharded sampler under DDP
        return super().make_sampler(split, view, rank, world)

    def train_dataloader(self) -> Any:
        loader = super().train_dataloader()
        tuned = self.tuned
        assert tuned is not None
        record = {
            "measured": self.measured,
            "choice": [tuned.num_workers, tuned.prefetch_factor],
            "table": [
                [m.num_workers, m.prefetch_factor, list(m.samples_per_sec)] for m in tuned.table
            ],
            "loader_workers": loader.num_workers,
        }
        Path(self.out, f"tune{self.trainer.global_rank}.json").write_text(json.dumps(record))
        return loader


def ddp_tune_factory(out: str) -> tuple[TensorDataModule, Any]:
    dm = RecordingTuneDataModule(out, batch_size=6, val_split=0, num_workers="tune")
    return dm, lambda batch: batch[0][:, 0].long().tolist()


def test_ddp_measures_on_rank_zero_and_shares_the_choice(tmp_path: Path) -> None:
    case = ContractCase(
        make=lambda **_: None,  # type: ignore[arg-type, return-value]
        batch_ids=lambda batch: [],
        num_samples=120,
        ddp_factory="tests.datamodules.tools.test_tuner:ddp_tune_factory",
        ddp_kwargs={"out": str(tmp_path)},
    )
    ranks = run_ddp(case, tmp_path / "ranks", epochs=1)
    seen = sorted(itertools.chain.from_iterable(b for r in ranks for b in r["train"][0]))
    assert seen == list(range(120))
    zero, one = (json.loads((tmp_path / f"tune{r}.json").read_text()) for r in (0, 1))
    assert zero["measured"] > 0 and one["measured"] == 0
    assert zero["table"] == one["table"]  # rank 1 received rank 0's measurements
    assert zero["choice"] == one["choice"]
    assert zero["loader_workers"] == one["loader_workers"] == zero["choice"][0]
