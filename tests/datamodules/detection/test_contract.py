"""DetectionDataModule: the shared contract over a COCO file whose image ids are their
indices, with one 2-rank DDP run: train shares disjoint and even with aspect-ratio groups,
evaluation with every image once (no padded repeats), so the mAP of the predictions gathered
over the ranks equals the single-process mAP exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import forked
from tests.datamodules.contract import ContractCase, DataModuleContract, split_ids
from tests.datamodules.detection.detection_data import (
    CONTRACT_IMAGES,
    contract_datamodule,
    image_ids,
    write_contract_coco,
)


class TestDetectionContract(DataModuleContract):
    @pytest.fixture
    def case(self, tmp_path: Path) -> ContractCase:
        write_contract_coco(tmp_path)
        return ContractCase(
            # Plain batches: the contract counts ceil(n / batch_size) batches an epoch, which
            # aspect-ratio groups exceed by up to a batch a group (their own tests, and the
            # DDP run below, cover them).
            make=lambda **kwargs: contract_datamodule(
                str(tmp_path), **{"group_by_aspect_ratio": False, **kwargs}
            ),
            batch_ids=image_ids,
            num_samples=CONTRACT_IMAGES,
            ddp_factory="tests.datamodules.detection.detection_data:ddp_datamodule",
            ddp_kwargs={"root": str(tmp_path)},
        )

    #: Evaluation shares may differ by a batch (no image repeats), which the shared DDP test
    #: refuses; the one DDP launch below checks train and evaluation shares and mAP instead.
    test_ddp_two_processes_disjoint_complete_even_and_resume_on_3_and_1 = None

    def test_ddp_two_ranks_disjoint_even_and_map_equal_to_one_process(
        self, case: ContractCase, tmp_path: Path
    ) -> None:
        pytest.importorskip("pycocotools")
        from tests.datamodules.detection import ddp_map

        out = tmp_path / "ddp"
        argv = ["--root", str(tmp_path), "--out", str(out), "--launch", "fork"]
        code, log = forked.run_main(ddp_map.main, argv, tmp_path / "ddp.log")
        assert code == 0, log[-4000:]
        ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
        dm = contract_datamodule(str(tmp_path), batch_size=3, val_split=5)
        dm.setup("fit")
        for epoch in range(2):
            train = [r["train"][epoch] for r in ranks]
            assert len(train[0]) == len(train[1])
            seen = [[i for b in batches for i in b] for batches in train]
            assert sorted(seen[0] + seen[1]) == split_ids(dm, "train")
            val = [[i for b in r["val"][epoch] for i in b] for r in ranks]
            assert sorted(val[0] + val[1]) == split_ids(dm, "val")  # each once, none repeated
            assert sorted(map(len, val)) == [2, 3]
        expected = ddp_map.single_process_map(dm)
        assert [r["map"] for r in ranks] == [[expected] * 2, [expected] * 2]
