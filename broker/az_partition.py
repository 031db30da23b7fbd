"""Network partitions of a namespaced cluster (`kipper cluster partition`, the partition
tests): each cut is a set of drop rules for the relay (broker/az_relay.py), kept in the
cluster's rules file; the relay reads it again on SIGHUP. A cut drops frames silently, as a
real partition does: senders see timeouts, not errors.

Interfaces of the fabric namespace are named after the AZ the frame comes from: frames
from AZ I to AZ J arrive on ``zI-zJ``, from AZ I to the region (object storage and the host)
on ``zI-rg``, from the region to AZ I on ``rg-zI``.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

from .az_network import AzLayout


@dataclass(frozen=True)
class DropRule:
    interface: str
    src: str | None = None
    dst: str | None = None


@dataclass(frozen=True)
class Cut:
    name: str
    rules: list[DropRule]


def _into(layout: AzLayout, az: str) -> list[str]:
    """The fabric interfaces frames bound for ``az`` arrive on."""
    i = layout.az_number(az)
    return [f"z{layout.az_number(o)}-z{i}" for o in layout.azs if o != az] + [f"rg-z{i}"]


def _out_of(layout: AzLayout, az: str) -> list[str]:
    i = layout.az_number(az)
    return [f"z{i}-z{layout.az_number(o)}" for o in layout.azs if o != az] + [f"z{i}-rg"]


def cut_az(layout: AzLayout, az: str) -> Cut:
    """The AZ reaches nothing outside it and nothing reaches it (other AZs, object storage,
    the host); its brokers and clients still reach each other."""
    return Cut(f"az {az}", [DropRule(i) for i in _out_of(layout, az) + _into(layout, az)])


def cut_broker(layout: AzLayout, node: int) -> Cut:
    """One broker reaches nothing outside its AZ and nothing outside reaches it; clients of
    its own AZ still do."""
    address = f"{layout.broker_address(node)}/32"
    az = layout.brokers[node]
    return Cut(f"broker {node}", [DropRule(i, src=address) for i in _out_of(layout, az)]
               + [DropRule(i, dst=address) for i in _into(layout, az)])


def cut_path(layout: AzLayout, a: str, b: str, one_way: bool = False) -> Cut:
    """Frames from AZ ``a`` to AZ ``b`` are lost, and with ``one_way`` False those back too.
    One way, TCP between them fails as well (its acknowledgements are lost), but a
    connection's first packets still arrive."""
    i, j = layout.az_number(a), layout.az_number(b)
    rules = [DropRule(f"z{i}-z{j}")] + ([] if one_way else [DropRule(f"z{j}-z{i}")])
    return Cut(f"{a} -> {b}" if one_way else f"{a} <-> {b}", rules)


def cut_object_storage(layout: AzLayout, az: str) -> Cut:
    """The AZ's brokers cannot reach the object store; everything else still flows."""
    i = layout.az_number(az)
    s3 = f"{layout.s3_address}/32"
    return Cut(f"{az} <-> object storage",
               [DropRule(f"z{i}-rg", dst=s3), DropRule(f"rg-z{i}", src=s3)])


def active_cuts(layout: AzLayout) -> list[Cut]:
    path = Path(layout.rules_path)
    if not path.exists():
        return []
    return [Cut(cut["name"], [DropRule(**rule) for rule in cut["rules"]])
            for cut in json.loads(path.read_text())]


def apply(layout: AzLayout, cut: Cut) -> None:
    """Add ``cut`` to the ones in force."""
    _write(layout, [c for c in active_cuts(layout) if c.name != cut.name] + [cut])


def heal(layout: AzLayout, name: str | None = None) -> None:
    """Lift one cut by name, or all of them."""
    _write(layout, [c for c in active_cuts(layout) if name is not None and c.name != name])


def _write(layout: AzLayout, cuts: list[Cut]) -> None:
    path = Path(layout.rules_path)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps([asdict(cut) for cut in cuts], indent=1))
    os.replace(temporary, path)
    if layout.relay_pid is None:
        raise RuntimeError("the cluster's relay is not running")
    os.kill(layout.relay_pid, signal.SIGHUP)
