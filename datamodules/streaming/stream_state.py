"""What a StreamingDataModule keeps in a checkpoint: the train shards' fingerprint, the split
sizes and the train stream's position (plain data), and how it restores them.

:class:`StreamState` is mixed into :class:`~datamodules.StreamingDataModule`; the position is
the same dict the train loader's ``state_dict`` gives, which Lightning also saves with the
loops, and it restores elastically (:mod:`datamodules.streaming.engine.elastic`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["StreamState"]


class StreamState:
    """``state_dict`` / ``load_state_dict`` of :class:`~datamodules.StreamingDataModule`."""

    fingerprint: str | None
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

        Raises:
            ValueError: The train shards differ from the checkpoint's, or (when the loader is
                built) ``shuffle_seed``, ``shuffle``, ``shuffle_buffer`` or ``drop_last``
                differ.
        """
        saved = state_dict.get("split_fingerprint")
        if saved is not None and self.fingerprint is not None and saved != self.fingerprint:
            raise ValueError(
                f"{type(self).__name__}: the checkpoint's train shards (fingerprint {saved}) "
                f"differ from this run's ({self.fingerprint}): train_files lists other shards, "
                "or they hold other record counts; resuming would repeat or skip records."
            )
        stream_state = state_dict.get("train_stream")
        if stream_state is None:
            return
        loader = self._live_train_loader()
        if loader is not None:
            loader.load_state_dict(stream_state)
        else:
            self._pending_stream_state = stream_state
