"""TimeSeriesDataModule: the shared contract over series held out whole (one window each), and
one 2-rank DDP run split in time, resumed on 1 rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.datamodules.contract import (
    ContractCase,
    DataModuleContract,
    quiet_trainer,
    run_ddp,
    split_ids,
)
from tests.datamodules.time_series.series_data import (
    CONTEXT,
    HORIZON,
    SERIES,
    contract_datamodule,
    ddp_datamodule,
    series_ids,
)
from tests.recording import RecordingModel


class TestTimeSeriesContract(DataModuleContract):
    @pytest.fixture
    def case(self) -> ContractCase:
        return ContractCase(
            make=contract_datamodule,
            batch_ids=series_ids,
            num_samples=SERIES,
            ddp_factory="tests.datamodules.time_series.series_data:ddp_datamodule",
        )

    #: One DDP launch (the 3-rank elastic resume is the text and stream contracts'): 2 ranks
    #: split in time, then the elastic resume on 1 rank in this process.
    test_ddp_two_processes_disjoint_complete_even_and_resume_on_3_and_1 = None

    def test_ddp_two_processes_split_in_time_disjoint_even_and_resume_on_1(
        self, case: ContractCase, tmp_path: Path
    ) -> None:
        checkpoints = tmp_path / "checkpoints"
        ranks = run_ddp(case, tmp_path / "two", extra=("--ckpt-dir", str(checkpoints)))
        dm, ids_of = ddp_datamodule()
        dm.setup("fit")
        assert [r["world"] for r in ranks] == [2, 2]
        assert split_ids(dm, "train") == split_ids(dm, "val") == list(range(SERIES))
        for stage in ("train", "val"):
            for epoch in range(2):
                per_rank = [r[stage][epoch] for r in ranks]
                assert len(per_rank[0]) == len(per_rank[1]), f"{stage}: uneven batch counts"
                seen = [[i for b in batches for i in b] for batches in per_rank]
                assert not set(seen[0]) & set(seen[1])
                assert sorted(seen[0] + seen[1]) == list(range(SERIES))
        # Each series' one train window forecasts steps [CONTEXT, CONTEXT + HORIZON): none
        # reaches its validation part, the last HORIZON steps.
        series, starts = dm.plan("train").windows()
        assert sorted(series.tolist()) == list(range(SERIES))
        assert set(starts.tolist()) == {CONTEXT}
        assert set(dm.plan("val").windows()[1].tolist()) == {CONTEXT + HORIZON}
        train, step = list(range(SERIES)), 2
        seen = [i for r in ranks for batch in r["train"][0][:step] for i in batch]
        model = RecordingModel(ids_of)
        ckpt = checkpoints / f"epoch=0-step={step}.ckpt"
        quiet_trainer(max_epochs=2).fit(model, datamodule=dm, ckpt_path=ckpt)
        epochs = model.train_epochs()
        assert sorted(seen + [i for batch in epochs[0] for i in batch]) == train
        assert sorted(i for batch in epochs[1] for i in batch) == train
