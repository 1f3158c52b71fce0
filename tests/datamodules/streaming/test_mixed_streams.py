"""Mixed streams end to end: exact quotas per source per epoch across 2 ranks x 2 workers,
passes without replacement, ``source_key``, exact and elastic mid-epoch resume, evaluation
splits of Sources, the summary, and bad input."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from datamodules import Source, StreamingDataModule
from datamodules.stream_engine.loader import StreamLoader
from tests.datamodules.contract import quiet_trainer
from tests.recording import RecordingModel

# source "web": 3 shards, 60 records (ids 0..59); source "code": 2 shards, 40 (ids 100..139)
LAYOUT = {"web": [30, 20, 10], "code": [25, 15]}
FIRST_ID = {"web": 0, "code": 100}
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, counts in LAYOUT.items():
        root = tmp_path / name
        root.mkdir()
        i = FIRST_ID[name]
        for k, n in enumerate(counts):
            lines = [json.dumps({"id": i + j, "x": [1] * (j % 3 + 1)}) for j in range(n)]
            (root / f"part-{k}.jsonl").write_text("\n".join(lines) + "\n")
            i += n
        out[name] = root
    return out


def source_of(i: int) -> str:
    return "code" if i >= 100 else "web"


def make(folders, sources=None, **kwargs) -> StreamingDataModule:
    sources = sources or [
        Source(folders["web"], weight=3, name="web"),
        Source(folders["code"], weight=1, name="code"),
    ]
    options = {"batch_size": 8, "shuffle_buffer": 16, "index_cache": False, **kwargs}
    return StreamingDataModule(sources, **options)


def epoch_ids(dm: StreamingDataModule, world: int, workers: int, epoch: int) -> list[int]:
    """Every id of one train epoch over ``world`` ranks with ``workers`` workers each."""
    ids = []
    for rank in range(world):
        stream = dm.make_stream("train", rank, world)
        stream.set_epoch(epoch)
        loader = StreamLoader(stream, num_workers=workers)
        ids += [int(i) for batch in loader for i in batch["id"]]
    return ids


def test_weighted_quotas_are_exact_across_ranks_and_workers(folders) -> None:
    dm = make(folders, epoch_size=80)  # 3:1 -> 60 web, 20 code per epoch
    dm.setup("fit")
    assert dm.quotas(0) == {"web": 60, "code": 20}
    code_seen = []
    for epoch in range(3):
        ids = epoch_ids(dm, world=2, workers=2, epoch=epoch)
        assert Counter(map(source_of, ids)) == {"web": 60, "code": 20}
        assert sorted(i for i in ids if i < 100) == list(range(60))  # web: one pass per epoch
        code_seen.append(sorted(i for i in ids if i >= 100))
    # code is drawn at half a pass per epoch: epochs 0 and 1 are one full pass, no repeats
    assert sorted(code_seen[0] + code_seen[1]) == list(range(100, 140))
    assert not set(code_seen[0]) & set(code_seen[1])


def test_repeat_quotas_are_passes_per_epoch(folders) -> None:
    sources = [
        Source(folders["web"], repeat=0.5, name="web"),
        Source(folders["code"], repeat=2, name="code"),
    ]
    dm = make(folders, sources)
    ids = epoch_ids(dm, world=2, workers=2, epoch=0)
    counts = Counter(ids)
    assert Counter(map(source_of, ids)) == {"web": 30, "code": 80}
    assert {counts[i] for i in range(100, 140)} == {2}  # every code record twice
    assert len({i for i in ids if i < 100}) == 30  # 30 different web records, none twice


def test_source_key_names_every_record_and_batches_mix_sources(folders) -> None:
    dm = make(folders, epoch_size=80, source_key="source", num_workers=0)
    batches = list(dm.train_dataloader())
    names = [n for batch in batches for n in batch["source"]]
    ids = [int(i) for batch in batches for i in batch["id"]]
    assert names == [source_of(i) for i in ids]
    assert Counter(names) == {"web": 60, "code": 20}
    assert sum(1 for b in batches if len(set(b["source"])) == 2) >= 2  # batches mix sources


def test_mid_epoch_resume_is_exact_and_elastic(folders) -> None:
    dm = make(folders, epoch_size=80)
    whole = Counter(epoch_ids(dm, world=1, workers=0, epoch=0))
    # 2 ranks x 2 workers take 2 batches each, then the job resumes on 3 ranks x 1 worker.
    seen, state = [], None
    for rank in range(2):
        stream = make(folders, epoch_size=80).make_stream("train", rank, 2)
        loader = StreamLoader(stream, num_workers=2)
        iterator = iter(loader)
        seen += [int(i) for _ in range(2) for i in next(iterator)["id"]]
        state = json.loads(json.dumps(loader.state_dict()))
        del iterator
    rest, counts = [], []
    for rank in range(3):
        stream = make(folders, epoch_size=80).make_stream("train", rank, 3)
        loader = StreamLoader(stream, num_workers=1)
        loader.load_state_dict(state)
        batches = list(loader)
        counts.append(len(batches))
        rest += [int(i) for batch in batches for i in batch["id"]]
    assert Counter(seen + rest) == whole  # the quotas' exact records, each as often as drawn
    assert len(set(counts)) == 1


def test_trainer_fit_trains_on_the_quotas(folders) -> None:
    dm = make(folders, epoch_size=40, num_workers=2)  # 30 web + 10 code per epoch
    model = RecordingModel(lambda batch: [int(i) for i in batch["id"]])
    quiet_trainer(max_epochs=2).fit(model, datamodule=dm)
    for batches in model.train_epochs():
        ids = [i for batch in batches for i in batch]
        assert Counter(map(source_of, ids)) == {"web": 30, "code": 10}
        assert len(set(ids)) == 40
    text = dm.summary()
    assert "source 'web': 3 shard(s), 60 records, weight=3; 30 records this epoch" in text
    assert "source 'code': 2 shard(s), 40 records, weight=1; 10 records this epoch" in text


def test_evaluation_sources_are_each_read_once_with_their_key(folders) -> None:
    dm = StreamingDataModule(
        folders["web"],
        [Source(folders["web"], name="web"), Source(folders["code"], name="code")],
        source_key="source",
        batch_size=16,
        index_cache=False,
        num_workers=0,
    )
    batches = list(dm.val_dataloader())
    pairs = [(n, int(i)) for b in batches for n, i in zip(b["source"], b["id"], strict=True)]
    assert sorted(i for _, i in pairs) == list(range(60)) + list(range(100, 140))
    assert all(n == source_of(i) for n, i in pairs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epoch_size": 0}, r"epoch_size=0 is not accepted"),
        ({"source_key": ""}, r"source_key='' is not accepted"),
        ({"cache_limit": "10GB"}, r"cache_limit='10GB' needs cache_dir="),
        ({"retries": -1}, r"retries=-1 is not accepted: use an int >= 0"),
        ({"timeout": 0}, r"timeout=0 is not accepted: use a number of seconds > 0"),
        ({"storage_options": "s3"}, r"storage_options='s3' is not accepted"),
    ],
)
def test_bad_arguments_name_themselves(folders, kwargs, match) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        make(folders, **kwargs)


def test_bad_mixes_fail_early_naming_the_sources(folders) -> None:
    with pytest.raises(ValueError, match=r"weight: web; repeat: code"):
        StreamingDataModule([Source(folders["web"], weight=1), Source(folders["code"], repeat=1)])
    with pytest.raises(ValueError, match=r"epoch_size=10 splits an epoch between weighted"):
        StreamingDataModule([Source(folders["web"]), Source(folders["code"])], epoch_size=10)
    with pytest.raises(ValueError, match=r"val_files: every source of an evaluation split"):
        StreamingDataModule(folders["web"], [Source(folders["code"], weight=2)])
    dm = StreamingDataModule(
        [Source(folders["web"], name="a"), Source(folders["web"] / "part-0.jsonl", name="b")],
        index_cache=False,
    )
    with pytest.raises(ValueError, match=r"part-0\.jsonl' is in the sources 'a' and 'b'"):
        dm.setup("fit")


def test_a_resume_with_other_quotas_is_accepted_other_files_are_not(folders) -> None:
    dm = make(folders, epoch_size=80)
    stream = dm.make_stream("train", 0, 1)
    loader = StreamLoader(stream, num_workers=0)
    next(iter(loader))
    state = {**dm.state_dict(), "train_stream": loader.state_dict()}
    other = make(folders, epoch_size=60)  # other quotas: accepted, from the next epoch
    other.setup("fit")
    other.load_state_dict(state)
    assert other.quotas(0) == {"web": 60, "code": 20} and other.quotas(1) == {"web": 45, "code": 15}
    (folders["code"] / "part-1.jsonl").write_text('{"id": 500, "x": [1]}\n')
    moved = make(folders, epoch_size=80)
    moved.setup("fit")
    with pytest.raises(ValueError, match=r"source 'code' holds other data .*part-1\.jsonl"):
        moved.load_state_dict(state)
