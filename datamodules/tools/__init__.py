"""Tools around the DataModules: the data-wait monitor, the worker tuner and ``inspect``.

* :mod:`~datamodules.tools.monitor`: :class:`~datamodules.DataWaitMonitor`.
* :mod:`~datamodules.tools.tuner`: times candidate worker counts and prefetch factors.
* :mod:`~datamodules.tools.inspect_cli`: ``python -m datamodules inspect``.
* :mod:`~datamodules.tools.descriptions`: the text that ``inspect`` prints.
* :mod:`~datamodules.tools.pictures`: its pictures, drawn with matplotlib (the ``plots`` extra)
  through :mod:`~datamodules.tools.figures`.

Tools import only ``core``. Importing this package registers the tools that
:class:`~datamodules.BaseDataModule` hands work to (see :mod:`datamodules.core.hooks`).
"""

from __future__ import annotations

from typing import Any

from datamodules.core.hooks import register_tool
from datamodules.tools.descriptions import describe_datamodule
from datamodules.tools.tuner import tune_datamodule

__all__: list[str] = []


def _plot_tensor_batch(batch: Any, path: Any, dm: Any = None) -> Any:
    # matplotlib is imported only when a picture is drawn.
    from datamodules.tools.pictures import plot_tensor_batch

    # The id of image positions, of DataModules of conversations about images (an
    # AttributeError elsewhere, which getattr turns into None).
    image_token_id = getattr(dm, "image_token_id", None)
    return plot_tensor_batch(batch, path, image_token_id=image_token_id)


register_tool("tune", tune_datamodule)
register_tool("describe", describe_datamodule)
register_tool("plot_batch", _plot_tensor_batch)
