"""RunConfig <-> command-line flags, shared by ``run``, ``sweep`` and ``advise``.

Every RunConfig field becomes ``--field-name``; values are parsed by the
field's type, and its help text and default come from ``config.FIELD_DOCS``
(the words the dashboard's forms show too). With ``multi=True`` (sweeps) a flag takes a comma-separated list
of values and the sweep runs their product.
"""
from __future__ import annotations

import argparse
import dataclasses
import typing

from ..config import FIELD_DOCS, RunConfig, field_help
from ..errors import ConfigError

_TUPLE_FIELDS = ("fanouts", "topk")


def _base_type(tp):
    if typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0]
    return tp


def _parse_placement(text: str) -> dict:
    """``CLASS=PLACE[,CLASS=PLACE...]``; a comma inside PLACE (``numa:interleave:0,1``) stays."""
    import re
    out = {}
    for part in filter(None, re.split(r",(?=\s*[A-Za-z_]+=)", text)):
        if "=" not in part:
            raise argparse.ArgumentTypeError(f"expected CLASS=PLACE, got {part!r}")
        k, v = part.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _int_tuple(text: str) -> tuple:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")


def finite_float(text: str) -> float:
    """argparse type: a finite number (``inf``/``nan`` refused, so the parser names the flag)."""
    import math
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    v = finite_float(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return v


def _int_1_to_2_63(text: str, expected: str, range_name: str) -> int:
    """``text`` as an integer from 1 to 2**63-1 (what SQLite and int64 hold); the errors say
    ``expected`` ("a positive integer") or, out of range, ``range_name`` ("an integer")."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not 1 <= v < 2**63:
        raise argparse.ArgumentTypeError(f"expected {range_name} from 1 to 2**63-1, got {text!r}")
    return v


def positive_int(text: str) -> int:
    """argparse type: an integer from 1 to 2**63-1."""
    return _int_1_to_2_63(text, "a positive integer", "an integer")


def run_id(text: str) -> int:
    """argparse type: a run id (a positive integer that SQLite can hold)."""
    return _int_1_to_2_63(text, "a run id (a positive integer)", "a run id")


def _parser_for(f: dataclasses.Field):
    hints = typing.get_type_hints(RunConfig)
    tp = _base_type(hints[f.name])
    if f.name in _TUPLE_FIELDS:
        return _int_tuple
    if f.name == "placement":
        return _parse_placement
    return {int: int, float: finite_float, str: str}.get(tp, str)


def argparse_help(text: str) -> str:
    """``text`` for argparse's ``help=``, which %-formats it (a literal ``5%`` would fail)."""
    return text.replace("%", "%%")


def add_field_argument(parser, name: str, **kw) -> None:
    """``--name`` for RunConfig field ``name`` on a command with its own default (``kw["default"]``,
    RunConfig's when not given): the help text is the field's, with that default."""
    if kw.get("required"):
        kw.setdefault("help", argparse_help(FIELD_DOCS[name].help))
    else:
        kw.setdefault("default", RunConfig.__dataclass_fields__[name].default)
        kw.setdefault("help", argparse_help(field_help(name, kw["default"])))
    parser.add_argument(f"--{name.replace('_', '-')}", **kw)


def add_config_arguments(parser: argparse.ArgumentParser, multi: bool = False, skip=()) -> None:
    """Add ``--field`` flags for every RunConfig field (defaults stay RunConfig's: the parser's
    default is None so that :func:`config_overrides` sees only what the user set)."""
    g = parser.add_argument_group(
        "run configuration", "Each flag also takes a comma-separated list of values; the sweep runs every "
                             "combination." if multi else None)
    for f in dataclasses.fields(RunConfig):
        if f.name in skip:
            continue
        conv = _parser_for(f)
        kw = dict(default=None, help=argparse_help(field_help(f.name)))
        if multi and f.name not in _TUPLE_FIELDS and f.name != "placement":
            base = conv

            def conv(text, base=base, name=f.name):
                try:
                    return [base(x) for x in text.split(",")]
                except ValueError:
                    raise argparse.ArgumentTypeError(f"expected comma-separated values for --{name.replace('_', '-')}, got {text!r}")
        g.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=conv, metavar=f.name.upper(), **kw)


def config_overrides(args) -> dict:
    """The RunConfig fields the user set on the command line."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig)
            if getattr(args, f.name, None) is not None}


def add_config_file_argument(parser, multi: bool = False) -> None:
    """``--config FILE``: RunConfig fields from a YAML run file; flags override it."""
    parser.add_argument("--config", metavar="FILE",
                        help="YAML file of RunConfig fields (dim: 64, layers: 3, ...), validated as flags are; "
                             "flags given as well override the file" +
                             ("; a list value (layers: [1, 2, 3]) is swept like a comma-separated flag"
                              if multi else " (write one with --save-config)") + " (default: flags only)")


def config_from_args(args, base: RunConfig | None = None) -> RunConfig:
    """The RunConfig of ``args``: ``base`` (RunConfig's defaults), then ``--config FILE``, then the
    flags; an invalid field from the file is named with the file and its line."""
    from ..config import file_error, read_config_file
    path = getattr(args, "config", None)
    from_file, lines = read_config_file(path) if path else ({}, {})
    flags = config_overrides(args)
    d = (base or RunConfig()).to_dict()
    d.update(from_file)
    d.update(flags)
    if d.get("model") == "mf" and "layers" not in flags and "layers" not in from_file:
        d["layers"] = 0
    try:
        return RunConfig.from_dict(d)
    except ConfigError as e:
        raise file_error(e, path, lines, set(from_file) - set(flags)) from None


__all__ = ["add_config_file_argument", "argparse_help", "add_field_argument", "finite_float", "positive_float", "run_id", "add_config_arguments", "config_from_args", "config_overrides", "ConfigError"]
