"""DetectionDataModule over tar shards that write_detection_shards made of the contract's COCO
file: the shared contract (splits, every image once, a Trainer's fit, validate, test and
predict, exact resume mid-epoch with and without workers, state_dict checks) holds as it holds
for the COCO file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from datamodules import DetectionDataModule
from datamodules.detection import write_detection_shards
from tests.datamodules.contract import ContractCase, DataModuleContract
from tests.datamodules.detection.detection_data import (
    CONTRACT_IMAGES,
    image_ids,
    write_contract_coco,
)


def shards_datamodule(folder: Path, **kwargs: Any) -> DetectionDataModule:
    kwargs = {"batch_size": 4, "num_workers": 0, "group_by_aspect_ratio": False, **kwargs}
    return DetectionDataModule(str(folder / "train-{000000..000002}.tar"), **kwargs)


class TestDetectionShardsContract(DataModuleContract):
    @pytest.fixture
    def case(self, tmp_path: Path) -> ContractCase:
        coco = write_contract_coco(tmp_path)
        paths = write_detection_shards(coco, tmp_path / "shards", max_records=8)
        assert len(paths) == 3
        return ContractCase(
            make=lambda **kwargs: shards_datamodule(tmp_path / "shards", **kwargs),
            batch_ids=image_ids,
            num_samples=CONTRACT_IMAGES,
        )

    #: DDP is the COCO contract's (test_contract.py): the shards change only where images
    #: are read from.
    test_ddp_two_processes_disjoint_complete_even_and_resume_on_3_and_1 = None
