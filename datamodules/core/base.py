"""BaseDataModule: splitting, loader construction, state and summary shared by every DataModule.

A subclass says what its data is; the base class does the rest:

* :meth:`BaseDataModule.build_dataset` (required): the full dataset, built once in ``setup``.
* :meth:`BaseDataModule.split_sources` (optional): separate datasets for ``"val"`` / ``"test"``
  that replace the random split for that stage (e.g. an image folder's ``val_root``).
* :meth:`BaseDataModule.labels` (optional): one label per sample, for ``stratify=True``.
* :meth:`BaseDataModule.make_view` (optional): how a split is fetched a batch at a time; the
  default fetches samples one by one and collates them with :meth:`collate`.
* :meth:`BaseDataModule.make_sampler` (optional): the batch sampler of a split.
* ``work`` (class attribute): ``"memory"``, ``"decode"`` or ``"io"``, which drives the
  ``"auto"`` loader settings (see :mod:`datamodules.core.hardware`).
"""

from __future__ import annotations

import inspect
import os
import weakref
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities.rank_zero import rank_zero_only, rank_zero_warn
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from torch.utils.data import default_collate

from datamodules.core.common_arguments import check_common_arguments
from datamodules.core.context import (
    consumed_train_batches,
    local_hardware,
    log,
    trainer_rank_and_world,
)
from datamodules.core.hardware import (
    AUTO,
    FETCHED,
    TUNE,
    LoaderSettings,
    TuneResult,
    resolve_loader_settings,
)
from datamodules.core.hooks import tool
from datamodules.core.hparams import given_arguments, make_hparams_plain, own_arguments
from datamodules.core.keywords import CheckedKeywords
from datamodules.core.loaders import ResumableDataLoader, WeakCall
from datamodules.core.quiet import HeldFilters
from datamodules.core.samplers import IndexBatchSampler, OverfitBatchSampler
from datamodules.core.skipped import Skipped
from datamodules.core.split_state import SplitState
from datamodules.core.splits import (
    SPLIT_NAMES,
    compute_split_indices,
    empty_split_notes,
    split_fingerprint,
)
from datamodules.core.summary import summary_lines
from datamodules.core.views import SampleBatchView, SplitView

__all__ = ["BaseDataModule", "FEW_WORKERS_WARNING", "STAGE_TO_SPLIT"]

STAGE_TO_SPLIT = {"train": "train", "val": "val", "test": "test"}
FEW_WORKERS_WARNING = r"The '(train|val|test|predict)_dataloader' does not have many workers"


class BaseDataModule(SplitState, pl.LightningDataModule, metaclass=CheckedKeywords):
    """Seeded splits, hardware-aware resumable loaders, state and summary.

    Args:
        batch_size: Samples per batch, per process under DDP.
        val_split: A fraction in [0, 1) (a float, always: ``1.0`` is refused) or a count of
            samples (an int) for validation; ignored when a validation set is given
            explicitly (``splits`` or a subclass's own source).
        test_split: The same for the test split.
        split_seed: Seeds the split generator (``torch.Generator().manual_seed``): the same
            split on every rank, every run and every ``setup`` call.
        splits: Explicit indices ``{"train": idx, "val": idx, "test": idx}`` instead of a
            random split (``val``/``test`` optional).
        stratify: Keep each class's proportion in every split (labels from :meth:`labels`).
            The default is False everywhere except where the labels are classes by
            construction (``ImageFolderDataModule``: True). Continuous labels (floats that
            are not whole numbers) are refused.
        num_workers: An int, or ``"auto"`` (from the CPUs of this process, the local world
            size and the kind of work; see :mod:`datamodules.core.hardware`), or ``"tune"``
            (measured by :meth:`tune_loader` when the first loader is built).
        pin_memory: A bool, or ``"auto"``: True only when the Trainer's accelerator is CUDA.
        persistent_workers: A bool, or ``"auto"``: True whenever ``num_workers > 0``.
        prefetch_factor: Batches each worker loads ahead: an int, or ``"auto"``.
        shuffle: Shuffle the train split every epoch (eval loaders never shuffle).
        drop_last: Drop the last incomplete train batch (eval loaders never drop).
        shuffle_seed: Seed of the per-epoch train order (epoch ``e`` uses ``shuffle_seed + e``);
            defaults to ``split_seed``.
        train_transforms: Applied to training samples (or batches, for tensors).
        eval_transforms: Applied to validation, test and predict samples.
        reuse_batch_memory: With workers, send batches through shared-memory buffers each
            worker reuses (default True; see :mod:`datamodules.core.shared_batches`). False gives
            PyTorch's usual transfer: a new shared-memory segment per batch tensor.
    """

    work: ClassVar[str] = "memory"
    #: With ``work="memory"``: how a batch is made, as ``summary()`` says it (the default view
    #: fetches samples one by one; a view that gathers a batch in one call says so).
    fetch: ClassVar[str] = FETCHED
    #: Constructor arguments that are data or callables, kept out of ``hparams`` (a string
    #: given for one of them is saved); see :mod:`datamodules.core.hparams`.
    hparams_ignore: ClassVar[tuple[str, ...]] = ("train_transforms", "eval_transforms", "splits")
    #: Whether :meth:`tune_loader` can time this kind's loaders (index-sampled ones).
    tunable: ClassVar[bool] = True

    def __init__(
        self,
        *,
        batch_size: int = 32,
        val_split: int | float = 0.1,
        test_split: int | float = 0.0,
        split_seed: int = 42,
        splits: Mapping[str, Any] | None = None,
        stratify: bool = False,
        num_workers: int | str = AUTO,
        pin_memory: bool | str = AUTO,
        persistent_workers: bool | str = AUTO,
        prefetch_factor: int | str | None = AUTO,
        shuffle: bool = True,
        drop_last: bool = False,
        shuffle_seed: int | None = None,
        train_transforms: Callable[[Any], Any] | None = None,
        eval_transforms: Callable[[Any], Any] | None = None,
        reuse_batch_memory: bool = True,
    ) -> None:
        super().__init__()
        check_common_arguments(
            batch_size=batch_size,
            val_split=val_split,
            test_split=test_split,
            split_seed=split_seed,
            splits=splits,
            stratify=stratify,
            num_workers=num_workers,
            pin_memory=pin_memory,
            persistent_workers=persistent_workers,
            prefetch_factor=prefetch_factor,
            shuffle=shuffle,
            drop_last=drop_last,
            shuffle_seed=shuffle_seed,
            train_transforms=train_transforms,
            eval_transforms=eval_transforms,
            reuse_batch_memory=reuse_batch_memory,
        )
        self.save_hyperparameters(ignore=list(self.hparams_ignore))
        given = given_arguments(inspect.currentframe(), self, self.hparams_ignore)
        # What the concrete class's signature takes, not what a subclass fixed for the base.
        own = own_arguments(inspect.currentframe(), self)
        if own is not None:
            for name in [n for n in self._hparams if n not in own]:
                del self._hparams[name]
            given = {name: value for name, value in given.items() if name in own}
        #: Arguments that are not in checkpoints (data, callables, objects), with the reason:
        #: give them again to ``load_from_checkpoint(path, name=value)``.
        self.unsaved_arguments: dict[str, str] = make_hparams_plain(self, given)
        self.batch_size = int(batch_size)
        self.val_split = val_split
        self.test_split = test_split
        self.split_seed = int(split_seed)
        self.explicit_splits = splits
        self.stratify = stratify
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.persistent_workers = persistent_workers
        self.prefetch_factor = prefetch_factor
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.shuffle_seed = self.split_seed if shuffle_seed is None else int(shuffle_seed)
        self.train_transforms = train_transforms
        self.eval_transforms = eval_transforms
        self.reuse_batch_memory = reuse_batch_memory

        self.dataset: Any = None
        self.split_indices: dict[str, torch.Tensor] | None = None
        self.split_datasets: dict[str, Any] = {}
        self.fingerprint: str | None = None
        self._views: dict[str, SplitView] = {}
        self._settings: dict[str, LoaderSettings] = {}
        self._samplers: dict[str, IndexBatchSampler] = {}
        # Weak: a module holding its loader would keep persistent workers alive until the
        # cycle collector frees the module (save_hyperparameters leaves a frame cycle), and
        # DataLoader then waits 5 s per worker to stop them.
        self._train_loader: weakref.ref[ResumableDataLoader] | None = None
        self._pending_sampler_state: dict[str, Any] | None = None
        self._pending_fingerprint: str | None = None
        self._logged = False
        #: The tuner's choice and table, once :meth:`tune_loader` ran (used by every loader).
        self.tuned: TuneResult | None = None

    # ------------------------------------------------------------------ subclass hooks
    def build_dataset(self) -> Any:
        """Returns the full dataset (a Sized, map-style object). Called once, in ``setup``."""
        raise NotImplementedError(f"{type(self).__name__} must implement build_dataset().")

    def num_samples(self, dataset: Any) -> int:
        """Returns the number of samples of a dataset built by this module (default: ``len``)."""
        return len(dataset)

    def split_sources(self) -> dict[str, Any]:
        """Returns datasets given explicitly for ``"val"`` / ``"test"`` (default: none)."""
        return {}

    def labels(self) -> torch.Tensor:
        """Returns one label per sample of the full dataset, for ``stratify=True``."""
        raise NotImplementedError(
            f"stratify=True needs labels: {type(self).__name__} must implement labels()."
        )

    def collate(self, samples: list[Any]) -> Any:
        """Turns a list of samples into a batch (default: ``torch.utils.data.default_collate``)."""
        return default_collate(samples)

    def transform_for(self, split: str) -> Callable[[Any], Any] | None:
        """Returns the transform of a split: train transforms for train, eval ones otherwise."""
        return self.train_transforms if split == "train" else self.eval_transforms

    def make_view(self, split: str, dataset: Any, indices: torch.Tensor) -> SplitView:
        """Returns the object a loader indexes with one batch's index tensor."""
        return SampleBatchView(dataset, indices, self.transform_for(split), self.collate)

    def make_sampler(self, split: str, view: SplitView, rank: int, world: int) -> IndexBatchSampler:
        """Returns the batch sampler of a split for this rank."""
        train = split == "train"
        return IndexBatchSampler(
            len(view),
            self.batch_size,
            shuffle=self.shuffle and train,
            drop_last=self.drop_last and train,
            seed=self.shuffle_seed,
            num_replicas=world,
            rank=rank,
        )

    # ------------------------------------------------------------------ setup and splits
    def setup(self, stage: str | None = None) -> None:
        """Builds the dataset and the splits once; later calls return at once."""
        if self.split_indices is not None:
            return
        dataset = self.build_dataset()
        n = self.num_samples(dataset)
        self.dataset = dataset
        sources = self.split_sources()
        unknown = set(sources) - {"val", "test"}
        if unknown:
            raise ValueError(f"split_sources() returned unknown splits {sorted(unknown)}.")
        if n == 0:
            raise ValueError(f"{type(self).__name__}: the dataset is empty: nothing to train on.")
        asked = {
            "val": 0 if "val" in sources else self.val_split,
            "test": 0 if "test" in sources else self.test_split,
        }
        indices = compute_split_indices(
            n,
            explicit=self.explicit_splits,
            val_split=asked["val"],
            test_split=asked["test"],
            seed=self.split_seed,
            labels=self.labels if self.stratify else None,
        )
        if self.explicit_splits is None:  # said once: setup splits once
            for note in empty_split_notes(n, asked, indices):
                rank_zero_warn(f"{type(self).__name__}: {note}")
        datasets = {name: dataset for name in SPLIT_NAMES}
        for name, source in sources.items():
            datasets[name] = source
            indices[name] = torch.arange(self.num_samples(source), dtype=torch.int64)
        self.dataset = dataset
        self.split_datasets = datasets
        self.split_indices = indices
        source_lengths = {
            f"{k}_length": torch.tensor([self.num_samples(v)]) for k, v in sources.items()
        }
        self.fingerprint = split_fingerprint(n, {**indices, **source_lengths})
        if self._pending_fingerprint is not None:
            self._check_fingerprint(self._pending_fingerprint)
            self._pending_fingerprint = None

    def _require_setup(self) -> dict[str, torch.Tensor]:
        if self.split_indices is None:
            self.setup()
        assert self.split_indices is not None
        return self.split_indices

    def split_size(self, split: str) -> int:
        """Returns the number of samples in ``"train"``, ``"val"`` or ``"test"``."""
        return len(self._require_setup()[split])

    def view(self, split: str) -> SplitView:
        """Returns the split's batch view (created once)."""
        indices = self._require_setup()
        if split not in self._views:
            self._views[split] = self.make_view(split, self.split_datasets[split], indices[split])
        return self._views[split]

    # ------------------------------------------------------------------ hardware and loaders
    def _trainer(self) -> Any:
        return getattr(self, "trainer", None)

    def _rank_world(self) -> tuple[int, int]:
        return trainer_rank_and_world(self._trainer())

    def _hardware(self) -> tuple[int, str | None]:
        """Returns (local world size, accelerator name) from the Trainer, else the process."""
        return local_hardware(self._trainer())

    def loader_settings(self, split: str = "train") -> LoaderSettings:
        """Resolves (and remembers) the loader settings for a split on this hardware."""
        local_world, accelerator = self._hardware()
        tuned = self.tuned
        settings = resolve_loader_settings(
            self.num_workers if tuned is None else tuned.num_workers,
            self.pin_memory,
            self.persistent_workers,
            work=self.work,
            local_world_size=local_world,
            accelerator=accelerator,
            prefetch_factor=self.prefetch_factor if tuned is None else tuned.prefetch_factor,
            fetch=self.fetch,
        )
        if tuned is not None:
            settings = tuned.explain(settings)
        self._settings[split] = settings
        return settings

    def _consumed_batches(self) -> int | None:
        return consumed_train_batches(self._trainer())

    def make_loader(self, split: str) -> ResumableDataLoader:
        """Builds the loader of a split: its view, its sampler and the resolved settings."""
        if self.num_workers == TUNE and self.tuned is None:
            self.tune_loader()
        view = self.view(split)
        rank, world = self._rank_world()
        sampler: Any = self.make_sampler(split, view, rank, world)
        if split == "train" and split in self._samplers:  # a new loader: the next epoch
            sampler.continue_from(self._samplers[split])
        if getattr(self._trainer(), "overfit_batches", 0):  # the same batches every epoch
            sampler = OverfitBatchSampler(sampler)
        settings = self.loader_settings(split)
        loader = ResumableDataLoader(
            view,
            sampler=sampler,
            reuse_batch_memory=self.reuse_batch_memory,
            batches_per_message=getattr(view, "batches_per_message", 1),
            **settings.loader_kwargs(),
        )
        if self.num_workers in (AUTO, TUNE):
            # "auto" chose this count on purpose: Lightning's advice to raise it does not
            # apply to this loader (only while Lightning checks it; see core/quiet.py).
            loader.held_filters = HeldFilters([(FEW_WORKERS_WARNING, PossibleUserWarning)], loader)
        if split == "train":
            loader.consumed_batches = WeakCall(self._consumed_batches)
            loader.find_trainer = WeakCall(self._trainer)
            self._train_loader = weakref.ref(loader)
            if self._pending_sampler_state is not None:
                sampler.load_state_dict(self._pending_sampler_state)
                self._pending_sampler_state = None
                loader.arm_length_correction()
        self._samplers[split] = sampler
        if not self._logged:
            self._logged = True
            self._log_summary()
        return loader

    def tune_loader(
        self,
        stage: str = "fit",
        max_batches: int = 20,
        *,
        workers: Iterable[int] | None = None,
        prefetch_factors: Iterable[int] | None = None,
        repeats: int = 3,
        tolerance: float = 0.05,
        progress: bool | None = None,
    ) -> TuneResult:
        """Times the real loader for candidate worker counts and prefetch factors; keeps the pick.

        The choice applies to every loader built afterwards and its table appears in
        :meth:`summary`. Under DDP, global rank 0 measures and broadcasts the choice. Details
        (candidates, warm-up, the 5 % rule): :mod:`datamodules.tools.tuner`.

        Args:
            stage: ``"fit"`` times the train loader (``"validate"``/``"test"``/``"predict"``:
                the val / test loader).
            max_batches: Batches timed per candidate and repeat.
            workers: Worker counts to try (default 0 .. the CPUs of this rank).
            prefetch_factors: Prefetch factors to try (default (2, 4), or the given int).
            repeats: Measurements per candidate; the median counts.
            tolerance: Fewer workers win when within this fraction of the fastest.
            progress: Show a progress bar (None: only on a terminal).

        Returns:
            The choice and the measured table.

        Raises:
            NotImplementedError: ``tunable`` is False (streams: not index-sampled).
        """
        if not self.tunable:
            raise NotImplementedError(
                f"{type(self).__name__} cannot be tuned: set num_workers to an int or 'auto'."
            )
        self.tuned = tool("tune")(
            self,
            stage,
            max_batches,
            workers=workers,
            prefetch_factors=prefetch_factors,
            repeats=repeats,
            tolerance=tolerance,
            progress=progress,
        )
        self._settings.clear()
        return self.tuned

    @rank_zero_only
    def _log_summary(self) -> None:
        log.info(self.summary())

    def train_dataloader(self) -> ResumableDataLoader:
        """The train loader: shuffled per epoch, disjoint per rank, resumable mid-epoch."""
        return self.make_loader("train")

    def val_dataloader(self) -> ResumableDataLoader | list:
        """The validation loader, or an empty list (no validation) when the split is empty."""
        return self.make_loader("val") if self.split_size("val") else []

    def test_dataloader(self) -> ResumableDataLoader:
        """The test loader."""
        if not self.split_size("test"):
            raise ValueError(
                f"{type(self).__name__} has an empty test split: set test_split (a fraction or "
                "count), give splits['test'], or a test source."
            )
        return self.make_loader("test")

    def predict_dataloader(self) -> ResumableDataLoader:
        """A loader over the test split, else the validation split."""
        for split in ("test", "val"):
            if self.split_size(split):
                return self.make_loader(split)
        raise ValueError(
            f"{type(self).__name__} has no test or validation samples to predict on: set "
            "test_split or val_split."
        )

    @property
    def skipped(self) -> Skipped:
        """Samples left out under ``on_error="skip"``: a list of ``(where, why)`` pairs, the
        same type in every DataModule (empty for those that never skip)."""
        return Skipped()

    # ------------------------------------------------------------------ summary
    def summary(self) -> str:
        """Returns a readable account of the splits and the loader settings, with reasons."""
        return "\n".join(summary_lines(self))

    def extra_summary(self) -> list[str]:
        """Subclasses add lines to :meth:`summary` here."""
        return []

    # ------------------------------------------------------------------ inspect hooks
    def describe_data(self) -> list[str]:
        """Lines that ``python -m datamodules inspect`` prints after the summary.

        The default gives, per split, the sample count and, when :meth:`labels` returns
        integer class labels, each class's count (``inspect`` itself then prints the
        structure of one batch). Override to add what matters for your data (class names,
        sequence-length statistics), e.g. ``super().describe_data() + [...]``.
        """
        return tool("describe")(self)

    def plot_batch(self, batch: Any, path: str | os.PathLike[str]) -> Path:
        """Writes a PNG picture of one batch to ``path`` and returns the path written.

        The default draws token batches (a dict with 2-D ``input_ids``, padded or packed) row
        by row: documents, the tokens the loss trains on, padding, image tokens and images;
        other tensor batches as an image grid for ``(N, C, H, W)`` images, else a heat map of
        the samples' (z-scored) values with their labels and the label counts. Override for
        other data, e.g. with :func:`datamodules.tools.pictures.plot_lengths` for
        variable-length sequences.
        """
        return tool("plot_batch")(batch, path, self)

    def __getstate__(self) -> dict[str, Any]:
        # Pickled for ddp_spawn or spawned workers: weak references and built loaders stay.
        state = self.__dict__.copy()
        state["_train_loader"] = None
        return state

    def __repr__(self) -> str:
        return self.summary()

    __str__ = __repr__
