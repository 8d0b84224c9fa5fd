"""Flags several commands share: `--set KEY=VALUE` (config overrides) and `--json` (the API's result)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_set_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help="override a config key on top of every layer (repeatable), e.g. --set TRAIN_BSZ=8")


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")


def overrides(args: argparse.Namespace) -> dict[str, str]:
    from rlkit.config.overrides import parse_assignment

    return dict(parse_assignment(text) for text in getattr(args, "overrides", None) or [])


def config_of(args: argparse.Namespace, name: str = "config") -> Any:
    """The config argument for an API call: its path, or with --set the config resolved with the overrides
    (any key name, so an unknown one is reported as a file's would be)."""
    path = getattr(args, name)
    given = overrides(args)
    if not given:
        return path
    if path is None:
        from rlkit.errors import UserError

        raise UserError("--set overrides keys of a run config, and none was given", key="--set",
                        fix="name the run config (CFG), or leave out --set")
    from rlkit.config.resolve import resolve

    return resolve(path, overrides=given)


def print_json(result: Any) -> None:
    """A result's JSON form: what the Python API returned, as `as_dict()` gives it."""
    print(json.dumps(result.as_dict(), default=str), flush=True)
