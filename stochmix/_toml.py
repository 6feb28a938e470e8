"""TOML reading on every supported Python: the standard library's ``tomllib`` from 3.11 on,
its backport ``tomli`` (a dependency there) on 3.10."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["tomllib"]
