"""Forecast statsmodels' bundled series with TimeSeriesDataModule, against the seasonal naive.

The data ships with statsmodels (nothing is downloaded):

* ``co2``: weekly CO2 at Mauna Loa, 1958-2001 (2,284 weeks, 59 missing: gaps masked);
* ``sunspots``: yearly sunspot activity, 1700-2008;
* ``elnino``: monthly sea surface temperature, 1950-2010 (a wide table of years x months,
  turned into one monthly series);
* ``macrodata``: US quarterly macro series, 1959-2009, as a panel of eight series.

Each dataset's last ``horizon`` steps of every series are held out (``test_split=horizon``,
splits in time), a small model (a linear map of the context, relative to its last value, plus
an MLP over the context and the calendar features) trains on windows of the rest, and its
forecast of the held-out steps is scored in MASE (mean absolute error over the in-sample mean
absolute error of the seasonal naive) beside the seasonal naive forecast's own MASE.

Run: ``python examples/forecast.py`` (about 20 s on 2 CPU cores), or ``--fast`` (half the
epochs, about 13 s).
"""

from __future__ import annotations

import argparse
import logging
import warnings
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pandas as pd
import torch
from torch import nn

from datamodules import TimeSeriesDataModule

# Lightning's _pytree calls a torch API that torch deprecates, with a FutureWarning on every fit
# that a user can do nothing about. It is filtered here, in the example scripts, and nowhere else.
warnings.filterwarnings(
    "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
)
# The DataModule offers a validation loader (empty here: val_split=0); the model has no step.
warnings.filterwarnings("ignore", message=r"You passed in a `val_dataloader` but have no")
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
logging.getLogger("datamodules").setLevel(logging.WARNING)


@dataclass
class Dataset:
    """One bundled dataset as a long frame, with its horizon, context and season."""

    name: str
    frame: pd.DataFrame
    freq: str | None
    horizon: int
    context: int
    season: int


def load(name: str) -> Dataset:
    """A statsmodels dataset as a long frame (``id``, ``time``, ``target``)."""
    import statsmodels.api as sm

    data = getattr(sm.datasets, name).load_pandas().data
    if name == "co2":
        frame = pd.DataFrame({"id": "co2", "time": data.index, "target": data["co2"].to_numpy()})
        return Dataset(name, frame, "W-SAT", horizon=52, context=156, season=52)
    if name == "sunspots":
        time = pd.to_datetime(data["YEAR"].astype(int).astype(str))
        frame = pd.DataFrame({"id": "sunspots", "time": time, "target": data["SUNACTIVITY"]})
        return Dataset(name, frame, "YS", horizon=11, context=44, season=11)
    if name == "elnino":
        months = data.drop(columns="YEAR").to_numpy().reshape(-1)
        time = pd.date_range(f"{int(data['YEAR'].iloc[0])}-01-01", periods=len(months), freq="MS")
        frame = pd.DataFrame({"id": "elnino", "time": time, "target": months})
        return Dataset(name, frame, "MS", horizon=12, context=48, season=12)
    if name == "macrodata":
        columns = ["realgdp", "realcons", "realinv", "realgovt", "realdpi", "cpi", "m1", "pop"]
        time = pd.PeriodIndex.from_fields(
            year=data["year"].astype(int), quarter=data["quarter"].astype(int), freq="Q"
        ).to_timestamp()
        frame = pd.concat(
            pd.DataFrame({"id": c, "time": time, "target": data[c].to_numpy()}) for c in columns
        )
        return Dataset(name, frame, "QS", horizon=8, context=24, season=4)
    raise ValueError(f"unknown dataset {name!r}")


class Forecaster(pl.LightningModule):
    """Last value + a linear map of the context relative to it + an MLP with time features."""

    def __init__(self, context: int, horizon: int, features: int, hidden: int = 64) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.linear = nn.Linear(context, horizon)
        width = context * (2 + features) + horizon * features
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, horizon))
        nn.init.zeros_(self.mlp[2].weight)
        nn.init.zeros_(self.mlp[2].bias)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        past, seen = batch["past_values"], batch["past_observed_mask"].float()
        last = past[:, -1:]
        relative = (past - last) * seen
        inputs = [relative, seen, batch["past_time_features"].flatten(1),
                  batch["future_time_features"].flatten(1)]  # fmt: skip
        return last + self.linear(relative) + self.mlp(torch.cat(inputs, 1))

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean absolute error over the observed future steps (scaled values)."""
        mask = batch["future_observed_mask"].float()
        error = (self(batch) - batch["future_values"]).abs() * mask
        return error.sum() / mask.sum().clamp(min=1)

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.log("train_loss", loss, batch_size=len(batch["past_values"]))
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        self.log("val_loss", self.loss(batch), batch_size=len(batch["past_values"]))

    def test_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        self.log("test_loss", self.loss(batch), batch_size=len(batch["past_values"]))

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=3e-3, weight_decay=1e-4)


def seasonal_naive(history: np.ndarray, horizon: int, season: int) -> np.ndarray:
    """The last season repeated: the value ``season`` steps back (NaN-free history)."""
    last = history[-season:]
    return np.array([last[h % season] for h in range(horizon)])


def mase(actual: np.ndarray, forecast: np.ndarray, history: np.ndarray, season: int) -> float:
    """Mean absolute error over the in-sample mean absolute seasonal-naive error."""
    scale = np.nanmean(np.abs(history[season:] - history[:-season]))
    return float(np.nanmean(np.abs(actual - forecast)) / scale)


def run(dataset: Dataset, epochs: int, seed: int = 0) -> tuple[float, float]:
    """Trains on the dataset and returns (model MASE, seasonal naive MASE), averaged over its
    series."""
    pl.seed_everything(seed, verbose=False)
    dm = TimeSeriesDataModule(
        dataset.frame, id_column="id", time_column="time", freq=dataset.freq,
        context_length=dataset.context, prediction_length=dataset.horizon,
        val_split=0, test_split=dataset.horizon, batch_size=64, num_workers=0, store=False,
    )  # fmt: skip
    dm.setup("fit")
    features = len(dm.time_feature_names)
    model = Forecaster(dataset.context, dataset.horizon, features)
    trainer = pl.Trainer(
        max_epochs=epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(model, datamodule=dm)
    ours, naive = [], []
    model.eval()
    for batch in dm.test_dataloader():
        with torch.no_grad():
            forecast = dm.inverse_transform(model(batch), batch).numpy()
        actual = dm.inverse_transform(batch["future_values"], batch).numpy()
        actual[~batch["future_observed_mask"].numpy()] = np.nan
        for row, s in enumerate(batch["series_index"].tolist()):
            sid = dm.series_ids[s]
            values = dataset.frame.loc[dataset.frame["id"] == sid, "target"].to_numpy()
            history = pd.Series(values[: -dataset.horizon]).interpolate().to_numpy()
            base = seasonal_naive(history, dataset.horizon, dataset.season)
            ours.append(mase(actual[row], forecast[row], history, dataset.season))
            naive.append(mase(actual[row], base, history, dataset.season))
    return float(np.mean(ours)), float(np.mean(naive))


def main(argv: list[str] | None = None) -> dict[str, tuple[float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="half the epochs (about 13 s)")
    parser.add_argument("--datasets", nargs="+", default=["co2", "sunspots", "elnino", "macrodata"])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # a tiny model: one thread is fastest on a shared machine
    epochs = {"co2": 4, "sunspots": 60, "elnino": 40, "macrodata": 40}
    results = {}
    print(f"{'dataset':<10} {'MASE model':>10} {'seasonal naive':>15}")
    for name in args.datasets:
        dataset = load(name)
        n = epochs[name] // 2 if args.fast else epochs[name]
        ours, naive = run(dataset, n)
        results[name] = (ours, naive)
        verdict = "beats" if ours < naive else "does NOT beat"
        print(f"{name:<10} {ours:>10.3f} {naive:>15.3f}   ({verdict} the seasonal naive, "
              f"season {dataset.season}, horizon {dataset.horizon})")  # fmt: skip
    return results


if __name__ == "__main__":
    main()
