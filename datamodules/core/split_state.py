"""What a map-style DataModule keeps in a checkpoint: the split fingerprint and the train position.

:class:`SplitState` is mixed into :class:`~datamodules.BaseDataModule`. Lightning calls
``state_dict()`` when it saves a checkpoint and ``load_state_dict()`` when it restores one
(``Trainer.fit(ckpt_path=...)``, ``load_from_checkpoint``); everything in the state is plain
data. A subclass adds its own entries by overriding ``state_dict`` (calling ``super()``) and
restores them in ``_restore_extra_state``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SplitState"]


class SplitState:
    """``state_dict`` / ``load_state_dict`` of :class:`~datamodules.BaseDataModule` (a mixin)."""

    fingerprint: str | None
    split_indices: Any
    _train_loader: Any
    _samplers: dict[str, Any]
    _pending_fingerprint: str | None
    _pending_sampler_state: dict[str, Any] | None

    def state_dict(self) -> dict[str, Any]:
        """Returns what resume needs: the split fingerprint and the train sampler position."""
        state: dict[str, Any] = {"split_fingerprint": self.fingerprint}
        if self.split_indices is not None:
            state["split_sizes"] = {k: len(v) for k, v in self.split_indices.items()}
        loader = self._train_loader() if self._train_loader is not None else None
        if loader is not None:
            state["train_sampler"] = loader.state_dict()["sampler"]
        elif "train" in self._samplers:  # the loader is gone; the sampler knows its position
            state["train_sampler"] = self._samplers["train"].state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Checks the split against the saved one and restores the train position.

        Raises:
            ValueError: If the saved split differs from this module's split.
        """
        saved = state_dict.get("split_fingerprint")
        if saved is not None and self.fingerprint is None:
            self._pending_fingerprint = saved  # checked once setup has made the split
        elif saved is not None:
            self._check_fingerprint(saved)
        sampler_state = state_dict.get("train_sampler")
        loader = self._train_loader() if self._train_loader is not None else None
        if sampler_state is not None and loader is not None:
            loader.load_state_dict({"sampler": sampler_state})
        elif sampler_state is not None:
            self._pending_sampler_state = sampler_state
        self._restore_extra_state(state_dict)

    def _restore_extra_state(self, state_dict: dict[str, Any]) -> None:
        """Subclasses restore their own entries of ``state_dict`` here (e.g. a vocabulary)."""

    def _check_fingerprint(self, saved: str) -> None:
        if saved != self.fingerprint:
            raise ValueError(
                f"{type(self).__name__}: the checkpoint's split fingerprint {saved} differs from "
                f"this run's {self.fingerprint}: the data or the split arguments (val_split, "
                "test_split, split_seed, splits, stratify) changed, so the resumed run would "
                "train on other samples."
            )
