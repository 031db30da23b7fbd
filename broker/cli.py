"""The `kipper` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

import uvloop

from storage.objectstore import cli as objectstore_cli

from .config import load_config

log = logging.getLogger("kipper")


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


async def _run_broker(args: argparse.Namespace) -> int:
    from .server import Broker

    config = load_config(args.config, overrides={
        "node_id": args.node_id, "listener": args.listener,
        "advertised_listener": args.advertised_listener, "rack": args.rack,
        "data_dir": args.data_dir, "auto_create_topics": args.auto_create_topics,
        "default_storage_mode": args.default_storage_mode,
        "default_partitions": args.num_partitions,
    })
    broker = Broker(config)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    host, _ = config.host_port
    # Tests and the cluster launcher read this line to learn the bound port.
    print(f"kipper broker {config.node_id} listening on {host}:{broker.bound_port}", flush=True)
    await stop.wait()
    log.info("shutting down")
    await broker.stop()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kipper", description=__doc__)
    parser.add_argument("--log-level", default="INFO")
    commands = parser.add_subparsers(dest="command", required=True)

    broker = commands.add_parser("broker", help="run one broker")
    broker.add_argument("--config", type=Path, help="TOML file with broker settings")
    broker.add_argument("--node-id", type=int)
    broker.add_argument("--listener", help="host:port to bind (port 0 = any free port)")
    broker.add_argument("--advertised-listener", help="host:port given to clients")
    broker.add_argument("--rack", help="availability zone of this broker")
    broker.add_argument("--data-dir", type=Path)
    broker.add_argument("--auto-create-topics", action="store_true", default=None,
                        help="create unknown topics on Metadata requests")
    broker.add_argument("--default-storage-mode",
                        choices=["classic", "active-tiered", "diskless"])
    broker.add_argument("--num-partitions", type=int, help="default partition count")
    broker.set_defaults(func=lambda args: uvloop.run(_run_broker(args)))

    objectstore_cli.add_subcommands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.log_level)
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
