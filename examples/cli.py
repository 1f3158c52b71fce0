"""LightningCLI for every DataModule of the library, with one YAML per DataModule.

Run from the repository root::

    python examples/cli.py fit --config examples/configs/tensor.yaml
    python examples/cli.py fit --config examples/configs/tensor.yaml --data.num_workers tune
    python examples/cli.py fit --config examples/configs/tensor.yaml --trainer.max_steps 20

``--data`` takes any subclass of :class:`datamodules.BaseDataModule` (``subclass_mode_data``)
and ``--model`` any LightningModule (``examples/models.py`` has one per kind of data). Each
config adds :class:`datamodules.DataWaitMonitor`, whose ``data_wait_fraction`` and
``samples_per_sec`` land in ``lightning_logs/<name>/version_*/metrics.csv``. The same file
also works for ``python -m datamodules inspect --config examples/configs/tensor.yaml``.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # so that configs can name examples.models / examples.bundled_data
    sys.path.insert(0, str(ROOT))

import lightning.pytorch as pl  # noqa: E402
from lightning.pytorch.cli import ArgsType, LightningCLI  # noqa: E402

from datamodules import BaseDataModule  # noqa: E402

# Lightning's _pytree calls a torch API that torch deprecates, with a FutureWarning on every fit
# that a user can do nothing about. It is filtered here, in the example scripts, and nowhere else.
warnings.filterwarnings(
    "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
)


def main(args: ArgsType = None, run: bool = True) -> LightningCLI:
    """Builds (and with ``run``, runs) the CLI; ``args`` replaces ``sys.argv[1:]`` in tests."""
    return LightningCLI(
        pl.LightningModule,
        BaseDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        args=args,
        run=run,
        save_config_kwargs={"overwrite": True},
    )


if __name__ == "__main__":
    main()
