"""`kipper s3-fault`: switch object-store faults of a running broker through its admin endpoint.

    kipper s3-fault --admin http://127.0.0.1:PORT outage --for 10s [--after 5s] [--hang]
    kipper s3-fault --admin URL errors --op put --rate 0.2
    kipper s3-fault --admin URL slow --op get --delay 500ms [--rate 0.5]
    kipper s3-fault --admin URL clear
    kipper s3-fault --admin URL show

The main CLI calls ``add_subcommands(subparsers)``; each subcommand sets ``func``, which
takes the parsed arguments and returns the exit code.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.error
import urllib.request
from typing import Any

from .faults import ADMIN_PATH, ALL
from .names import KINDS

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m)?$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}


def parse_duration(text: str) -> float:
    """Seconds in "10s", "500ms", "2m" or a bare number of seconds."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 10s, 500ms or 2m")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def add_subcommands(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "s3-fault", help="inject object-store faults into a running broker",
        description="Switch the object-store faults of a running kipper process.")
    parser.add_argument("--admin", required=True, metavar="URL",
                        help="base URL of the process's admin endpoint, e.g. http://127.0.0.1:9100")
    faults = parser.add_subparsers(dest="fault", required=True, metavar="FAULT")

    outage = faults.add_parser("outage", help="fail every request for a while")
    outage.add_argument("--for", dest="for_s", type=parse_duration, required=True, metavar="DURATION")
    outage.add_argument("--after", dest="after_s", type=parse_duration, default=0.0, metavar="DURATION",
                        help="start the outage this much later (default: now)")
    outage.add_argument("--hang", action="store_true",
                        help="hold each request until the read timeout instead of failing it at once")

    ops = [*KINDS, ALL]
    errors = faults.add_parser("errors", help="fail a fraction of requests (0 turns it off)")
    errors.add_argument("--op", choices=ops, default=ALL)
    errors.add_argument("--rate", type=float, required=True)

    slow = faults.add_parser("slow", help="delay a fraction of requests (rate 0 turns it off)")
    slow.add_argument("--op", choices=ops, default=ALL)
    slow.add_argument("--rate", type=float, default=1.0)
    slow.add_argument("--delay", type=parse_duration, required=True, metavar="DURATION")

    faults.add_parser("clear", help="remove every fault")
    faults.add_parser("show", help="print the current faults")
    parser.set_defaults(func=run_s3_fault)


def fault_spec(args: argparse.Namespace) -> dict[str, Any] | None:
    """The fault spec the arguments describe; None for `show`."""
    if args.fault == "outage":
        return {"fault": "outage", "for_s": args.for_s, "after_s": args.after_s,
                "mode": "hang" if args.hang else "fail"}
    if args.fault == "errors":
        return {"fault": "errors", "op": args.op, "rate": args.rate}
    if args.fault == "slow":
        return {"fault": "slow", "op": args.op, "rate": args.rate, "delay_ms": args.delay * 1000}
    if args.fault == "clear":
        return {"fault": "clear"}
    return None


def run_s3_fault(args: argparse.Namespace) -> int:
    url = args.admin.rstrip("/") + ADMIN_PATH
    spec = fault_spec(args)
    request = urllib.request.Request(url)
    if spec is not None:
        request = urllib.request.Request(
            url, data=json.dumps(spec).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            state = json.load(response)
    except urllib.error.HTTPError as error:
        print(f"kipper s3-fault: {url} refused the fault: {error.read().decode(errors='replace')}",
              file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as error:
        print(f"kipper s3-fault: cannot reach {url}: {error}", file=sys.stderr)
        return 1
    print(json.dumps(state, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the subcommands without the main CLI: python -m storage.objectstore.cli s3-fault ..."""
    parser = argparse.ArgumentParser(prog="kipper")
    add_subcommands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
