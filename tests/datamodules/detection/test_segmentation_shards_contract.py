"""SegmentationDataModule over tar shards that write_segmentation_shards made of the contract's
folder pairs: the shared contract (splits, every image once, a Trainer's fit, validate, test
and predict, exact resume mid-epoch with and without workers, state_dict checks, the 2-rank
DDP run resumed on 3 ranks and on 1) holds as it holds for the folders."""

from __future__ import annotations

from pathlib import Path

import pytest
from torchvision.transforms import v2

from datamodules import SegmentationDataModule
from datamodules.detection import write_segmentation_shards
from tests.datamodules.contract import ContractCase, DataModuleContract
from tests.datamodules.detection.segmentation_data import CONTRACT_PAIRS, mask_ids, write_pairs
from tests.datamodules.detection.test_segmentation_contract import sizes


class TestSegmentationShardsContract(DataModuleContract):
    @pytest.fixture
    def case(self, tmp_path: Path) -> ContractCase:
        folders = write_pairs(tmp_path, CONTRACT_PAIRS, sizes)
        paths = write_segmentation_shards(folders, tmp_path / "shards", max_records=8)
        assert len(paths) == 3
        spec = str(tmp_path / "shards" / "train-{000000..000002}.tar")
        return ContractCase(
            make=lambda **kwargs: SegmentationDataModule(
                spec, transforms=v2.Identity(), **{"batch_size": 4, "num_workers": 0, **kwargs}
            ),
            batch_ids=mask_ids,
            num_samples=CONTRACT_PAIRS,
            ddp_factory="tests.datamodules.detection.segmentation_shard_data:ddp_datamodule",
            ddp_kwargs={"spec": spec},
        )
