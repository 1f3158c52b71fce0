"""What the other libraries' data mixtures do, measured: the facts of the Mixtures guide's table.

Not a speed benchmark: each probe builds a small mixture of two or three sources, reads it,
interrupts and resumes it, and counts records. The counts are exact and deterministic (fixed
seeds), so one run is the result.

litdata (``CombinedStreamingDataset(weights=...)`` read through ``StreamingDataLoader``, batch
10, 0 workers): two datasets written with ``litdata.optimize``, ``a`` (700 int records) and ``b``
(300), weights 0.7 / 0.3, each shuffled. ``iterate_over_all`` must be ``False`` with weights
(its default ``True`` refuses them), so an epoch ends when one dataset runs out;
``batching_method`` is its default, ``"stratified"``. Measured: the records per source of an
epoch; whether any API changes the weights during training; a resume mid-epoch (after 30
batches) through ``StreamingDataLoader.state_dict`` / ``load_state_dict`` with the same
weights, with other weights (0.3 / 0.7), with a dataset added and with one removed, each
compared with the uninterrupted epoch (records repeated, records of the planned epoch never
read).

Megatron-LM core (``megatron-core``): three token files written with ``IndexedDatasetBuilder``
(400 documents of 5-20 tokens each), ``GPTDataset`` samples of 16 tokens blended by
``BlendedMegatronDatasetBuilder(GPTDataset, ...)`` into a ``BlendedDataset`` of 400 training
samples (a stand-in tokenizer gives only the vocabulary size and the EOD id). A sample is
known by its tokens. Megatron resumes by starting its sampler at the checkpoint's consumed
sample count over a blend rebuilt from the command line; the probe does the same: the first
run uses weights 0.5 / 0.5 and stops after 200 samples (25 steps of 8), the second rebuilds
the blend with the same weights, other weights (0.75 / 0.25), a third source added
(0.4 / 0.4 / 0.2) or the second removed, and reads samples 200-399. Measured: samples per
source; samples read after the resume that the first run had already trained on; samples the
first run had planned after the resume that neither run reads; whether per-source validation
datasets are built in (``multiple_validation_sets``).

MosaicML streaming is probed only when ``streaming`` imports (it is not in the ``bench``
extra: every release pins an older numpy than this project's environment).

Needs the ``bench`` extra (litdata) and megatron-core from the ``test`` extra; a library that
does not import is reported as not measured. The data are generated in a temporary directory
and removed; the loops are bounded (about 1,000 litdata records per pass, 400 Megatron
samples). Takes about 15 s on a 2-core machine.

Run: ``python benchmarks/compare_mixtures.py``
"""

from __future__ import annotations

import logging
import multiprocessing
import tempfile
import warnings
from collections import Counter
from pathlib import Path

# --------------------------------------------------------------------------------------------
# litdata


def lit_record(i: int) -> int:
    """``litdata.optimize`` fn: one record per input, the input itself."""
    return int(i)


LIT_SOURCES = {"a": (0, 700), "b": (10_000, 300), "c": (20_000, 300)}  # name: (first id, count)
LIT_BATCH = 10
LIT_STOP = 30  # batches read before the checkpoint


def write_litdata(root: Path) -> None:
    import litdata

    method = multiprocessing.get_start_method(allow_none=True)
    for name, (first, count) in LIT_SOURCES.items():
        litdata.optimize(
            fn=lit_record,
            inputs=list(range(first, first + count)),
            output_dir=str(root / name),
            chunk_size=50,
            num_workers=1,
            verbose=False,
        )
    # optimize() forces the global start method to "spawn": put the platform default back.
    multiprocessing.set_start_method(method, force=True)


def lit_loader(root: Path, names: list[str], weights: list[float], **kwargs):
    from litdata import CombinedStreamingDataset, StreamingDataLoader, StreamingDataset

    datasets = [StreamingDataset(str(root / n), shuffle=True, seed=42) for n in names]
    combined = CombinedStreamingDataset(
        datasets, weights=weights, iterate_over_all=False, seed=42, **kwargs
    )
    return StreamingDataLoader(combined, batch_size=LIT_BATCH, num_workers=0)


def lit_read(loader, stop: int | None = None) -> list[int]:
    out: list[int] = []
    for k, batch in enumerate(loader):
        out += [int(x) for x in batch]
        if stop is not None and k + 1 == stop:
            break
    return out


def source_of(record: int) -> str:
    return "a" if record < 10_000 else "b" if record < 20_000 else "c"


def compare(plan: list[int], first: list[int], rest: list[int]) -> str:
    """How the two runs' records compare with the uninterrupted epoch ``plan``."""
    seen = Counter(first + rest)
    repeated = sum(n - 1 for n in seen.values() if n > 1)
    lost = len(set(plan) - set(seen))
    extra = len(set(seen) - set(plan))
    if first + rest == plan:
        return f"exactly the rest of the epoch ({len(rest)} records, 0 repeated, 0 lost)"
    by_source = Counter(source_of(r) for r in set(plan) - set(seen))
    lost_by = ", ".join(f"{by_source[s]} of {s}" for s in sorted(by_source)) or "none"
    return (
        f"accepted silently; {len(rest)} records after the resume; of the {len(plan)} records "
        f"of the interrupted epoch {repeated} repeated, {lost} never read ({lost_by})"
        + (f", {extra} not in its plan" if extra else "")
    )


def probe_litdata(root: Path) -> list[tuple[str, str]]:
    try:
        import litdata  # noqa: F401
    except ImportError:
        return [("all", "not measured: litdata does not import (the bench extra)")]
    from litdata import CombinedStreamingDataset

    write_litdata(root)
    facts = []
    ab, w = ["a", "b"], [0.7, 0.3]
    plan = lit_read(lit_loader(root, ab, w))
    counts = Counter(source_of(r) for r in plan)
    total = sum(LIT_SOURCES[n][1] for n in ab)
    facts.append(
        (
            "weights 0.7 / 0.3 over 700 + 300 records",
            f"an epoch reads {len(plan)} of {total} records: a {counts['a']} "
            f"({counts['a'] / len(plan):.3f}), b {counts['b']} ({counts['b'] / len(plan):.3f}); "
            "it ends when the first dataset runs out (iterate_over_all=False, which weights need)",
        )
    )
    from litdata import StreamingDataset

    try:
        CombinedStreamingDataset([StreamingDataset(str(root / n)) for n in ab], weights=w)
    except ValueError as exc:
        facts.append(("weights with iterate_over_all at its default (True)", first_line(exc)))
    setters = [m for m in dir(CombinedStreamingDataset) if "weight" in m.lower()]
    facts.append(
        (
            "schedule over training",
            "no API: weights are fixed when CombinedStreamingDataset is built"
            + (
                f" (attributes naming weights: {setters})" if setters else " (no method names them)"
            ),
        )
    )

    loader = lit_loader(root, ab, w)
    first = lit_read(loader, stop=LIT_STOP)
    state = loader.state_dict()
    facts.append(
        (
            f"resume after {LIT_STOP} batches, same weights",
            compare(plan, first, lit_read(resumed(root, ab, w, state))),
        )
    )
    facts.append(
        (
            f"resume after {LIT_STOP} batches, weights 0.3 / 0.7",
            compare(plan, first, lit_read(resumed(root, ab, [0.3, 0.7], state))),
        )
    )
    for label, names, weights, kwargs in (
        ("resume with a dataset added (c)", ["a", "b", "c"], [0.5, 0.2, 0.3], {}),
        ("resume with a dataset removed (b)", ["a"], [1.0], {}),
        (
            "resume with c added, force_override_state_dict=True",
            ["a", "b", "c"],
            [0.5, 0.2, 0.3],
            {"force_override_state_dict": True},
        ),
        (
            "resume with b removed, force_override_state_dict=True",
            ["a"],
            [1.0],
            {"force_override_state_dict": True},
        ),
    ):
        try:
            loader = resumed(root, names, weights, state, **kwargs)
        except Exception as exc:  # noqa: BLE001
            facts.append((label, f"load_state_dict raises {type(exc).__name__}: {first_line(exc)}"))
            continue
        try:
            rest = lit_read(loader)
        except Exception as exc:  # noqa: BLE001
            facts.append(
                (
                    label,
                    f"load_state_dict accepts it; reading then raises {type(exc).__name__}: "
                    f"{first_line(exc)}",
                )
            )
        else:
            facts.append((label, compare(plan, first, rest)))
    facts.append(
        (
            "per-source validation",
            "not built in: a CombinedStreamingDataset is one loader; one StreamingDataLoader per "
            "dataset by hand",
        )
    )
    return facts


def resumed(root: Path, names, weights, state, **kwargs):
    loader = lit_loader(root, names, weights, **kwargs)
    loader.load_state_dict(state)
    return loader


def first_line(exc: BaseException) -> str:
    """The error's message, first line, without the objects' reprs litdata puts in it."""
    text = " ".join(str(a) for a in exc.args) if exc.args else str(exc)
    text = text.splitlines()[0] if text else ""
    text = text.split(": [<")[0]
    return text if len(text) <= 160 else text[:157] + "..."


# --------------------------------------------------------------------------------------------
# Megatron-LM core

MEG_SIZE = 400  # training samples of the blend (train_iters x global batch)
MEG_RESUME = 200  # consumed samples at the checkpoint (25 steps of 8)
MEG_SEQ = 16


class StandInTokenizer:
    """What ``GPTDatasetConfig`` reads of a tokenizer: no text is tokenized here."""

    vocab_size = 60_000
    eod = 0
    pad = 59_999
    unique_identifiers = {"class": "StandInTokenizer"}


def write_megatron(root: Path) -> dict[str, str]:
    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    rng = np.random.default_rng(0)
    prefixes = {}
    for name, first in (("a", 1), ("b", 20_000), ("c", 40_000)):
        builder = IndexedDatasetBuilder(str(root / f"{name}.bin"), dtype=np.uint16)
        token = first
        for _ in range(400):
            n = int(rng.integers(5, 21))
            builder.add_document(torch.arange(token, token + n, dtype=torch.int64), [n])
            token += n
        builder.finalize(str(root / f"{name}.idx"))
        prefixes[name] = str(root / name)
    return prefixes


def megatron_blend(prefixes: list[str], weights: list[float] | None, **config):
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    sizes = config.pop("sizes", [MEG_SIZE, 0, 0])
    cfg = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=MEG_SEQ,
        tokenizer=StandInTokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        path_to_cache=None,
        **({"blend": (prefixes, weights), "split": "100,0,0"} | config),
    )
    return BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, cfg).build()


def sample_key(sample) -> tuple[int, ...]:
    return (*sample["tokens"].tolist(), int(sample["labels"][-1]))


def probe_megatron(root: Path) -> list[tuple[str, str]]:
    try:
        from megatron.core.datasets.blended_dataset import BlendedDataset  # noqa: F401
    except ImportError:
        return [("all", "not measured: megatron-core does not import (the test extra)")]
    p = write_megatron(root)
    facts = []
    run1, _, _ = megatron_blend([p["a"], p["b"]], [0.5, 0.5])
    keys1 = [sample_key(run1[i]) for i in range(MEG_SIZE)]
    ids1 = [int(run1.dataset_index[i]) for i in range(MEG_SIZE)]
    per = Counter(ids1)
    facts.append(
        (
            f"weights 0.5 / 0.5, {MEG_SIZE} samples",
            f"a {per[0]}, b {per[1]}: exact counts; the blend is one index built for the whole "
            f"run (dataset_index, dataset_sample_index)",
        )
    )
    run3, _, _ = megatron_blend([p["a"], p["b"]], [0.75, 0.25])
    per3 = Counter(int(run3.dataset_index[i]) for i in range(MEG_SIZE))
    facts.append((f"weights 0.75 / 0.25, {MEG_SIZE} samples", f"a {per3[0]}, b {per3[1]}"))
    facts.append(
        (
            "schedule over training",
            "no API: BlendedDataset takes one weight per dataset for the whole run",
        )
    )
    before, planned = keys1[:MEG_RESUME], keys1[MEG_RESUME:]
    for label, prefixes, weights in (
        ("same weights", [p["a"], p["b"]], [0.5, 0.5]),
        ("weights 0.75 / 0.25", [p["a"], p["b"]], [0.75, 0.25]),
        ("source c added, 0.4 / 0.4 / 0.2", [p["a"], p["b"], p["c"]], [0.4, 0.4, 0.2]),
        ("source b removed (a alone)", [p["a"]], [1.0]),
    ):
        run2, _, _ = megatron_blend(prefixes, weights)  # rebuilt, as a restarted job does
        after = [sample_key(run2[i]) for i in range(MEG_RESUME, MEG_SIZE)]
        repeated = len(set(after) & set(before))
        never = len(set(planned) - set(after) - set(before))
        if hasattr(run2, "dataset_index"):
            sources = Counter(int(run2.dataset_index[i]) for i in range(MEG_RESUME, MEG_SIZE))
        else:  # one prefix: the builder gives its GPTDataset itself, no blend
            sources = Counter({0: len(after)})
        if after == planned:
            text = f"the same {len(after)} samples as planned: 0 repeated, 0 skipped"
        else:
            text = (
                f"accepted silently; of the {len(after)} samples after the resume, {repeated} "
                f"had been trained on before it; {never} of the {len(planned)} samples planned "
                f"after it are never read (per source after it: "
                + ", ".join(f"{'abc'[s]} {sources[s]}" for s in sorted(sources))
                + ")"
            )
        facts.append((f"resume at {MEG_RESUME} consumed samples, {label}", text))
    try:
        _, valid, _ = megatron_blend(
            [],
            None,
            blend=None,
            split=None,
            blend_per_split=[([p["a"], p["b"]], [0.5, 0.5]), ([p["a"], p["b"]], None), None],
            multiple_validation_sets=True,
            full_validation=True,
            sizes=[MEG_SIZE, None, 0],
        )
    except Exception as exc:  # noqa: BLE001
        facts.append(("per-source validation", f"{type(exc).__name__}: {first_line(exc)}"))
    else:
        kinds = type(valid).__name__
        lens = [len(d) for d in valid] if isinstance(valid, list) else len(valid)
        facts.append(
            (
                "per-source validation (multiple_validation_sets=True, blend_per_split)",
                f"built in: the valid split is a {kinds} of {len(valid)} datasets, one per "
                f"prefix ({lens} samples)",
            )
        )
    return facts


# --------------------------------------------------------------------------------------------
# MosaicML streaming


def probe_mosaic() -> list[tuple[str, str]]:
    try:
        import streaming  # noqa: F401
    except ImportError:
        return [
            (
                "all",
                "not measured: mosaicml-streaming is not installed (every release pins an older "
                "numpy, transformers and huggingface_hub than this environment's)",
            )
        ]
    return [("all", "installed, but no probe is written for it yet")]


# --------------------------------------------------------------------------------------------


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="compare-mixtures-") as tmp:
        root = Path(tmp)
        (root / "litdata").mkdir()
        (root / "megatron").mkdir()
        rows += [("litdata", k, v) for k, v in probe_litdata(root / "litdata")]
        rows += [("megatron-core", k, v) for k, v in probe_megatron(root / "megatron")]
        rows += [("mosaicml-streaming", k, v) for k, v in probe_mosaic()]
    width = max(len(r[1]) for r in rows)
    library = None
    for lib, what, fact in rows:
        if lib != library:
            print(f"\n{lib}")
            library = lib
        print(f"  {what:<{width}}  {fact}")


if __name__ == "__main__":
    main()
