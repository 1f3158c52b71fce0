"""SegmentationDataModule: the shared contract over image / mask folders whose masks name
their samples, including the 2-rank DDP run (train shares disjoint and even, evaluation with
every image once) and the elastic resume on 3 ranks and 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.datamodules.contract import ContractCase, DataModuleContract
from tests.datamodules.detection.segmentation_data import (
    CONTRACT_PAIRS,
    contract_datamodule,
    mask_ids,
    write_pairs,
)


def sizes(i: int) -> tuple[int, int]:
    return (12, 16) if i % 3 else (10, 20)  # a batch may mix sizes: padded


class TestSegmentationContract(DataModuleContract):
    @pytest.fixture
    def case(self, tmp_path: Path) -> ContractCase:
        write_pairs(tmp_path, CONTRACT_PAIRS, sizes)
        return ContractCase(
            make=lambda **kwargs: contract_datamodule(str(tmp_path), **kwargs),
            batch_ids=mask_ids,
            num_samples=CONTRACT_PAIRS,
            ddp_factory="tests.datamodules.detection.segmentation_data:ddp_datamodule",
            ddp_kwargs={"root": str(tmp_path)},
        )
