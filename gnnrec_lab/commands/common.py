"""RunConfig <-> command-line flags, shared by ``run``, ``sweep`` and ``advise``.

Every RunConfig field becomes ``--field-name``; values are parsed by the
field's type, and its help text and default come from ``config.FIELD_DOCS``
(the words the dashboard's forms show too). With ``multi=True`` (sweeps) a flag takes a comma-separated list
of values and the sweep runs their product.
"""
from __future__ import annotations

import argparse

from gnnrec_lab.config.bounds import INT64_MAX, integer, number
from gnnrec_lab.config.run import (
    FIELD_DOCS,
    NUMERIC_FIELDS,
    OPTIONS,
    TUPLE_FIELDS,
    RunConfig,
    check_field,
    field_help,
    file_error,
    mf_layers,
    read_config_file,
)
from gnnrec_lab.util.errors import ConfigError


def _parse_placement(text: str) -> dict:
    """``CLASS=PLACE[,CLASS=PLACE...]``; a comma inside PLACE (``numa:interleave:0,1``) stays. A class
    given twice is refused (the last would silently win)."""
    import re
    out = {}
    for part in filter(None, re.split(r",(?=\s*[A-Za-z_]+=)", text)):
        if "=" not in part:
            raise argparse.ArgumentTypeError(f"expected CLASS=PLACE, got {part!r}")
        k, v = part.split("=", 1)
        k = k.strip()
        if k in out:
            raise argparse.ArgumentTypeError(f"{k} is given two placements ({out[k]!r} and {v.strip()!r}); "
                                             f"give each tensor class once")
        out[k] = v.strip()
    return out


def bounded(check, *args, **kw):
    """An argparse ``type`` from a :mod:`gnnrec_lab.config.bounds` checker: ``bounded(integer, "--dims",
    lo=1)`` parses the text with the same bounds and words as RunConfig; a refusal is an
    ``ArgumentTypeError``, so argparse prints "argument --flag: must be ..." (never the name of a
    function)."""
    param = args[0] if args else "value"

    def parse(text):
        try:
            return check(param, text, *args[1:], **kw)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(e.reason) from None
    parse.__name__ = getattr(check, "__name__", "value")
    parse.bounded = True   # tests/test_cli_battery.py finds every numeric option by this mark
    return parse


def field_type(name: str):
    """argparse ``type`` of RunConfig field ``name``, generated from its entry in
    ``config.RUN_CONSTRAINTS``: a numeric field's text is read by its own constraints (the bounds and
    words RunConfig refuses with); placement's ``CLASS=PLACE`` text becomes its mapping; any other
    field stays text, checked when the RunConfig is built."""
    if name == "placement":
        return _parse_placement
    if name not in NUMERIC_FIELDS:
        return str
    parse = bounded(check_field, name)
    parse.__name__ = name
    return parse


# the shared checkers as argparse types for options that are not RunConfig fields
def finite_float(text: str) -> float:
    """argparse type: a finite number (``inf``/``nan`` refused, so the parser names the flag)."""
    return bounded(number)(text)


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    return bounded(number, "value", lo=0, lo_open=True)(text)


def positive_int(text: str) -> int:
    """argparse type: an integer from 1 to 2**63-1."""
    return bounded(integer, "value", lo=1, hi=INT64_MAX)(text)


def run_id(text: str) -> int:
    """argparse type: a run id (a positive integer that SQLite can hold)."""
    try:
        return integer("id", text, 1, INT64_MAX)
    except ConfigError:
        raise argparse.ArgumentTypeError(f"expected a run id (an integer from 1 to 2**63-1), got {text!r}") from None


run_id.bounded = True


def argparse_help(text: str) -> str:
    """``text`` for argparse's ``help=``, which %-formats it (a literal ``5%`` would fail)."""
    return text.replace("%", "%%")


def add_field_argument(parser, name: str, **kw) -> None:
    """``--name`` for RunConfig field ``name`` on a command with its own default (``kw["default"]``,
    RunConfig's when not given): the help text is the field's, with that default, and the value is
    parsed by the field's bounded checker (whatever ``type`` a caller passes)."""
    kw["type"] = field_type(name)
    if kw.get("required"):
        kw.setdefault("help", argparse_help(FIELD_DOCS[name].help))
    else:
        kw.setdefault("default", OPTIONS[name].default)
        kw.setdefault("help", argparse_help(field_help(name, kw["default"])))
    parser.add_argument(f"--{name.replace('_', '-')}", **kw)


def add_config_arguments(parser: argparse.ArgumentParser, multi: bool = False, skip=()) -> None:
    """Add ``--field`` flags for every RunConfig field (defaults stay RunConfig's: the parser's
    default is None so that :func:`config_overrides` sees only what the user set)."""
    g = parser.add_argument_group(
        "run configuration", "Each flag also takes a comma-separated list of values; the sweep runs every "
                             "combination." if multi else None)
    for name in OPTIONS:
        if name in skip:
            continue
        conv = field_type(name)
        kw = dict(default=None, help=argparse_help(field_help(name)))
        if multi and name not in TUPLE_FIELDS and name != "placement":
            base = conv

            def conv(text, base=base):
                return [base(x) for x in text.split(",")]
            conv.__name__, conv.bounded, conv.words = name, getattr(base, "bounded", False), base is str
        g.add_argument(f"--{name.replace('_', '-')}", dest=name, type=conv, metavar=name.upper(), **kw)


def config_overrides(args) -> dict:
    """The RunConfig fields the user set on the command line."""
    return {name: getattr(args, name) for name in OPTIONS if getattr(args, name, None) is not None}


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
    path = getattr(args, "config", None)
    from_file, lines = read_config_file(path) if path else ({}, {})
    flags = config_overrides(args)
    d = (base or RunConfig()).to_dict()
    d.update(from_file)
    d.update(flags)
    d["layers"] = mf_layers(d.get("model"), d.get("layers"), "layers" in flags or "layers" in from_file)
    try:
        return RunConfig.from_dict(d)
    except ConfigError as e:
        raise file_error(e, path, lines, set(from_file) - set(flags)) from None


__all__ = ["add_config_file_argument", "argparse_help", "add_field_argument", "bounded", "field_type", "finite_float",
           "positive_float", "positive_int", "run_id", "add_config_arguments", "config_from_args", "config_overrides",
           "ConfigError"]
