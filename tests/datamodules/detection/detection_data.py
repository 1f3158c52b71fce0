"""Tiny detection datasets written in fixtures: PNG images drawn with PIL, and their
annotations as COCO JSON, a YOLO data.yaml with images/ and labels/, and a Pascal VOC root."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PIL import Image

#: (width, height) of the COCO images, by image id: landscape and portrait ones.
COCO_SIZES = {
    1: (48, 32), 2: (32, 48), 3: (48, 32), 5: (32, 48), 6: (48, 32),
    7: (48, 32), 8: (32, 48), 9: (48, 32), 10: (32, 48), 11: (48, 32),
}  # fmt: skip
#: Non-contiguous category ids, deliberately not in name order.
CATEGORIES = [{"id": 7, "name": "zebra"}, {"id": 1, "name": "cat"}, {"id": 3, "name": "dog"}]
#: COCO labels (contiguous, categories sorted by id: cat, dog, zebra).
LABEL_OF = {1: 0, 3: 1, 7: 2}


def write_image(path: Path, width: int, height: int, shade: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (width, height), (shade % 256, 40, 200)).save(path)


def coco_annotations() -> list[dict[str, Any]]:
    """Objects of the COCO fixture: one or two boxes per image, a polygon, a crowd RLE, a
    box reaching past its image (clipped), a box without area (left out), image 6 empty."""
    anns: list[dict[str, Any]] = []
    next_id = 100
    for image_id, (_w, _h) in COCO_SIZES.items():
        if image_id == 6:
            continue
        cat = [1, 3, 7][image_id % 3]
        anns.append({
            "id": next_id, "image_id": image_id, "category_id": cat,
            "bbox": [2.0, 3.0, 10.0, 12.0], "iscrowd": 0, "area": 120.0,
            "segmentation": [[2, 3, 12, 3, 12, 15, 2, 15]],
        })  # fmt: skip
        next_id += 1
    anns.append(
        {
            "id": 200,
            "image_id": 1,
            "category_id": 3,
            "bbox": [40.0, 20.0, 20.0, 20.0],
            "iscrowd": 0,
            "segmentation": [],
        }
    )  # fmt: skip  (clipped to 40, 20, 48, 32)
    anns.append(
        {
            "id": 201,
            "image_id": 2,
            "category_id": 7,
            "bbox": [5.0, 5.0, 0.0, 4.0],
            "iscrowd": 0,
        }
    )  # fmt: skip  (no area: left out)
    anns.append({
        "id": 202, "image_id": 3, "category_id": 1, "bbox": [20.0, 10.0, 8.0, 6.0],
        "iscrowd": 1, "segmentation": {"size": [32, 48], "counts": [320, 6, 26, 6, 1178]},
    })  # fmt: skip
    return anns


def write_coco(root: Path, name: str = "train.json", anns: list | None = None) -> Path:
    """Images under ``root/images`` and ``root/<name>`` (file names ``images/imgN.png``)."""
    images = []
    for image_id, (w, h) in COCO_SIZES.items():
        file = f"images/img{image_id}.png"
        write_image(root / file, w, h, image_id * 20)
        images.append({"id": image_id, "file_name": file, "width": w, "height": h})
    data = {
        "images": images,
        "annotations": coco_annotations() if anns is None else anns,
        "categories": CATEGORIES,
    }
    path = root / name
    path.write_text(json.dumps(data))
    return path


#: YOLO fixture: (split, stem, width, height, label lines).
YOLO_FILES = [
    ("train", "a", 40, 20, ["0 0.5 0.5 0.5 0.5", "1 0.25 0.25 0.1 0.2"]),
    ("train", "b", 20, 40, ["1 0.1 0.1 0.3 0.1 0.3 0.4"]),  # a -seg polygon (3 points)
    ("train", "c", 40, 20, []),  # a label file without lines: no objects
    ("train", "d", 20, 40, None),  # no label file at all: no objects
    ("val", "e", 40, 20, ["1 0.5 0.5 1.0 1.0"]),
]


def write_yolo(root: Path, yaml: bool = True) -> Path:
    """``root/images/{train,val}``, ``root/labels/{train,val}`` and ``root/data.yaml``."""
    for split, stem, w, h, lines in YOLO_FILES:
        write_image(root / "images" / split / f"{stem}.png", w, h)
        if lines is not None:
            label = root / "labels" / split / f"{stem}.txt"
            label.parent.mkdir(parents=True, exist_ok=True)
            label.write_text("".join(f"{line}\n" for line in lines))
    path = root / "data.yaml"
    if yaml:
        path.write_text(
            "path: .\ntrain: images/train\nval: images/val\nnames:\n  0: cat\n  1: dog\n"
        )
    return path


VOC_OBJECTS = {
    "000001": (50, 30, [("dog", (1, 2, 20, 25), 0), ("person", (25, 5, 45, 28), 1)]),
    "000002": (30, 50, [("cat", (3, 4, 13, 14), 0)]),
    "000003": (50, 30, [("dog", (10, 10, 30, 20), 0)]),
}


def write_voc(root: Path) -> Path:
    """A VOC root: Annotations/, JPEGImages/ (PNG bytes, as .png), ImageSets/Main/*.txt."""
    (root / "Annotations").mkdir(parents=True)
    for stem, (w, h, objects) in VOC_OBJECTS.items():
        write_image(root / "JPEGImages" / f"{stem}.png", w, h)
        parts = [
            f"<object><name>{name}</name><difficult>{hard}</difficult><bndbox>"
            f"<xmin>{a}</xmin><ymin>{b}</ymin><xmax>{c}</xmax><ymax>{d}</ymax></bndbox></object>"
            for name, (a, b, c, d), hard in objects
        ]
        (root / "Annotations" / f"{stem}.xml").write_text(
            f"<annotation><filename>{stem}.png</filename><size><width>{w}</width>"
            f"<height>{h}</height><depth>3</depth></size>{''.join(parts)}</annotation>"
        )
    main = root / "ImageSets" / "Main"
    main.mkdir(parents=True)
    (main / "train.txt").write_text("000001\n000002\n")
    (main / "val.txt").write_text("000003\n")
    return root


#: The contract's images: ids 0..22 (an image's id is its index), landscape and portrait.
CONTRACT_IMAGES = 23


def write_contract_coco(root: Path) -> Path:
    """23 images with ids equal to their positions, one or two boxes each (the last none)."""
    images, anns = [], []
    for i in range(CONTRACT_IMAGES):
        w, h = (40, 24) if i % 3 else (24, 40)
        file = f"images/c{i}.png"
        write_image(root / file, w, h, i * 10)
        images.append({"id": i, "file_name": file, "width": w, "height": h})
        for k in range(0 if i == CONTRACT_IMAGES - 1 else 1 + i % 2):
            x, y = 2 + 3 * k + i % 5, 2 + 2 * k
            anns.append({
                "id": 1000 + 10 * i + k, "image_id": i, "category_id": [1, 3, 7][(i + k) % 3],
                "bbox": [x, y, 8 + i % 4, 9], "iscrowd": 0,
            })  # fmt: skip
    path = root / "contract.json"
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": CATEGORIES}))
    return path


def image_ids(batch: Any) -> list[int]:
    """The image ids of a ``"torchvision"`` batch (in the contract data, their indices)."""
    return [int(t["image_id"]) for t in batch[1]]


def contract_datamodule(root: str, **kwargs: Any) -> Any:
    from datamodules import DetectionDataModule

    kwargs = {"batch_size": 4, "num_workers": 0, **kwargs}
    return DetectionDataModule(Path(root) / "contract.json", **kwargs)


def ddp_datamodule(root: str) -> tuple[Any, Any]:
    """The DataModule each DDP process of the contract builds, and its batch ids."""
    return contract_datamodule(root, batch_size=3, val_split=5), image_ids
