"""What a StreamingDataModule keeps in a checkpoint: the train shards' fingerprint, the split
sizes and the train stream's position (plain data), and how it restores them.

:class:`StreamState` is mixed into :class:`~datamodules.StreamingDataModule`; the position is
the same dict the train loader's ``state_dict`` gives, which Lightning also saves with the
loops, and it restores elastically (:mod:`datamodules.stream_engine.elastic`). A mixed
train split's position holds its mix, which a resume continues, changed or not
(:mod:`datamodules.stream_parts.mix_resume`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["StreamState"]


class StreamState:
    """``state_dict`` / ``load_state_dict`` of :class:`~datamodules.StreamingDataModule`."""

    fingerprint: str | None
    files: dict[str, Any]
    shards: dict[str, list[Any]]
    _pending_stream_state: dict[str, Any] | None
    _train_stream: Any

    def state_dict(self) -> dict[str, Any]:
        """The train shards' fingerprint, the split sizes and the train stream's position
        (the same dict the train loader's ``state_dict`` gives, which Lightning also saves)."""
        state: dict[str, Any] = {"split_fingerprint": self.fingerprint}
        if self.shards:
            state["split_sizes"] = {k: self.split_size(k) for k in self.shards}
        loader = self._live_train_loader()
        if loader is not None:
            state["train_stream"] = loader.state_dict()
        elif self._pending_stream_state is not None:
            state["train_stream"] = self._pending_stream_state
        elif self._train_stream is not None:  # the loader is gone: what it delivered
            state["train_stream"] = self._train_stream.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the train position; the next train epoch resumes after the saved batches.

        The world size, worker count and batch size may differ from the checkpoint's (the
        rest of the epoch is re-split exactly over this run's ranks and workers).

        A mixed train split may resume with other weights, schedules or sources: the epoch
        the checkpoint interrupted ends as it was planned and the new mix applies from the
        next one (:mod:`datamodules.stream_parts.mix_resume`).

        Raises:
            ValueError: The train shards differ from the checkpoint's (for a mixed split: a
                source's shards under the same name), or (when the loader is built)
                ``shuffle_seed``, ``shuffle``, ``shuffle_buffer`` or ``drop_last`` differ.
        """
        saved = state_dict.get("split_fingerprint")
        stream_state = state_dict.get("train_stream")
        mixed = str(saved).startswith("mix-") and str(self.fingerprint).startswith("mix-")
        if stream_state is not None and "mix" in stream_state and self.mixes_train():
            self._resume_mix(stream_state)  # checks each source's shards
        elif (
            saved is not None
            and self.fingerprint is not None
            and saved != self.fingerprint
            and not mixed
        ):
            raise ValueError(
                f"{type(self).__name__}: the checkpoint's train shards (fingerprint {saved}) "
                f"differ from this run's ({self.fingerprint}): train_files lists other shards, "
                "or they hold other record counts; resuming would repeat or skip records."
            )
        if stream_state is None:
            return
        loader = self._live_train_loader()
        if loader is not None:
            loader.load_state_dict(stream_state)
        else:
            self._pending_stream_state = stream_state

    def mixes_train(self) -> bool:
        """Whether ``train_files`` is a list of Sources."""
        given = self.files.get("train")
        return bool(given) and not isinstance(given[0], str)
