"""AudioDataModule: speech and sound clips, decoded in the workers, batched by count or by
seconds of audio, features computed on the Trainer's device.

Composed of parts that hold their own state: the clip index (:mod:`datamodules.audio.clips`:
manifests and class folders, :mod:`datamodules.audio.shard_clips`: tars and Parquet / Arrow
tables through the shard layer, :mod:`datamodules.audio.inputs`: one split's inputs;
durations without decoding, their headers cached by :mod:`datamodules.audio.header_cache`),
the file opener (:mod:`datamodules.audio.files`: local, HTTP, S3 with the remote options of
streams), the decoder (:mod:`datamodules.audio.decoding`: soundfile + soxr, int16 where
lossless), the batch view (:mod:`datamodules.audio.batches`), the length-bucketed sampler of
:mod:`datamodules.core.buckets` (``max_duration`` is its budget in samples, padding counted;
DDP-even and elastically resumable), Source mixtures (:mod:`datamodules.audio.mixing`) and
the feature extractor (:mod:`datamodules.audio.features`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from datamodules.audio.batches import AudioBatchView, float_waveforms
from datamodules.audio.clips import ClipIndex
from datamodules.audio.decoding import DECODERS, AudioDecoder
from datamodules.audio.features import FEATURES, AudioFeatures
from datamodules.audio.files import AudioFiles
from datamodules.audio.header_cache import index_cache_dir
from datamodules.audio.inputs import first_record_has, read_inputs
from datamodules.audio.mixing import ClipMixture, MixedClipView, check_split_input
from datamodules.core.base import BaseDataModule
from datamodules.core.buckets import BucketBatchSampler
from datamodules.core.checks import (
    check_bool,
    check_choice,
    check_int,
    check_number,
    check_on_error,
    check_string,
)
from datamodules.core.hardware import AUTO
from datamodules.core.keywords import shared_arguments
from datamodules.core.mixture import Source
from datamodules.core.overlong import OVERLONG, OverlongReport
from datamodules.core.samplers import IndexBatchSampler
from datamodules.core.skipped import SkipChannel, Skipped
from datamodules.core.summary import counted
from datamodules.core.views import SplitView
from datamodules.stream_parts.arguments import module_remote_options
from datamodules.tokenizing.loading import load_tokenizer

__all__ = ["AudioDataModule"]

Inputs = str | os.PathLike | list | tuple | None


class AudioDataModule(BaseDataModule):
    """Speech and sound: ``AudioDataModule("train.jsonl", val="dev.jsonl", max_duration=60)``.

    Inputs are NeMo-style JSONL manifests (one record a line: ``audio_filepath``, relative to
    the manifest's folder or absolute, ``duration`` and ``offset`` in seconds, ``text``), Hugging
    Face audio tables (Parquet or Arrow files with an ``audio`` column of ``{bytes, path}``, as
    ``datasets``' ``Audio`` feature stores it), webdataset tar shards (an audio member, ``txt``
    or ``json``) -- the encoded clips of tables and tars are held in memory -- or a folder of
    class sub-folders, local or remote (each file's label is its sub-folder, as Hugging Face's
    AudioFolder gives it; ``s3://bucket/speech/`` is listed by fsspec, ``http://host/speech/``
    from its index page of links). ``val`` / ``test`` replace the random ``val_split`` /
    ``test_split``.

    Clips are decoded in the loader's workers by soundfile, resampled to ``sample_rate`` by soxr
    and averaged to mono; a manifest segment (``offset`` / ``duration``) reads only its frames.
    Durations come from the manifest or the file headers: batching never decodes to measure.

    A batch is a dict: ``input_values`` float32 (B, T) (int16 out of the loader where every
    clip is 16-bit PCM at ``sample_rate`` with nothing to resample or average: half the bytes
    to move; :meth:`on_after_batch_transfer` makes it the exact float32 on the device),
    ``attention_mask``, ``lengths`` (samples), then ``label`` (int64: folders, or
    ``label_key``), and ``labels`` (token ids, -100 padded, with a ``tokenizer``) or ``text``
    (strings) for transcripts. With
    ``features="log_mel"`` or ``"whisper"`` the waveforms cross to the device as they are and
    become ``input_features`` there (:meth:`on_after_batch_transfer`).

    Override :meth:`load_manifest` to list the clips some other way.

    Args:
        train: The train clips: a manifest path, a Parquet / Arrow table, a tar shard, a class
            folder (a URL without an extension or ending in ``/`` is one), a folder
            ``Dataset.save_to_disk`` wrote (paths or URLs, globs and brace patterns), or a list
            of them; or a list of
            :class:`~datamodules.Source` (a mixture, batched by ``batch_size`` or
            ``max_duration``).
        val: Validation clips (same forms), replacing ``val_split``.
        test: Test clips, replacing ``test_split``.
        sample_rate: Samples per second of every clip after resampling.
        audio_key: Audio file extensions of class folders and tar members, ``;``-separated.
        text_key: The manifest field of the transcript (None: ``"text"`` for manifests whose
            first record has one); ``""`` leaves transcripts out.
        label_key: The manifest field of a class label (names or ints); folders' labels are
            their sub-folder names.
        tokenizer: Encodes transcripts into ``labels`` (a ``tokenizers.Tokenizer``, a
            ``transformers`` tokenizer, or the path of a saved one); None gives ``text``
            strings. Not saved in checkpoints: give it again to ``load_from_checkpoint``.
        features: ``"waveform"``, ``"log_mel"`` or ``"whisper"`` (see
            :mod:`datamodules.audio.features`).
        n_mels: Mel bands of the features (Whisper: 80, or 128 for large-v3).
        max_duration: Seconds of audio per batch, padding counted (dynamic batches, length
            bucketed; over a mixture each epoch's clips, its quotas exact); None batches
            ``batch_size`` clips.
        max_seconds: The longest clip; longer ones follow ``overlong``.
        overlong: ``"drop"``, ``"truncate"`` (a random crop of ``max_seconds`` in training, the
            centre in evaluation) or ``"error"``; counted in :meth:`summary` and warned once.
        mono: Average the channels; False keeps them (``input_values`` (B, C, T)).
        decoder: ``"soundfile"`` or ``"torchcodec"`` (frames by TorchCodec, soxr resampling).
        on_error: ``"raise"`` or ``"skip"`` bad records and undecodable clips, named with
            their file and line and counted in :attr:`skipped`.
        bucket: Group train clips of similar length when batching by ``batch_size``.
        storage_options: Passed to fsspec for remote inputs and audio files (``http(s)://``,
            ``s3://``...; e.g. an S3 ``endpoint_url``); credentials are never saved.
        retries: Retries of a transient remote failure, with exponential backoff.
        timeout: Seconds a remote request may go without producing a byte.
        cache_dir: Keep remote audio files in this directory (downloaded once, shared by
            processes and runs); None reads them in place with range requests.
        cache_limit: Bytes (or a string such as ``"50GB"``) the cache may hold (LRU).
        index_cache: Where the headers read for durations are cached across runs: a
            directory, None for the default (``$DATAMODULES_CACHE/audio`` or
            ``~/.cache/datamodules/audio``), False to read them at every setup.
        epoch_size: With weighted train Sources: clips per epoch over all ranks (default:
            all the sources' clips), split between them by weight.
    """

    work = "decode"
    hparams_ignore = (*BaseDataModule.hparams_ignore, "tokenizer")

    def __init__(
        self,
        train: Inputs = None,
        val: Inputs = None,
        test: Inputs = None,
        *,
        sample_rate: int = 16000,
        audio_key: str = "flac;wav;mp3;ogg;opus",
        text_key: str | None = None,
        label_key: str | None = None,
        tokenizer: Any = None,
        features: str = "waveform",
        n_mels: int = 80,
        max_duration: float | None = None,
        max_seconds: float | None = None,
        overlong: str = "drop",
        mono: bool = True,
        decoder: str = "soundfile",
        on_error: str = "raise",
        bucket: bool = True,
        storage_options: dict[str, Any] | None = None,
        retries: int = 5,
        timeout: float = 60.0,
        cache_dir: str | os.PathLike | None = None,
        cache_limit: int | str | None = None,
        index_cache: str | os.PathLike | bool | None = None,
        epoch_size: int | None = None,
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
        super().__init__(**shared_arguments(locals()))
        self.train, self.val, self.test = (
            check_split_input(train, "train", allow_none=type(self).load_manifest
                              is not AudioDataModule.load_manifest),
            check_split_input(val, "val", True),
            check_split_input(test, "test", True),
        )  # fmt: skip
        check_int(sample_rate, "sample_rate", 1)
        check_string(audio_key, "audio_key", "extensions separated by ';' (e.g. 'flac;wav')")
        check_string(
            text_key, "text_key", "a field name or None", allow_none=True, allow_empty=True
        )
        check_string(label_key, "label_key", "a field name or None", allow_none=True)
        check_choice(features, "features", FEATURES)
        check_int(n_mels, "n_mels", 1)
        check_number(max_duration, "max_duration", above=0, allow_none=True, what="seconds")
        check_number(max_seconds, "max_seconds", above=0, allow_none=True, what="seconds")
        check_choice(overlong, "overlong", OVERLONG)
        check_bool(mono, "mono")
        check_choice(decoder, "decoder", DECODERS)
        check_on_error(on_error)
        check_bool(bucket, "bucket")
        if features == "whisper" and sample_rate != 16000:
            raise ValueError(
                f"sample_rate={sample_rate} is not accepted with features='whisper': Whisper "
                "features are defined at 16000 Hz."
            )
        check_int(epoch_size, "epoch_size", 1, allow_none=True)
        #: The train split's Sources (``train=[Source(...), ...]``): quotas, logs, summary.
        self.mix = ClipMixture(self.train if _sources(self.train) else None, epoch_size)
        self.mix.owner = self
        if features != "waveform" and not mono:
            raise ValueError(
                f"mono=False is not accepted with features={features!r}: give mono=True."
            )
        if max_duration is not None and drop_last:
            raise ValueError(
                "drop_last=True is not accepted with max_duration: duration batches have no "
                "fixed size to complete."
            )
        if decoder == "torchcodec":
            try:
                import torchcodec  # noqa: F401
            except ImportError as error:
                raise ImportError("decoder='torchcodec' needs `pip install torchcodec`.") from error
        self.tokenizer = load_tokenizer(tokenizer)
        self.sample_rate, self.audio_key = sample_rate, audio_key
        self.text_key, self.label_key = text_key, label_key
        self.features, self.n_mels = features, n_mels
        self.max_duration, self.max_seconds, self.overlong = max_duration, max_seconds, overlong
        self.mono, self.decoder, self.on_error, self.bucket = mono, decoder, on_error, bucket
        remote, limit = module_remote_options(
            self, storage_options, retries, timeout, cache_dir, cache_limit
        )
        #: Opens inputs and audio files, local or remote (the remote options of streams).
        self.files = AudioFiles(remote, cache_dir, limit, index_cache_dir(index_cache))
        self.audio_decoder = AudioDecoder(sample_rate, mono, decoder, self.files)
        self.extractor = (
            None if features == "waveform" else AudioFeatures(features, sample_rate, n_mels)
        )
        self.overlong_report = OverlongReport(type(self).__name__, "clip", overlong)
        self.overlong_count = 0
        self._skipped = Skipped()
        self.skip_channel: SkipChannel | None = None
        self.index: ClipIndex | None = None

    # ------------------------------------------------------------------ data
    def load_manifest(self, split: str) -> Any:
        """What a split's clips are: a manifest path, a class folder, a list of them, or a
        list of records (dicts with NeMo's keys: ``audio_filepath``, ``duration``, ``offset``,
        ``text``, and ``label_key``); None when the split is not given. Override to list the
        clips some other way.

        Args:
            split: ``"train"``, ``"val"`` or ``"test"``.
        """
        return {"train": self.train, "val": self.val, "test": self.test}[split]

    def _read(self, split: str, classes: list[str] | None) -> ClipIndex | None:
        spec = self.load_manifest(split)
        if spec is None:
            return None
        mixed = isinstance(spec, list) and spec and isinstance(spec[0], Source)
        text_key = self.text_key
        if text_key is None:
            first = spec[0].files if mixed else spec
            text_key = "text" if first_record_has(first, "text", self.files) else None

        def read_one(inputs: Any) -> ClipIndex:
            return read_inputs(
                inputs,
                sample_rate=self.sample_rate,
                audio_key=[e.strip() for e in self.audio_key.split(";") if e.strip()],
                text_key=text_key or None,
                label_key=self.label_key,
                on_error=self.on_error,
                skipped=self._skipped,
                classes=classes,
                files=self.files,
            )

        if mixed and split == "train":  # a source removed since a checkpoint is read again
            self.mix.reader = lambda files: self._limit(read_one(files))
        return self._limit(ClipMixture.read(spec, read_one) if mixed else read_one(spec))

    def _limit(self, index: ClipIndex) -> ClipIndex:
        """Applies ``max_seconds`` (drop, truncate or error) and checks ``max_duration``."""
        if self.max_seconds is not None:
            over = np.flatnonzero(index.durations > self.max_seconds)
            if len(over) and self.overlong == "error":
                first = int(over[0])
                raise ValueError(
                    f"{index.where[first]}: a clip of {index.durations[first]:.2f} s, more than "
                    f"max_seconds={self.max_seconds} (overlong='error'; {len(over)} such clips); "
                    "use overlong='drop' or 'truncate'."
                )
            self.overlong_count += len(over)
            if len(over) and self.overlong == "drop":
                keep = np.setdiff1d(np.arange(len(index)), over)
                if not len(keep):
                    raise ValueError(f"every clip is longer than max_seconds={self.max_seconds}.")
                index = index.subset(keep)
            elif len(over):
                index.lengths[over] = round(self.max_seconds * self.sample_rate)
        if self.max_duration is not None:
            budget = self._budget()
            too_long = np.flatnonzero(index.lengths > budget)
            if len(too_long):
                first = int(too_long[0])
                seconds = index.lengths[first] / self.sample_rate
                raise ValueError(
                    f"{index.where[first]}: a clip of {seconds:.2f} s does not fit "
                    f"max_duration={self.max_duration} ({len(too_long)} such clips): raise "
                    f"max_duration, or set max_seconds<={self.max_duration}."
                )
        return index

    def _budget(self) -> int:
        assert self.max_duration is not None
        return int(self.max_duration * self.sample_rate)

    def build_dataset(self) -> ClipIndex:
        self._skipped, self.overlong_count = Skipped(), 0
        if self.on_error == "skip":
            self.skip_channel = SkipChannel()
        index = self._read("train", None)
        if index is None:
            raise ValueError("load_manifest('train') returned None: there is nothing to train on.")
        self.index = index
        return index

    def split_sources(self) -> dict[str, ClipIndex]:
        assert self.index is not None
        sources = {}
        for split in ("val", "test"):
            index = self._read(split, self.index.classes)
            if index is not None:
                sources[split] = index
        limits = f"max_seconds={self.max_seconds}"
        self.overlong_report.announce(self.overlong_count, limits)
        return sources

    def labels(self) -> torch.Tensor:
        assert self.index is not None
        if self.index.labels is None:
            raise ValueError("stratify=True needs class labels: folders, or label_key=.")
        return torch.from_numpy(self.index.labels)

    def num_samples(self, dataset: ClipIndex) -> int:
        return len(dataset)

    def make_view(self, split: str, dataset: ClipIndex, indices: torch.Tensor) -> SplitView:
        if split == "train" and self.mix.sources is not None:
            return self.mix.view(dataset, indices, self.shuffle, **self._view_options(split))
        return AudioBatchView(dataset, indices, **self._view_options(split))

    def _view_options(self, split: str) -> dict[str, Any]:
        return dict(
            decoder=self.audio_decoder,
            transform=self.transform_for(split),
            train=split == "train",
            max_seconds=self.max_seconds if self.overlong == "truncate" else None,
            tokenizer=self.tokenizer,
            on_error=self.on_error,
            skips=self.skip_channel,
            seed=self.shuffle_seed,
        )

    def make_sampler(self, split: str, view: SplitView, rank: int, world: int) -> IndexBatchSampler:
        assert isinstance(view, AudioBatchView)
        train = split == "train"
        by_seconds = self.max_duration is not None
        if isinstance(view, MixedClipView):
            return self.mix.sampler(
                view, self.batch_size, self.shuffle and train, self._budget() if by_seconds
                else None, drop_last=self.drop_last and train, seed=self.shuffle_seed,
                num_replicas=world, rank=rank,
            )  # fmt: skip
        lengths = torch.from_numpy(view.index.lengths)[view.indices]
        return BucketBatchSampler(
            lengths,
            None if by_seconds else self.batch_size,
            batch_by="tokens" if by_seconds else "samples",
            max_tokens=self._budget() if by_seconds else None,
            bucket=by_seconds or (self.bucket and train),
            shuffle=self.shuffle and train,
            drop_last=self.drop_last and train,
            seed=self.shuffle_seed,
            num_replicas=world,
            rank=rank,
        )

    def make_loader(self, split: str) -> Any:
        loader = super().make_loader(split)
        hooks = [self.report_skipped] if self.skip_channel is not None else []
        hooks += [h for h in [self.mix.epoch_end(loader)] if h is not None]
        if hooks:
            loader.on_epoch_end = hooks[0] if len(hooks) == 1 else lambda: [h() for h in hooks]
        return loader

    def report_skipped(self) -> None:
        """Warns about the clips the workers left out since the last report (each epoch's end)."""
        if self.skip_channel is None:
            return
        new = self.skip_channel.receive(self._skipped)
        if new:
            shown = "; ".join(f"{where} ({why})" for where, why in new[:5])
            more = f" and {len(new) - 5} more" if len(new) > 5 else ""
            warnings.warn(
                f"{type(self).__name__} left out {len(new)} undecodable clip(s) this epoch "
                f"(on_error='skip'): {shown}{more}. All of them: dm.skipped.",
                RuntimeWarning,
                stacklevel=2,
            )

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """On the batch's device: int16 ``input_values`` (16-bit PCM at the target rate) become
        exactly the float32 the decoder gives, then ``input_features`` are computed
        (``features`` other than ``"waveform"``)."""
        if isinstance(batch, dict) and "input_values" in batch:
            batch = float_waveforms(batch)
            if self.extractor is not None:
                return self.extractor(batch, cpu_threads=1 if self._workers_hold_cores() else None)
        return batch

    def _workers_hold_cores(self) -> bool:
        """Whether the loader of the stage running now (train without a Trainer) has workers:
        then features on a CPU run on one thread, beside the workers' decoding."""
        trainer = self._trainer()
        split = "train"
        if trainer is not None and not trainer.training:
            if trainer.sanity_checking or trainer.validating:
                split = "val"
            elif trainer.testing:
                split = "test"
            elif trainer.predicting:
                split = "predict"
        settings = self._settings.get(split)
        return settings is not None and settings.num_workers > 0

    def quotas(self, epoch: int, split: str = "train") -> dict[str, int]:
        """The clips each train Source gives in ``epoch``, by source name (a mixture only)."""
        return self.mix.quotas(epoch, split)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Checks a checkpoint's train mixture against this one (a changed mix continues:
        :mod:`datamodules.audio.mix_resume`), then restores as the base does."""
        super().load_state_dict(self.mix.check_state(state_dict))

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Logs each epoch's quotas of a train mixture as ``mix/<name>`` (its first batch)."""
        self.mix.log()
        return batch

    # ------------------------------------------------------------------ views of the data
    @property
    def classes(self) -> list[str] | None:
        """Class names in label order (folders, or named labels), else None."""
        self._require_setup()
        assert self.index is not None
        return self.index.classes

    @property
    def num_classes(self) -> int | None:
        """The number of classes, or None without named classes."""
        classes = self.classes
        return None if classes is None else len(classes)

    @property
    def skipped(self) -> Skipped:
        """Records and clips left out under ``on_error="skip"`` (file, line, reason)."""
        if self.skip_channel is not None:
            self.skip_channel.receive(self._skipped)
        return self._skipped

    def extra_summary(self) -> list[str]:
        lines = []
        if self.index is not None:
            seconds = float(self.index.durations.sum())
            total = f"{seconds / 3600:.2f} h" if seconds >= 360 else f"{seconds:.1f} s"
            lines.append(
                f"audio: {counted(len(self.index), 'clip')} ({total}) at "
                f"{self.sample_rate} Hz, features={self.features!r}"
            )
        if self.max_duration is not None:
            lines.append(f"batches: at most {self.max_duration} s of audio each, padding counted")
        if self.max_seconds is not None:
            lines.append(
                self.overlong_report.line(self.overlong_count, f"max_seconds={self.max_seconds}")
            )
        if self._skipped.total:
            lines.append(self._skipped.summary())
        return lines + self.mix.summary_lines()


def _sources(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and isinstance(value[0], Source)
