"""The `kipper` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from importlib.metadata import entry_points
from pathlib import Path

import uvloop

from storage.objectstore import cli as objectstore_cli
from storage.objectstore.latency import LATENCY_PROFILES

from . import launcher
from .config import load_config
from .metrics import LISTENING_LINE as METRICS_LISTENING_LINE

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
        "controller": args.controller, "broker_role": args.broker_role,
        "metrics_listener": args.metrics_listener, "s3_endpoint": args.s3_endpoint,
        "s3_access_key": args.s3_access_key, "s3_secret_key": args.s3_secret_key,
        "s3_latency_profile": args.s3_latency_profile,
        "capture_trace_dir": args.capture_trace,
    })
    broker = Broker(config)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    host, _ = config.host_port
    # Tests and the cluster launcher read this line to learn the bound port.
    role = "broker" if config.broker_role else "controller"
    print(f"kipper {role} {config.node_id} listening on {host}:{broker.bound_port}", flush=True)
    if broker.metrics is not None:
        print(METRICS_LISTENING_LINE + broker.metrics.url, flush=True)
    await stop.wait()
    log.info("shutting down")
    await broker.stop()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kipper", description=__doc__)
    parser.add_argument("--log-level", default="INFO")
    commands = parser.add_subparsers(dest="command", required=True)

    broker = commands.add_parser("broker", help="run one broker")
    controller = commands.add_parser("controller", help="run a controller-only node")
    for command in (broker, controller):
        _add_node_arguments(command)
    broker.add_argument("--controller",
                        help="host:port of the controller (default: this broker runs it)")
    broker.add_argument("--auto-create-topics", action="store_true", default=None,
                        help="create unknown topics on Metadata requests")
    broker.add_argument("--default-storage-mode",
                        choices=["classic", "active-tiered", "diskless"])
    broker.add_argument("--num-partitions", type=int, help="default partition count")
    broker.add_argument("--s3-endpoint",
                        help="S3 endpoint URL of the object store (MinIO, LocalStack, AWS)")
    broker.add_argument("--s3-access-key", help="default: botocore's credential chain")
    broker.add_argument("--s3-secret-key")
    broker.add_argument("--s3-latency-profile", choices=sorted(LATENCY_PROFILES),
                        help="delay added to every object-store request (default none)")
    broker.add_argument("--capture-trace", type=Path, metavar="DIR",
                        help="write the produce traffic received as a bench trace in DIR")
    broker.set_defaults(func=lambda args: uvloop.run(_run_broker(args)), broker_role=None)
    controller.set_defaults(func=lambda args: uvloop.run(_run_broker(args)), broker_role=False,
                            controller=None, auto_create_topics=None,
                            default_storage_mode=None, num_partitions=None, s3_endpoint=None,
                            s3_access_key=None, s3_secret_key=None,
                            s3_latency_profile=None, capture_trace=None)

    launcher.add_subcommands(commands)
    objectstore_cli.add_subcommands(commands)
    # Higher layers (the bench harness) add their commands through entry points, so this
    # module imports nothing above the broker.
    for command in entry_points(group="kipper.commands"):
        command.load()(commands)
    return parser


def _add_node_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--config", type=Path, help="TOML file with node settings")
    command.add_argument("--node-id", type=int)
    command.add_argument("--listener", help="host:port to bind (port 0 = any free port)")
    command.add_argument("--advertised-listener", help="host:port given to clients")
    command.add_argument("--rack", help="availability zone of this node")
    command.add_argument("--data-dir", type=Path)
    command.add_argument("--metrics-listener",
                         help="host:port of the HTTP metrics endpoint (port 0 = any free port)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.log_level)
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
