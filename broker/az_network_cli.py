"""`kipper cluster partition`: cut and heal the network of a cluster started with
`kipper cluster up --netns` (broker/az_partition.py; docs/cluster.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import az_partition
from .az_network import AzLayout


def _partition(args: argparse.Namespace) -> int:
    state = args.data_dir / "network.json"
    if not state.exists():
        print(f"no {state}: is a `kipper cluster up --netns --data-dir {args.data_dir}` "
              "running?", file=sys.stderr)
        return 2
    layout = AzLayout.load(state)
    try:
        match args.cut:
            case "az":
                az_partition.apply(layout, az_partition.cut_az(layout, _az(layout, args.az)))
            case "broker":
                if args.node not in layout.brokers:
                    raise ValueError(f"no broker {args.node}")
                az_partition.apply(layout, az_partition.cut_broker(layout, args.node))
            case "path":
                az_partition.apply(layout, az_partition.cut_path(
                    layout, _az(layout, args.a), _az(layout, args.b), args.one_way))
            case "object-storage":
                az_partition.apply(layout, az_partition.cut_object_storage(
                    layout, _az(layout, args.az)))
            case "heal":
                az_partition.heal(layout, args.name)
    except (ValueError, ProcessLookupError) as error:
        print(f"cannot partition: {error}", file=sys.stderr)
        return 2
    cuts = az_partition.active_cuts(layout)
    print("cut: " + ("; ".join(cut.name for cut in cuts) if cuts else "nothing"))
    return 0


def _az(layout: AzLayout, az: str) -> str:
    if az not in layout.azs:
        raise ValueError(f"no AZ {az!r} (the cluster's: {', '.join(layout.azs)})")
    return az


def add_partition_command(commands: argparse._SubParsersAction) -> None:
    partition = commands.add_parser(
        "partition", help="cut or heal the network of a `cluster up --netns` cluster",
        description=__doc__)
    partition.add_argument("--data-dir", type=Path, default=Path("data/cluster"),
                           help="the cluster's --data-dir (default data/cluster)")
    cuts = partition.add_subparsers(dest="cut", required=True)
    az = cuts.add_parser("az", help="cut an AZ off: other AZs, object storage, the host")
    az.add_argument("az")
    broker = cuts.add_parser("broker", help="cut one broker off from everything outside its AZ")
    broker.add_argument("node", type=int)
    path = cuts.add_parser("path", help="cut the path between two AZs only")
    path.add_argument("a")
    path.add_argument("b")
    path.add_argument("--one-way", action="store_true", help="only frames from A to B")
    storage = cuts.add_parser("object-storage", help="cut an AZ off from object storage only")
    storage.add_argument("az")
    heal = cuts.add_parser("heal", help="lift every cut, or the one named")
    heal.add_argument("name", nargs="?")
    cuts.add_parser("show", help="list the cuts in force")
    partition.set_defaults(func=_partition)
