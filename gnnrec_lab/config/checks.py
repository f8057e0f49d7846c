"""Checks as data: each config type declares what it accepts in one constraints table, and one
checker (:func:`check`) enforces every table with one message format.

A table has scikit-learn's ``_parameter_constraints`` shape: field -> list of constraints. The
*value* constraints of a field are alternatives, the value must meet one of them:

* :class:`Interval`: a number or a list of integers within bounds, read by the shared checkers of
  :mod:`gnnrec_lab.config.bounds` (the CLI's flags parse with the same ones, :func:`check_value` with
  ``text=True``);
* :class:`Options`: one of a fixed set; :class:`Subset`: one or more of a fixed set;
* :class:`Text`: a string (a name, a path, a label);
* :class:`Kind`: an instance of a Python type;
* :class:`Parsed`: a named parser that raises :class:`~gnnrec_lab.util.errors.ConfigError` itself;
* ``None``: the field may be unset.

:class:`Rule` entries are cross-field rules: named functions of every checked (normalised) field,
all of which must hold; they run after every field's value is checked, in table order.

Every refusal is ``ConfigError(field, reason)``, read "field: reason", the reason saying what is
allowed and what was given (the first alternative's words when none fits). Each constraint also
knows values that break it (:meth:`Constraint.violations`, :attr:`Rule.breaks`), so the tests
break every constraint of every table once.
"""
from __future__ import annotations

import inspect
import math
from typing import Any, Callable, Iterable, Mapping, Optional

from gnnrec_lab.config.bounds import _shown, integer, integers
from gnnrec_lab.util.errors import ConfigError


class Constraint:
    """One thing a value may be. :meth:`parse` returns the value normalised or raises
    ConfigError(param, reason)."""

    def parse(self, param: str, value, text: bool = False):
        raise NotImplementedError

    def accepts(self, value, text: bool = False) -> bool:
        try:
            self.parse("value", value, text=text)
            return True
        except ConfigError:
            return False

    def violations(self) -> tuple:
        """Values this constraint refuses (each breaks it one way)."""
        return ()


class Interval(Constraint):
    """A value read by ``check`` (:func:`~gnnrec_lab.config.bounds.integer`, :func:`~gnnrec_lab.config.bounds.number`
    or :func:`~gnnrec_lab.config.bounds.integers`) with ``bounds`` (``lo``, ``hi``, ``lo_open``,
    ``max_len``...); ``normalise`` maps the parsed value (e.g. sorts a list)."""

    def __init__(self, check: Callable, normalise: Optional[Callable] = None, **bounds):
        self.check, self.normalise, self.bounds = check, normalise, bounds
        # the checker's own defaults where a bound is not given (integer's lo=1, hi=INT64_MAX...)
        self.limits = {k: p.default for k, p in inspect.signature(check).parameters.items()
                       if p.default is not inspect.Parameter.empty} | bounds

    def parse(self, param, value, text=False):
        v = self.check(param, value, text=text, **self.bounds)
        return self.normalise(v) if self.normalise is not None else v

    def violations(self):
        lo, hi = self.limits.get("lo"), self.limits.get("hi")
        if self.check is integers:
            out = [None, ()]
            if lo is not None:
                out.append((lo - 1,))
            if hi is not None:
                out.append((hi + 1,))
            return tuple(out) + (((lo if lo is not None else 1),) * (self.limits["max_len"] + 1),)
        if self.check is integer:
            out = ["1", 1.5, True]
            out += [lo - 1] if lo is not None else []
            out += [hi + 1] if hi is not None else []
            return tuple(out)
        out = ["x", math.nan, True]
        if lo is not None:
            out.append(lo if self.limits.get("lo_open") else lo - 1)
        if hi is not None:
            out.append(hi if self.limits.get("hi_open") else hi + 1)
        return tuple(out)


class Options(Constraint):
    """One of ``values`` (compared by equality, as given). A mapping's keys are read when checked,
    so a key added later is allowed (config.run's models, which gnnrec_lab.models.registry declares)."""

    def __init__(self, values: Iterable):
        self._values = values if isinstance(values, Mapping) else tuple(values)

    @property
    def values(self) -> tuple:
        return tuple(self._values)

    def parse(self, param, value, text=False):
        try:
            ok = any(type(value) is type(v) and value == v for v in self.values)
        except (TypeError, ValueError):   # an array compared
            ok = False
        if not ok:
            raise ConfigError(param, f"got {_shown(value)}, allowed: {', '.join(map(str, self.values))}")
        return value

    def violations(self):
        return ("no-such-option", 3)


class Subset(Constraint):
    """One or more of ``values``, as a tuple in the order given."""

    def __init__(self, values: Iterable):
        self.values = tuple(values)

    def parse(self, param, value, text=False):
        items = tuple(value) if isinstance(value, (list, tuple)) else None
        if not items or any(not isinstance(v, str) or v not in self.values for v in items):
            raise ConfigError(param, f"must be one or more of {', '.join(self.values)}, got {_shown(value)}")
        return items

    def violations(self):
        return ((), ("no-such-option",), "lru")


class Text(Constraint):
    """A string described by ``what`` ("a dataset name"); ``empty``: "" allowed; ``strip``: blank
    (spaces only) refused; ``max_len``: at most that many characters; ``nul``: a NUL allowed."""

    def __init__(self, what: str, *, empty: bool = False, strip: bool = False, max_len: Optional[int] = None,
                 nul: bool = True):
        self.what, self.empty, self.strip, self.max_len, self.nul = what, empty, strip, max_len, nul

    def parse(self, param, value, text=False):
        ok = isinstance(value, str) and (self.empty or bool(value.strip() if self.strip else value)) \
            and (self.max_len is None or len(value) <= self.max_len) and (self.nul or "\0" not in value)
        if not ok:
            raise ConfigError(param, f"must be {self.what}, got {_shown(value)}")
        return value

    def violations(self):
        out = [5]
        out += [] if self.empty else [""]
        out += ["  "] if self.strip and not self.empty else []
        out += ["x" * (self.max_len + 1)] if self.max_len is not None else []
        out += [] if self.nul else ["a\0b"]
        return tuple(out)


class Kind(Constraint):
    """An instance of ``types`` (a bool is not an int), described by ``what``."""

    def __init__(self, types, what: str):
        self.types, self.what = types, what

    def parse(self, param, value, text=False):
        bool_ok = self.types is bool or (isinstance(self.types, tuple) and bool in self.types)
        if not isinstance(value, self.types) or (isinstance(value, bool) and not bool_ok):
            raise ConfigError(param, f"must be {self.what}, got {_shown(value)}")
        return value

    def violations(self):
        return ("yes",) if self.types is not str else (5,)


class Parsed(Constraint):
    """What ``parser(param, value)`` returns; the parser raises ConfigError naming ``param`` itself.
    ``breaks``: values it refuses."""

    def __init__(self, parser: Callable, breaks: tuple = ()):
        self.parser, self.breaks = parser, tuple(breaks)

    def parse(self, param, value, text=False):
        return self.parser(param, value)

    def violations(self):
        return self.breaks


class Rule:
    """A cross-field rule: ``rule(values)`` is None when it holds, else the reason (the field it is
    listed under is the one named). ``breaks``: fields (besides the defaults) that break it."""

    def __init__(self, rule: Callable[[Mapping[str, Any]], Optional[str]], breaks: Optional[dict] = None):
        self.rule, self.breaks = rule, dict(breaks or {})
        self.name = rule.__name__

    def __call__(self, values: Mapping[str, Any]) -> Optional[str]:
        return self.rule(values)

    def __repr__(self):
        return f"Rule({self.name})"


def alternatives(constraints) -> list:
    """The value constraints of a field's list (None included), without its rules."""
    return [c for c in constraints if not isinstance(c, Rule)]


def rules(constraints) -> list:
    return [c for c in constraints if isinstance(c, Rule)]


def check_value(param: str, constraints, value, text: bool = False):
    """``value`` checked against a field's constraints (one alternative must accept it) and
    normalised; ConfigError naming ``param`` with the first alternative's reason otherwise.
    ``text``: the value may be what a user typed (the CLI)."""
    alts = alternatives(constraints)
    if value is None and None in alts:
        return None
    first = None
    for c in alts:
        if c is None:
            continue
        try:
            return c.parse(param, value, text=text)
        except ConfigError as e:
            first = first or e
    if first is not None:
        raise first
    return value


def check(table: Mapping[str, list], values: Mapping[str, Any], label: Callable[[str], str] = str,
          text: bool = False) -> dict:
    """``values`` with every field of ``table`` checked and normalised, then every cross-field rule
    checked; ConfigError(``label(field)``, reason) at the first refusal. ``text``: values may be
    what a user typed."""
    out = dict(values)
    for name, constraints in table.items():
        out[name] = check_value(label(name), constraints, values.get(name), text=text)
    for name, constraints in table.items():
        for rule in rules(constraints):
            reason = rule(out)
            if reason:
                raise ConfigError(label(name), reason)
    return out


def broken_values(constraints, text: bool = False) -> list:
    """``(constraint, value)`` for every value constraint of a field and each value that breaks it
    and that no alternative accepts (read as ``text`` reads it): what the generated tests try."""
    alts = [c for c in alternatives(constraints) if c is not None]
    out = []
    for c in alts:
        for v in c.violations():
            if v is None and None in constraints:
                continue
            if not any(o.accepts(v, text) for o in alts):
                out.append((c, v))
    return out


__all__ = ["Constraint", "Interval", "Options", "Subset", "Text", "Kind", "Parsed", "Rule", "alternatives",
           "rules", "check_value", "check", "broken_values"]
