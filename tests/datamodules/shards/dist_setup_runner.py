"""One rank of a 2-process gloo group (no Trainer) running ``StreamingDataModule.setup("fit")``.

Launched by test_shared_indexing.py as ``python dist_setup_runner.py --rank R --world W --port P
--args JSON --out DIR``. Records which shards this rank scanned, the split's record counts, and
what a second setup (a fresh DataModule, same cache) scanned, in ``DIR/rank{R}.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--args", required=True, help="StreamingDataModule's arguments (JSON)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import torch.distributed as dist

    import datamodules.shards.index as index_module
    from datamodules import StreamingDataModule

    scanned: list[str] = []
    real_scan = index_module._scan

    def counting_scan(path, *rest, **kwargs):
        scanned.append(path)
        return real_scan(path, *rest, **kwargs)

    index_module._scan = counting_scan
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{args.port}",
        rank=args.rank,
        world_size=args.world,
        timeout=timedelta(seconds=90),
    )
    kwargs = json.loads(args.args)
    dm = StreamingDataModule(**kwargs)
    dm.setup("fit")
    first = list(scanned)
    scanned.clear()
    again = StreamingDataModule(**kwargs)
    again.setup("fit")
    record = {
        "rank": args.rank,
        "scanned": first,
        "rescanned": list(scanned),
        "train": [dm.shards["train"].paths, dm.shards["train"].counts],
        "val": [dm.shards["val"].paths, dm.shards["val"].counts],
    }
    dist.barrier()
    dist.destroy_process_group()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{args.rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
