"""The generated parts of the documentation (settings tables, the Kafka API versions), made
from the definitions themselves.

Markdown files hold generated blocks between two comments::

    <!-- generated: broker-settings [NAME_PREFIX ...] -->
    ...
    <!-- end generated -->

``broker-settings`` renders the BrokerConfig settings (broker/config.py), ``topic-configs``
the topic configs (storage/config.py); the optional prefixes keep only the entries whose
names start with one of them. ``kafka-apis`` lists the API version ranges kipper answers
(protocol/apis.py), ``metrics`` the metric families of /metrics (broker/metric_catalog.py).
Regenerate after changing a definition:

    python -m broker.config_docs --write

``--check`` (and tests/broker/test_config_docs.py) fails when a committed file differs.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from protocol.apis import ADVERTISED_MIN_VERSION, VERSION_RANGES
from storage.config import TOPIC_CONFIGS

from .config import Flag, settings
from .metric_catalog import metrics_table

REPO = Path(__file__).resolve().parents[1]
DOC_FILES = ("README.md", "docs/*.md", "bench/README.md")
WRITE_COMMAND = "python -m broker.config_docs --write"

_BLOCK = re.compile(
    r"(<!-- generated: (?P<spec>[^>]*?) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.DOTALL)


def broker_settings_table(prefixes: tuple[str, ...] = ()) -> str:
    rows = ["| setting | flag | environment | default | description |", "|---|---|---|---|---|"]
    for declared in settings():
        if _selected(declared.name, prefixes):
            flag = _flag_cell(declared.flag, declared.kind)
            rows.append(f"| `{declared.name}` | {flag} | `{declared.env_var}` | "
                        f"{_format_default(declared.name, declared.default)} | {declared.doc} |")
    return "\n".join(rows) + "\n"


def topic_configs_table(prefixes: tuple[str, ...] = ()) -> str:
    rows = ["| topic config | default | description |", "|---|---|---|"]
    for definition in TOPIC_CONFIGS.values():
        if _selected(definition.name, prefixes):
            rows.append(f"| `{definition.name}` | "
                        f"{_format_default(definition.name, definition.default)} | "
                        f"{definition.doc} |")
    return "\n".join(rows) + "\n"


def _flag_cell(flag: Flag | None, kind: str) -> str:
    if flag is None:
        return ""
    name = flag.name.replace("--", "--[no-]", 1) if kind == "bool" else flag.name
    return f"`{name}`" + ("" if flag.every_node else " (broker only)")


def kafka_apis_list(prefixes: tuple[str, ...] = ()) -> str:
    """One paragraph: "Produce 3–11 (advertised from 0), Fetch 4–12, ..."."""
    entries = []
    for key, (oldest, newest) in VERSION_RANGES.items():
        name = "".join(word.capitalize() for word in key.name.split("_"))
        if _selected(name, prefixes):
            versions = f"{oldest}–{newest}" if newest > oldest else f"{oldest}"
            advertised = ADVERTISED_MIN_VERSION.get(key)
            note = f" (advertised from {advertised})" if advertised is not None else ""
            entries.append(f"{name} {versions}{note}")
    return ", ".join(entries) + ".\n"


TABLES = {"broker-settings": broker_settings_table, "topic-configs": topic_configs_table,
          "kafka-apis": kafka_apis_list, "metrics": metrics_table}


def _selected(name: str, prefixes: tuple[str, ...]) -> bool:
    return not prefixes or name.startswith(prefixes)


def _format_default(name: str, value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int) or (isinstance(value, str) and value.lstrip("-").isdigit()):
        number = int(value)
        readable = _readable(name, number)
        return f"{number}" + (f" ({readable})" if readable else "")
    return f"`{value}`" if value != "" else '`""`'


def _readable(name: str, number: int) -> str | None:
    """2 MiB, 5 min... for the byte sizes and durations that divide evenly."""
    if number == 2**63 - 1:  # Kafka's Long.MAX_VALUE, its "never" for flush.*
        return "never"
    if name.endswith(("_bytes", ".bytes")):
        units = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
    elif name.endswith(("_ms", ".ms")):
        units = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000))
    else:
        return None
    for unit, size in units:
        if number >= size and number % size == 0:
            return f"{number // size} {unit}"
    return None


def render(text: str) -> str:
    """The text with every generated block rendered afresh."""
    def fill(block: re.Match) -> str:
        kind, *prefixes = block["spec"].split()
        if kind not in TABLES:
            raise ValueError(f"unknown generated block {kind!r} (known: {', '.join(TABLES)})")
        return block[1] + TABLES[kind](tuple(prefixes)) + block[4]
    return _BLOCK.sub(fill, text)


def doc_files(root: Path = REPO) -> list[Path]:
    return sorted(path for pattern in DOC_FILES for path in root.glob(pattern))


def stale_files(root: Path = REPO) -> list[Path]:
    return [path for path in doc_files(root) if render(path.read_text()) != path.read_text()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker.config_docs",
                                     description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="rewrite the generated blocks")
    action.add_argument("--check", action="store_true",
                        help="exit 1 if a generated block differs from the definitions")
    args = parser.parse_args(argv)
    stale = stale_files()
    if args.write:
        for path in stale:
            path.write_text(render(path.read_text()))
            print(f"rewrote {path.relative_to(REPO)}")
        return 0
    for path in stale:
        print(f"{path.relative_to(REPO)} is out of date: run `{WRITE_COMMAND}`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
