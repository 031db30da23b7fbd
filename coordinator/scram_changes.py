"""The changes AlterUserScramCredentials asks for, as the controller receives them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ScramDeletion:
    user: str
    mechanism: int  # the request's type id: an unknown one is the controller's to refuse


@dataclass(frozen=True)
class ScramUpsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes = field(repr=False)
    salted_password: bytes = field(repr=False)
