"""Forecasting windows over many series: :class:`~datamodules.TimeSeriesDataModule` and its parts.

* :mod:`~datamodules.time_series.inputs`: frames, arrays and files as long columns;
* :mod:`~datamodules.time_series.calendar`: the time grid at ``freq`` and calendar features;
* :mod:`~datamodules.time_series.series`: split parts in time and value checks;
* :mod:`~datamodules.time_series.store`: the memory-mapped store, written once;
* :mod:`~datamodules.time_series.windows`: the window plan of a split and the draw sampler;
* :mod:`~datamodules.time_series.views`: batches of windows in transformers' names;
* :mod:`~datamodules.time_series.datamodule`: the DataModule that composes them.
"""

__all__: list[str] = []
