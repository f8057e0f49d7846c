"""The dashboard's one form generator: option records in, a form's state and its widgets out.

A form (the Launch page's run, the Cache page's simulation) is a ``param.Parameterized`` whose
parameters are made from option records (:class:`gnnrec_lab.config.run.Option`: checks, label,
words, default) by :func:`form_class`, and whose widgets :func:`form_widgets` makes with
``pn.Param``: a widget type per kind of parameter, the record's label as its name and its words
with the default as its tooltip, then the page's overrides (a choice of datasets, labelled
choices, a number format). The widgets are linked to the parameters both ways, so a page reads the
form's values, not its widgets.
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Mapping, Optional

import panel as pn
import param

from gnnrec_lab.config.checks import Subset
from gnnrec_lab.config.run import Option

# What a form field is: its record, its value's type (str, int, float, tuple, dict) and whether
# it may be None.
FieldKind = tuple[Option, type, bool]

# The widget each kind of parameter gets unless a page overrides it
WIDGETS = {param.ListSelector: pn.widgets.MultiChoice, param.Selector: pn.widgets.Select,
           param.Integer: pn.widgets.IntInput, param.Number: pn.widgets.FloatInput,
           param.String: pn.widgets.TextInput}


def dataclass_fields(cls) -> dict[str, FieldKind]:
    """The option records of dataclass ``cls``'s fields (declared with :func:`gnnrec_lab.config.run.option`),
    with their types."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        record = f.metadata.get("option")
        if record is None:
            continue
        kind, args = hints[f.name], typing.get_args(hints[f.name])
        optional = type(None) in args
        if optional:
            kind = next(a for a in args if a is not type(None))
        out[f.name] = (record, typing.get_origin(kind) or kind, optional)
    return out


def form_parameter(record: Option, kind: type, optional: bool, default: Any = dataclasses.MISSING) -> param.Parameter:
    """The parameter of one form field: a multiple choice for a subset, a selector for one of a list,
    a number, an integer (None allowed where the option is optional), a text box (a tuple
    comma-separated, None empty) or a dict. ``default``: the form's start, the record's default
    unless given."""
    value = record.default if default is dataclasses.MISSING else default
    doc = record.help
    subset = next((c for c in record.checks if isinstance(c, Subset)), None)
    if subset is not None:
        return param.ListSelector(default=list(value), objects=list(subset.values), doc=doc)
    if record.choices is not None:
        return param.Selector(default=value, objects=list(record.choices), doc=doc)
    if kind is int:
        return param.Integer(default=value, allow_None=optional, doc=doc)
    if kind is float:
        return param.Number(default=value, allow_None=optional, doc=doc)
    if kind is tuple:
        return param.String(default=",".join(str(v) for v in value), doc=doc)
    if kind is dict:
        return param.Dict(default=value, doc=doc)
    return param.String(default="" if value is None else value, doc=doc)


def form_class(name: str, fields: Mapping[str, FieldKind], defaults: Optional[Mapping] = None) -> type:
    """A ``param.Parameterized`` class with one parameter per field (:func:`form_parameter`),
    starting from ``defaults`` where given, else from the records' defaults."""
    defaults = defaults or {}
    return type(name, (param.Parameterized,),
                {k: form_parameter(*kind, defaults.get(k, dataclasses.MISSING)) for k, kind in fields.items()})


def add_fields(form: param.Parameterized, fields: Mapping[str, FieldKind]) -> None:
    """Give ``form``'s class the parameters of ``fields`` it lacks (options declared after it was
    made: a model registered at run time)."""
    for k, kind in fields.items():
        if k not in form.param:
            type(form).param.add_parameter(k, form_parameter(*kind))


def form_widgets(form: param.Parameterized, fields: Mapping[str, FieldKind], overrides: Optional[Mapping] = None,
                 prefix: str = "form", width: int = 250) -> dict:
    """The widgets of ``form``'s ``fields``, in order, made by ``pn.Param``: each named by its
    record's label, its tooltip the record's words with the form's default, its css class
    ``{prefix}-{name}`` (the browser tests' hooks), then ``overrides[name]`` (a widget type under
    ``"type"``, or any widget keyword)."""
    specs = {}
    for k, (record, _, _) in fields.items():
        p = form.param[k]
        spec = {"name": record.label, "description": record.described(p.default), "width": width,
                "css_classes": [f"{prefix}-{k}"]}
        kind = next((t for t in WIDGETS if isinstance(p, t)), None)
        if kind is not None:
            spec["type"] = WIDGETS[kind]
        spec.update((overrides or {}).get(k, {}))
        specs[k] = spec
    pane = pn.Param(form, parameters=list(fields), widgets=specs, show_name=False, sort=False)
    return {k: pane._widgets[k] for k in fields}
