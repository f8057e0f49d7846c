"""CSV downloads of the pages' tables: the frame a table shows, under the headers it shows.

A download holds what the reader sees: the table's rows (its header filters and sort applied) and
the columns it shows, each under its header in words with its unit (the Tabulator's ``titles``),
the values as the table holds them. The file name is the page's own, never text a browser sent.
"""
from __future__ import annotations

import io
from typing import Callable, Optional, Sequence

import pandas as pd
import panel as pn


def shown_rows(table: pn.widgets.Tabulator) -> pd.DataFrame:
    """The rows ``table`` shows now, every column: its header filters and sort applied."""
    view = getattr(table, "current_view", None)
    return view if isinstance(view, pd.DataFrame) else table.value


def table_csv(frame: pd.DataFrame, titles: Optional[dict] = None, columns: Optional[Sequence[str]] = None,
              index: bool = True) -> str:
    """``frame`` as CSV: its index (when ``index``) and ``columns`` (default: every one, in order)
    under their ``titles`` (a column without one keeps its name)."""
    titles = dict(titles or {})
    cols = [c for c in (frame.columns if columns is None else columns) if c in frame.columns]
    out = frame[cols].rename(columns=titles)
    if index:
        out.index.name = titles.get(frame.index.name, frame.index.name)
    return out.to_csv(index=index)


def tabulator_csv(table: pn.widgets.Tabulator, columns: Optional[Sequence[str]] = None) -> str:
    """The CSV of what ``table`` shows (:func:`shown_rows`; ``columns``: default every one it does not
    hide), under its titles; its index only where it shows one that says something (not 0, 1, 2...)."""
    hidden = set(table.hidden_columns or [])
    rows = shown_rows(table)
    cols = [c for c in (rows.columns if columns is None else columns) if c not in hidden]
    index = bool(table.show_index) and not isinstance(rows.index, pd.RangeIndex)
    return table_csv(rows, table.titles, cols, index=index)


def csv_download(content: Callable[[], str], filename: str, label: str, css_class: str,
                 width: int = 260) -> pn.widgets.FileDownload:
    """A button that downloads ``content()`` (made when clicked) as ``filename``."""
    return pn.widgets.FileDownload(callback=lambda: io.StringIO(content()), filename=filename, label=label,
                                   button_type="default", css_classes=[css_class], width=width)
