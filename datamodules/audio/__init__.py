"""Speech and sound: :class:`~datamodules.audio.datamodule.AudioDataModule` and its parts
(clip index, decoder, batch view, features on the device)."""

from datamodules.audio.datamodule import AudioDataModule

__all__ = ["AudioDataModule"]
