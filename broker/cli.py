"""The `kipper` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import signal
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import NoReturn

if __name__ == "__main__":
    # A node never uses hypothesis, but kio registers strategies for its types whenever it
    # can import it (a development install has it, for the tests): 0.3-0.6 s of CPU at
    # every node's start (`python -c "import broker.cli, broker.server"`: 1.7-2.0 s with,
    # 1.4 s without), and a cluster starts its brokers and launcher at once.
    sys.modules.setdefault("hypothesis", None)

import uvloop

from storage.objectstore import cli as objectstore_cli

from . import heap, launcher
from .config import BrokerConfig, Flag, load_config, settings
from .listening import METRICS_LISTENING_LINE, AddressInUse, node_line
from .process_exit import exit_without_teardown

log = logging.getLogger("kipper")


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def config_from_args(args: argparse.Namespace, environ: dict[str, str] | None = None
                     ) -> BrokerConfig:
    """The node's settings from `kipper broker` / `kipper controller` arguments: flags
    override KIPPER_* variables, which override the --config file and the defaults."""
    return load_config(args.config, environ=environ, overrides={
        declared.name: getattr(args, declared.name, None) for declared in settings()})


async def _run_broker(args: argparse.Namespace) -> int:
    from .response_memory import return_large_buffers_to_the_os
    from .security.oauthbearer import JwksUnavailable
    from .server import Broker

    config = config_from_args(args)
    return_large_buffers_to_the_os()
    try:
        broker = Broker(config)
    except (ValueError, OSError, JwksUnavailable) as error:
        # A listener, TLS or SASL setting that cannot work (Kafka's message where it has
        # one), an unreadable keystore or JWKS: one line, not a traceback.
        log.error("cannot start node %d: %s", config.node_id, error)
        return 2
    try:
        await broker.start()
    except AddressInUse as error:
        log.error("%s", error)
        await broker.stop()
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, _log_task_stacks)
    # Tests and the cluster launcher read this line to learn the bound ports.
    role = "broker" if config.broker_role else "controller"
    first = broker.listeners.listeners[0]
    print(node_line(role, config.node_id, first.host or "0.0.0.0", first.port,
                    [str(listener) for listener in broker.listeners.listeners]), flush=True)
    if broker.metrics is not None:
        print(METRICS_LISTENING_LINE + broker.metrics.url, flush=True)
    await stop.wait()
    log.info("shutting down")
    await broker.stop()
    return 0


def _log_task_stacks() -> None:
    """SIGUSR1: log where every task of the node waits (the launcher asks before it kills a
    node that did not stop, so the log says what it was stuck on)."""
    lines = []
    for task in asyncio.all_tasks():
        where = " <- ".join(f"{f.f_code.co_name} ({Path(f.f_code.co_filename).name}:{f.f_lineno})"
                            for f in reversed(_awaiting_frames(task.get_coro())))
        lines.append(f"  {task.get_name()}: {where or 'not started'}")
    log.warning("%d tasks:\n%s", len(lines), "\n".join(sorted(lines)))


def _awaiting_frames(coroutine) -> list:
    """The frames of ``coroutine`` and of what it awaits, outermost first (a task's own
    stack stops at its outermost coroutine)."""
    frames = []
    while coroutine is not None:
        frame = getattr(coroutine, "cr_frame", None) or getattr(coroutine, "gi_frame", None)
        if frame is not None:
            frames.append(frame)
        coroutine = getattr(coroutine, "cr_await", None) or getattr(coroutine, "gi_yieldfrom", None)
    return frames


def _run_node(args: argparse.Namespace) -> NoReturn:
    # Threads doing CPU work (the log cleaner) hand the interpreter back to the event loop
    # every 1 ms instead of every 5: a producer's P99 while a log is cleaned fell from
    # 18-34 ms to 6-15 ms (bench/compaction_bench.py, bench/README.md).
    sys.setswitchinterval(0.001)
    _raise_open_file_limit()
    heap.keep_freed_memory()
    heap.collect_young_less_often()
    # The node has stopped and everything it keeps is durable.
    exit_without_teardown(uvloop.run(_run_broker(args)))


def _raise_open_file_limit() -> None:
    """Raise the soft limit on open files to the hard one, as the JVM does for Kafka at
    start: a broker keeps its busy segments' files open, up to a budget below the limit
    (storage/classic/open_files.py), and closes idle ones past it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # An unlimited hard limit still stops at the kernel's nr_open (2**20 by default).
    wanted = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft >= wanted:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError) as e:
        log.warning("cannot raise the open-file limit from %d to %d: %s", soft, wanted, e)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kipper", description=__doc__)
    parser.add_argument("--log-level", default="INFO")
    commands = parser.add_subparsers(dest="command", required=True)

    broker = commands.add_parser("broker", help="run one broker")
    controller = commands.add_parser("controller", help="run a controller-only node")
    for command, every_node_only in ((broker, False), (controller, True)):
        command.add_argument("--config", type=Path, help="TOML file with node settings")
        _add_setting_flags(command, every_node_only)
    broker.set_defaults(func=_run_node, broker_role=None)
    controller.set_defaults(func=_run_node, broker_role=False)

    launcher.add_subcommands(commands)
    objectstore_cli.add_subcommands(commands)
    # Higher layers (the bench harness) add their commands through entry points, so this
    # module imports nothing above the broker.
    for command in entry_points(group="kipper.commands"):
        command.load()(commands)
    return parser


def _metavar(flag: Flag) -> str | None:
    """What argparse would show for the flag's own name (not the setting's), or the choices."""
    return None if flag.choices else flag.name.lstrip("-").replace("-", "_").upper()


_FLAG_TYPES = {"int": int, "Path": Path}  # by annotation; other settings are strings


def _add_setting_flags(command: argparse.ArgumentParser, every_node_only: bool) -> None:
    """One flag per BrokerConfig setting that declares one (broker/config.py); every flag
    defaults to None so that an absent flag leaves the TOML / environment value in force."""
    for declared in settings():
        flag = declared.flag
        if flag is None or (every_node_only and not flag.every_node):
            continue
        help_text = declared.doc.replace("%", "%%")
        if declared.kind == "bool":  # --name and --no-name
            command.add_argument(flag.name, dest=declared.name,
                                 action=argparse.BooleanOptionalAction, default=None,
                                 help=help_text)
            continue
        command.add_argument(flag.name, dest=declared.name, help=help_text,
                             type=_FLAG_TYPES.get(declared.kind.removesuffix(" | None")),
                             choices=flag.choices, metavar=flag.metavar or _metavar(flag))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.log_level)
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
