"""AudioDataModule against the contract, and what its batches hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from datamodules import AudioDataModule
from tests.datamodules.audio.audio_data import (
    BASE,
    STEP,
    N,
    batch_ids,
    ddp_datamodule,
    write_numbered,
)
from tests.datamodules.contract import (
    ContractCase,
    DataModuleContract,
    quiet_trainer,
    run_ddp,
    split_ids,
)
from tests.recording import RecordingModel

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture(scope="module")
def numbered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("numbered")
    write_numbered(root)
    return root


class TestAudioContract(DataModuleContract):
    @pytest.fixture
    def case(self, numbered: Path) -> ContractCase:
        def make(**kwargs: Any) -> AudioDataModule:
            return AudioDataModule(numbered / "manifest.jsonl", **{"num_workers": 0, **kwargs})

        return ContractCase(
            make=make,
            batch_ids=batch_ids,
            num_samples=N,
            ddp_factory="tests.datamodules.audio.audio_data:ddp_datamodule",
            ddp_kwargs={"root": str(numbered)},
        )

    #: One DDP launch (2 ranks, duration batches), then the elastic resume of its checkpoint on
    #: 1 rank in this process; 3-rank resumes of the same sampler are the text contract's.
    test_ddp_two_processes_disjoint_complete_even_and_resume_on_3_and_1 = None

    def test_ddp_duration_batches_even_disjoint_and_resume_on_1(
        self, case: ContractCase, tmp_path: Path
    ) -> None:
        checkpoints = tmp_path / "checkpoints"
        ranks = run_ddp(case, tmp_path / "two", extra=("--ckpt-dir", str(checkpoints)))
        dm, _ = ddp_datamodule(**case.ddp_kwargs)
        dm.setup("fit")
        for stage in ("train", "val"):
            for epoch in range(2):
                per_rank = [r[stage][epoch] for r in ranks]
                assert len(per_rank[0]) == len(per_rank[1]), f"{stage}: uneven batch counts"
                seen = [[i for b in batches for i in b] for batches in per_rank]
                assert not set(seen[0]) & set(seen[1])
                assert sorted(seen[0] + seen[1]) == split_ids(dm, stage)
                for batches in per_rank:  # 0.5 s of audio per batch, padding counted
                    assert all(len(b) * (BASE + STEP * max(b)) <= 8000 for b in batches)
        assert len(ranks[0]["train"][0]) >= 3
        train, step = split_ids(dm, "train"), 2
        seen = [i for r in ranks for batch in r["train"][0][:step] for i in batch]
        model = RecordingModel(batch_ids)
        quiet_trainer(max_epochs=2).fit(
            model, datamodule=dm, ckpt_path=checkpoints / f"epoch=0-step={step}.ckpt"
        )
        epochs = model.train_epochs()
        assert sorted(seen + [i for batch in epochs[0] for i in batch]) == train
        assert sorted(i for batch in epochs[1] for i in batch) == train
