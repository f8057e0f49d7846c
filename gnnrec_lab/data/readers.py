"""Readers for interaction files, and re-indexing of their ids.

Formats (``detect_format`` picks one from the path when ``format`` is ``auto``):

* ``ml100k``: MovieLens-100K ``u.data`` (tab-separated ``user item rating timestamp``),
  a GroupLens ``ml-100k.zip`` holding ``ml-100k/u.data``, or the ``recbole`` wheel
  holding ``recbole/dataset_example/ml-100k/ml-100k.inter``.
* ``lightgcn``: a directory with ``train.txt`` and ``test.txt`` and optionally ``valid.txt``;
  each line is ``user item item ...`` (space-separated integers; a user with no items is
  allowed). The given train/test cut is kept, and so is the validation cut when ``valid.txt``
  is there (otherwise the lab carves one out of train). A file may be gzip-compressed
  (``train.txt.gz``: the shipped Gowalla split is read so).
* ``csv``: delimited edge lists (CSV, TSV, whitespace, ``::``) with columns
  user, item and optionally rating and timestamp; the header is detected.
* ``parquet``: the same columns in a Parquet file (read with pyarrow).
* ``recbole``: a RecBole atomic file (``NAME.inter``): a typed header such as
  ``user_id:token<TAB>item_id:token<TAB>rating:float<TAB>timestamp:float``, tab-separated
  fields. The user / item fields are RecBole's ``USER_ID_FIELD`` / ``ITEM_ID_FIELD``
  (default ``user_id`` / ``item_id``; give others as columns) and must be ``:token``.

Ids are tokens: ``007`` and ``7`` are two users. Integer ids are kept as integers only where
the format defines them so (``u.data``, LightGCN files, integer Parquet columns) or when the
caller asks (``ids="int"``).

Every problem raises :class:`~gnnrec_lab.util.errors.DataError` naming the file and, for a
malformed line, its 1-based line number.
"""
from __future__ import annotations

import csv
import gzip
import io
import math
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

import numpy as np

from gnnrec_lab.util.errors import DataError

FORMATS = ("auto", "ml100k", "lightgcn", "csv", "parquet", "recbole")
ID_TYPES = ("token", "int")
RECBOLE_TYPES = ("token", "token_seq", "float", "float_seq")
# RecBole's defaults for USER_ID_FIELD, ITEM_ID_FIELD, RATING_FIELD, TIME_FIELD
RECBOLE_FIELDS = {"user": "user_id", "item": "item_id", "rating": "rating", "timestamp": "timestamp"}
_INT64_MAX = np.iinfo(np.int64).max
ROLES = ("user", "item", "rating", "timestamp")
RECBOLE_ML100K_MEMBER = "recbole/dataset_example/ml-100k/ml-100k.inter"
_HEAD_BYTES = 1 << 16

# Header names recognised for each column role (compared lower-case, RecBole ":type" suffix dropped).
SYNONYMS = {
    "user": {"user", "user_id", "userid", "uid", "user id", "reviewerid", "customer_id", "visitor_id"},
    "item": {"item", "item_id", "itemid", "iid", "item id", "movie", "movie_id", "movieid", "product",
             "product_id", "productid", "asin", "business_id", "book_id", "isbn", "track_id", "song_id",
             "artist_id", "location_id", "poi", "poi_id"},
    "rating": {"rating", "ratings", "score", "stars", "rating_value", "weight", "plays", "count"},
    "timestamp": {"timestamp", "time", "ts", "date", "datetime", "unix_time", "unixtime"},
}
_KNOWN = set().union(*SYNONYMS.values())


@dataclass
class Interactions:
    """Interactions as found in a source: original ids (any dtype) and optional ratings."""

    users: np.ndarray
    items: np.ndarray
    ratings: Optional[np.ndarray]
    source: str                       # what to name in messages
    columns: dict = field(default_factory=dict)   # role -> column used


@dataclass
class GivenSplit:
    """A LightGCN-style directory: the train and test cuts as given, and the validation cut where the
    directory has one (``valid.txt``)."""

    train: Interactions
    test: Interactions
    line_users: np.ndarray            # every user that heads a line (also those without items)
    source: str
    valid: Optional[Interactions] = None


# ----------------------------------------------------------------------
def detect_format(path: Path, format: Optional[str] = None) -> str:
    """The format of ``path``; checks an explicit ``format`` against what the path is."""
    fmt = (format or "auto").lower()
    if fmt not in FORMATS:
        raise DataError(f"format: got {format!r}, allowed: {', '.join(FORMATS)}")
    if not path.exists():
        raise DataError(f"{path}: no such file or directory")
    if path.is_dir():
        has_lgcn = lightgcn_file(path, "train.txt") is not None and lightgcn_file(path, "test.txt") is not None
        has_udata = (path / "u.data").is_file()
        if fmt in ("auto", "lightgcn") and has_lgcn:
            return "lightgcn"
        if fmt in ("auto", "ml100k") and has_udata:
            return "ml100k"
        if fmt == "lightgcn":
            raise DataError(f"{path}: format 'lightgcn' needs a directory with train.txt and test.txt")
        if fmt == "auto":
            raise DataError(f"{path}: directory has neither train.txt + test.txt (LightGCN format) "
                            f"nor u.data (MovieLens-100K)")
        raise DataError(f"{path}: format {fmt!r} needs a file, got a directory")
    if not path.is_file():  # a named pipe or a device would block or never end
        raise DataError(f"{path}: not a regular file (a named pipe, socket or device); give a file or directory")
    with open(path, "rb") as f:
        magic = f.read(4)
    if fmt == "lightgcn":
        if path.name == "train.txt" and (path.parent / "test.txt").is_file():
            return "lightgcn"
        raise DataError(f"{path}: format 'lightgcn' needs a directory with train.txt and test.txt")
    if fmt == "auto":
        suffix = path.suffix.lower()
        if path.name == "u.data" or suffix in (".zip", ".whl"):
            return "ml100k"
        if suffix in (".parquet", ".pq") or magic == b"PAR1":
            return "parquet"
        if suffix == ".inter":
            return "recbole"
        if path.name == "train.txt" and (path.parent / "test.txt").is_file():
            return "lightgcn"
        return "csv"
    if fmt == "csv" and magic == b"PAR1":
        raise DataError(f"{path}: this is a Parquet file, not CSV; use format 'parquet'")
    if fmt == "csv" and magic[:2] == b"PK":
        raise DataError(f"{path}: this is a zip archive, not CSV; use format 'ml100k' for ml-100k.zip")
    if fmt in ("csv", "recbole") and magic == b"PAR1":
        raise DataError(f"{path}: this is a Parquet file, not text; use format 'parquet'")
    if fmt == "parquet" and magic != b"PAR1":
        raise DataError(f"{path}: not a Parquet file (no PAR1 magic); use format 'csv' for text files")
    return fmt


def check_ids(ids) -> str:
    """``ids`` (how ids are read) checked: ``token`` (default) or ``int``."""
    ids = "token" if ids is None else ids
    if ids not in ID_TYPES:
        raise DataError(f"ids: got {ids!r}, allowed: {', '.join(ID_TYPES)}")
    return ids


def read_source(path: Path, fmt: str, columns=None, sep: Optional[str] = None, ids: Optional[str] = None):
    """Read ``path`` in format ``fmt`` (as returned by :func:`detect_format`); ``ids``: ``token``
    (default: ids are strings, ``007`` is not ``7``) or ``int`` (ids must be integers within int64)."""
    ids = check_ids(ids)
    if fmt == "lightgcn":
        return read_lightgcn(path if path.is_dir() else path.parent)
    if fmt == "ml100k":
        if columns is not None or sep is not None:
            raise DataError(f"{path}: columns/sep do not apply to format 'ml100k' (its layout is fixed)")
        return read_ml100k(path)
    if fmt == "parquet":
        if sep is not None:
            raise DataError(f"{path}: sep does not apply to Parquet files")
        return read_parquet(path, columns, ids=ids)
    if fmt == "recbole":
        return read_recbole(path, columns, sep=sep, ids=ids)
    return read_delimited(path, str(path), sep=sep, columns=columns, ids=ids)


# ----------------------------------------------------------------------
def read_ml100k(path: Path) -> Interactions:
    """MovieLens-100K from ``u.data``, a directory holding it, ``ml-100k.zip`` or the recbole wheel."""
    if path.is_dir():
        path = path / "u.data"
    if path.suffix.lower() in (".zip", ".whl"):
        try:
            zf = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as e:
            raise DataError(f"{path}: not a readable zip archive ({e})") from None
        with zf:
            names = zf.namelist()
            if RECBOLE_ML100K_MEMBER in names:
                member = RECBOLE_ML100K_MEMBER
            else:
                cands = sorted((n for n in names if n.rsplit("/", 1)[-1] == "u.data"), key=len)
                if not cands:
                    raise DataError(f"{path}: archive holds neither ml-100k/u.data nor {RECBOLE_ML100K_MEMBER}")
                member = cands[0]
            data = zf.read(member)
        return read_delimited(data, f"{path}!{member}", sep="\t", columns=(0, 1, 2, 3), ids="int")
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    return read_delimited(path, str(path), sep="\t", columns=(0, 1, 2, 3), ids="int")


# ----------------------------------------------------------------------
def _norm(name: str) -> str:
    return str(name).strip().strip('"').strip("'").lower().split(":")[0]


def _is_number(s: str) -> bool:
    """Whether ``s`` is a finite number (``nan``/``inf`` ratings are refused with their line)."""
    try:
        return math.isfinite(float(s))
    except ValueError:
        return False


def _splitter(sep: str):
    if sep == "whitespace":
        return lambda line: line.split()
    if len(sep) == 1:
        return lambda line: next(csv.reader([line], delimiter=sep))
    return lambda line: [f.strip() for f in line.split(sep)]


def sniff_sep(line: str) -> str:
    """Separator of a data line: tab, '::', comma, semicolon, '|' or runs of whitespace."""
    for s in ("\t", "::", ",", ";", "|"):
        if s in line:
            return s
    return "whitespace"


def _columns_spec(columns) -> dict:
    """Normalise a columns argument to ``{role: name-or-position}``."""
    if columns is None:
        return {}
    if isinstance(columns, dict):
        unknown = [k for k in columns if k not in ROLES]
        if unknown:
            raise DataError(f"columns: unknown role {unknown[0]!r}, allowed: {', '.join(ROLES)}")
        spec = {k: v for k, v in columns.items() if v is not None}
    elif isinstance(columns, (list, tuple)):
        if not 2 <= len(columns) <= 4:
            raise DataError(f"columns: give 2 to 4 columns (user, item[, rating[, timestamp]]), got {columns!r}")
        spec = {r: c for r, c in zip(ROLES, columns) if c is not None}
    else:
        raise DataError(f"columns: expected a dict role->column or a list, got {columns!r}")
    out = {}
    for role, c in spec.items():
        if isinstance(c, str) and c.strip().isdigit():
            c = int(c)
        if isinstance(c, bool) or not isinstance(c, (int, str)) or (isinstance(c, int) and c < 0):
            raise DataError(f"columns: {role} column must be a name or a 0-based position, got {c!r}")
        out[role] = c
    return out


def _resolve_columns(spec: dict, names: Optional[list], nfields: int, source: str) -> dict:
    """Map each role to a 0-based position. ``names``: normalised header, or None without one."""
    pos: dict = {}
    for role, c in spec.items():
        if isinstance(c, int):
            if c >= nfields:
                raise DataError(f"{source}: {role} column {c} does not exist "
                                f"(lines have {nfields} fields; positions are 0-based)")
            pos[role] = c
        else:
            if names is None:
                raise DataError(f"{source}: column {c!r} given by name but the file has no header")
            try:
                pos[role] = names.index(_norm(c))
            except ValueError:
                raise DataError(f"{source}: column {c!r} not found; header has: {', '.join(names)}") from None
    if names is not None:
        for role in ROLES:
            if role not in pos:
                for j, n in enumerate(names):
                    if n in SYNONYMS[role] and j not in pos.values():
                        pos[role] = j
                        break
    missing = [r for r in ("user", "item") if r not in pos]
    if names is not None and missing:
        # a header that names no user or item column: guessing by position would make prices
        # users without a word
        flags = " and ".join(f"--{r}-col" for r in missing)
        raise DataError(f"{source}: no column is named like a {' or '.join(f'{r} id' for r in missing)} "
                        f"(header: {', '.join(names)}); name it with {flags} (by name or 0-based position)")
    used = set(pos.values())
    free = [j for j in range(nfields) if j not in used]
    for role in ("user", "item"):
        if role not in pos:
            if not free:
                raise DataError(f"{source}: no column left for {role}; lines have {nfields} field(s)")
            pos[role] = free.pop(0)
    # with no columns given and no recognisable header, a third and fourth column are rating
    # and timestamp by convention (u.data, most edge lists)
    if not spec and (names is None or not any(n in _KNOWN for n in names)):
        for role in ("rating", "timestamp"):
            if role not in pos and role not in spec and free:
                pos[role] = free.pop(0)
    if len(set(pos.values())) != len(pos):
        raise DataError(f"{source}: two roles use the same column: {pos}")
    return pos


def read_delimited(src: Union[Path, bytes], source: str, sep: Optional[str] = None, columns=None,
                   header: Optional[bool] = None, ids: str = "token") -> Interactions:
    """Read a delimited edge list from a path or bytes; ``source`` names it in messages.
    ``ids``: ``token`` keeps ids as the strings written (``007`` is not ``7``), ``int`` parses them."""
    import pandas as pd

    # Only the head is decoded here (separator, header); pandas streams the whole file, and the
    # slow line-by-line scan runs only when something is wrong, to name the line.
    if isinstance(src, (bytes, bytearray)):
        data = bytes(src)
        head = data[:_HEAD_BYTES]
        whole = len(data) <= _HEAD_BYTES
    else:
        try:
            with open(src, "rb") as f:
                head = f.read(_HEAD_BYTES + 1)
        except FileNotFoundError:
            raise DataError(f"{source}: no such file") from None
        except IsADirectoryError:
            raise DataError(f"{source}: is a directory, expected a file") from None
        whole = len(head) <= _HEAD_BYTES
        head = head[:_HEAD_BYTES]
        data = None
    if head[:4] == b"PAR1":
        raise DataError(f"{source}: this is a Parquet file; use format 'parquet'")
    if head[:2] == b"PK" or head[:2] == b"\x1f\x8b":
        raise DataError(f"{source}: this is a compressed archive, not a text edge list")
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 4:  # not just a character cut at the end of the head
            raise _not_utf8(source, head, e) from None
        text = head[:e.start].decode("utf-8")
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.splitlines()
    if not whole and len(lines) > 1:
        lines = lines[:-1]            # the last line of a cut head may be partial
    data_idx = [k for k, ln in enumerate(lines[:200]) if ln.strip()]
    if not data_idx:
        raise DataError(f"{source}: no interactions (empty file)")
    first = lines[data_idx[0]]
    sep = sep if sep not in (None, "", "auto") else sniff_sep(first)
    if sep in ("\\t", "tab"):
        sep = "\t"
    if sep in (" ", "space", "\\s+"):
        sep = "whitespace"
    split = _splitter(sep)
    spec = _columns_spec(columns)
    first_fields = split(first)
    if header is None:
        header = _looks_like_header(first_fields, [split(lines[k]) for k in data_idx[1:20]], spec)
    names = [_norm(f) for f in first_fields] if header else None
    nfields = len(first_fields)
    pos = _resolve_columns(spec, names, nfields, source)
    header_line = data_idx[0] + 1 if header else 0   # 1-based line of the header, 0 = none
    if header and len(data_idx) == 1 and whole:
        raise DataError(f"{source}: no interactions (only a header line)")

    wanted = {r: p for r, p in pos.items() if r != "timestamp"}
    # all columns are read (no usecols) so that a line with extra fields is an error, as it
    # usually means a wrong separator or a broken line
    # ids are read as the text written: pandas' number guessing would make "007" and "7" one user
    kw = dict(header=None, skiprows=header_line, skip_blank_lines=True,
              keep_default_na=False, na_values=[""], dtype={pos["user"]: str, pos["item"]: str})
    if sep == "whitespace":
        kw.update(sep=r"\s+", engine="c")
    elif len(sep) == 1:
        kw.update(sep=sep, engine="c", quotechar='"')
    else:
        kw.update(sep=re.escape(sep), engine="python")
    bad = None
    # strict: ids in another encoding must not be merged through replacement characters
    kw.update(encoding="utf-8-sig", encoding_errors="strict")
    try:
        df = pd.read_csv(io.BytesIO(data) if data is not None else src, **kw)
    except UnicodeDecodeError:
        raise _not_utf8_anywhere(source, data if data is not None else src) from None
    except (pd.errors.ParserError, ValueError) as e:
        df, bad = None, str(e).strip().splitlines()[-1]
    if df is not None and df.shape[0] == 0:
        raise DataError(f"{source}: no interactions")
    if df is not None:
        cols = {r: df[p] for r, p in wanted.items()}
        problem = any(cols[r].isna().any() for r in cols)
        ratings = None
        if "rating" in cols and not problem:
            ratings = pd.to_numeric(cols["rating"], errors="coerce").to_numpy(np.float64)
            problem = not bool(np.isfinite(ratings).all())
        if not problem:
            where = lambda row: f"{source}:{_line_of_row(src, header_line, row)}"  # noqa: E731
            return Interactions(_ids(cols["user"], ids, "user", where), _ids(cols["item"], ids, "item", where),
                                ratings, source, {r: (names[p] if names else p) for r, p in pos.items()})
    if data is not None:
        all_lines = io.StringIO(data.decode("utf-8-sig", errors="replace"))
    else:
        all_lines = open(src, encoding="utf-8-sig", errors="replace")
    with all_lines:
        where = _find_bad_line(all_lines, header_line, split, pos, nfields)
    if where:
        raise DataError(f"{source}:{where[0]}: {where[1]}")
    raise DataError(f"{source}: could not parse ({bad or 'missing values'})")


def _not_utf8(source: str, data: bytes, e: UnicodeDecodeError, line_offset: int = 0) -> DataError:
    line = line_offset + data.count(b"\n", 0, e.start) + 1
    return DataError(f"{source}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x}); ids in another encoding "
                     f"would be merged or garbled; convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)")


def _not_utf8_anywhere(source: str, src) -> DataError:
    """The first line of ``src`` (bytes or a path) that is not UTF-8, as a DataError."""
    stream = io.BytesIO(src) if isinstance(src, (bytes, bytearray)) else open(src, "rb")
    with stream:
        for k, raw in enumerate(stream):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return _not_utf8(source, raw, e, line_offset=k)
    return DataError(f"{source}: not UTF-8 text; convert the file to UTF-8")


def _looks_like_header(first: list, rest: list, spec: dict) -> bool:
    if any(isinstance(c, str) for c in spec.values()):
        return True
    if any(_norm(f) in _KNOWN for f in first):
        return True
    # a column that is numeric on the following lines but not on the first one
    for j, f in enumerate(first):
        if not _is_number(f) and rest and all(j < len(r) and _is_number(r[j]) for r in rest):
            return True
    return False


def _line_of_row(src, header_line: int, row: int) -> int:
    """1-based line of data row ``row`` (0-based, blank lines not counted) of a path or bytes."""
    stream = io.BytesIO(src) if isinstance(src, (bytes, bytearray)) else open(src, "rb")
    k = -1
    with stream:
        for lineno, raw in enumerate(stream, 1):
            if lineno <= header_line or not raw.strip():
                continue
            k += 1
            if k == row:
                return lineno
    return 0


def _find_bad_line(lines, header_line, split, pos, nfields, numeric=("rating",)):
    """First malformed line as ``(1-based line number, reason)``, or None."""
    need = max(pos.values()) + 1
    for k, ln in enumerate(lines):
        ln = ln.rstrip("\r\n")
        if k < header_line or not ln.strip():
            continue
        f = split(ln)
        if len(f) < need:
            return k + 1, f"expected at least {need} fields, got {len(f)}: {ln.strip()[:60]!r}"
        if len(f) > nfields:
            return k + 1, f"expected {nfields} fields like the first line, got {len(f)}: {ln.strip()[:60]!r}"
        for role in ("user", "item"):
            if not f[pos[role]].strip():
                return k + 1, f"empty {role} id"
        for role in numeric:
            if role in pos and not _is_number(f[pos[role]]):
                return k + 1, f"{role} {f[pos[role]]!r} is not a number"
    return None


def _ids(col, ids: str, role: str, where) -> np.ndarray:
    """A column of ids: int64 where the column is typed integer (or integral floats) or ``ids`` is
    ``int``; else the stripped strings as fixed-width unicode. ``where(row)`` names a row in messages."""
    import pandas as pd

    arr = col.to_numpy()
    if arr.dtype.kind in "iu":
        if arr.dtype.kind == "u" and arr.size and arr.max() > _INT64_MAX:
            row = int(np.argmax(arr > _INT64_MAX))
            raise DataError(f"{where(row)}: {role} id {arr[row]} is past int64 (at most {_INT64_MAX}); "
                            f"store ids as strings")
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "f":
        if np.all(arr == np.round(arr)) and (arr.size == 0 or np.abs(arr).max() <= 2.0 ** 63):
            return arr.astype(np.int64)
        if ids == "int":
            row = int(np.argmax(arr != np.round(arr)))
            raise DataError(f"{where(row)}: {role} id {arr[row]!r} is not an integer (ids='int')")
        return arr.astype(str)
    if arr.size and isinstance(arr[0], (bytes, bytearray)):   # str() of bytes would decode or garble
        raise DataError(f"{where(0)}: {role} ids are binary values ({bytes(arr[0][:16])!r}); ids must be "
                        f"strings or integers: store the column as a string or integer type")
    s = pd.Series(arr).astype(str).str.strip().to_numpy().astype(str)
    if ids == "token":
        return s
    try:
        return s.astype(np.int64)
    except (OverflowError, ValueError):
        pass
    for row, v in enumerate(s):       # name the first id that is not an int64
        if not re.fullmatch(r"[+-]?\d+", v):
            raise DataError(f"{where(row)}: {role} id {v[:40]!r} is not an integer (ids='int'; "
                            f"leave ids as tokens to keep it)")
        if not -_INT64_MAX - 1 <= int(v) <= _INT64_MAX:
            raise DataError(f"{where(row)}: {role} id {v[:40]} is past int64 (at most {_INT64_MAX}); "
                            f"leave ids as tokens (ids='token') to keep it")
    raise DataError(f"{where(0)}: {role} ids are not integers")


# ----------------------------------------------------------------------
def read_parquet(path: Path, columns=None, ids: str = "token") -> Interactions:
    """Read user/item[/rating] columns of a Parquet file (names or 0-based positions); integer
    columns keep integer ids, string columns keep them as tokens unless ``ids`` is ``int``."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{path}: reading Parquet needs pyarrow (pip install 'gnnrec-lab[parquet]')") from None
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises ArrowInvalid / OSError with long messages
        raise DataError(f"{path}: not a readable Parquet file ({str(e).splitlines()[0]})") from None
    names = [_norm(n) for n in pf.schema_arrow.names]
    pos = _resolve_columns(_columns_spec(columns), names, len(names), str(path))
    raw_names = pf.schema_arrow.names
    wanted = {r: raw_names[p] for r, p in pos.items() if r != "timestamp"}
    import pyarrow as pa
    for role, col in wanted.items():
        typ = pf.schema_arrow.field(col).type
        base = typ.value_type if pa.types.is_dictionary(typ) else typ
        if pa.types.is_nested(base) or pa.types.is_binary(base) or pa.types.is_large_binary(base) \
                or pa.types.is_fixed_size_binary(base):
            raise DataError(f"{path}: column {col!r} ({role}) holds {typ} values; {role} "
                            f"{'ids' if role != 'rating' else 'values'} must be plain numbers or strings "
                            f"(binary ids are not text: cast the column to string or integer)")
    table = pf.read(columns=sorted(set(wanted.values())))
    if table.num_rows == 0:
        raise DataError(f"{path}: no interactions (no rows)")
    df = table.to_pandas()
    for role, col in wanted.items():
        nulls = df[col].isna().to_numpy()
        if nulls.any():
            raise DataError(f"{path}: row {int(np.argmax(nulls)) + 1}: empty {role} ({col!r})")
    ratings = None
    if "rating" in wanted:
        import pandas as pd
        ratings = pd.to_numeric(df[wanted["rating"]], errors="coerce").to_numpy(np.float64)
        if not np.isfinite(ratings).all():
            r = int(np.argmax(~np.isfinite(ratings)))
            raise DataError(f"{path}: row {r + 1}: rating {df[wanted['rating']].iloc[r]!r} is not a number")
    where = lambda row: f"{path}: row {row + 1}"  # noqa: E731
    return Interactions(_ids(df[wanted["user"]], ids, "user", where), _ids(df[wanted["item"]], ids, "item", where),
                        ratings, str(path), {r: raw_names[p] for r, p in pos.items()})


# ----------------------------------------------------------------------
def parse_recbole_header(line: str, source: str, sep: str = "\t") -> list:
    """``[(name, type), ...]`` of a RecBole atomic-file header (``name:type`` fields)."""
    fields = line.rstrip("\r\n").split(sep)
    out = []
    for k, f in enumerate(fields, 1):
        parts = f.strip().split(":")
        if len(parts) != 2 or not parts[0] or parts[1] not in RECBOLE_TYPES:
            raise DataError(f"{source}:1: header field {k} {f[:40]!r}: expected name:type with type one of "
                            f"{', '.join(RECBOLE_TYPES)} (a RecBole atomic file, fields separated by "
                            f"{'tab' if sep == chr(9) else repr(sep)})")
        out.append((parts[0], parts[1]))
    names = [n for n, _ in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise DataError(f"{source}:1: header names field {dup!r} twice")
    return out


def read_recbole(path: Path, columns=None, sep: Optional[str] = None, ids: str = "token") -> Interactions:
    """Read a RecBole atomic ``.inter`` file. ``columns`` names RecBole's USER_ID_FIELD /
    ITEM_ID_FIELD / RATING_FIELD / TIME_FIELD (``{"user": "reader_id", ...}``; default
    ``user_id``, ``item_id``, ``rating``, ``timestamp``, else a field with a usual name of the
    right type). ``:token`` ids stay strings (``ids="int"`` parses them); ratings are ``:float``."""
    import pandas as pd

    source = str(path)
    sep = "\t" if sep in (None, "", "auto", "tab", "\\t") else sep
    with open(path, "rb") as f:
        first = f.readline()
    try:
        head = first.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise _not_utf8(source, first, e) from None
    if not head.strip():
        raise DataError(f"{source}:1: no header (expected name:type fields such as user_id:token)")
    fields = parse_recbole_header(head, source, sep)
    names = [n for n, _ in fields]
    spec = _columns_spec(columns)
    pos = {}
    for role, c in spec.items():
        if isinstance(c, int):
            if c >= len(fields):
                raise DataError(f"{source}: {role} column {c} does not exist (the header has {len(fields)} "
                                f"fields; positions are 0-based)")
            pos[role] = c
        else:
            name = str(c).split(":")[0]
            if name not in names:
                raise DataError(f"{source}: {role} field {name!r} not found; header has: {', '.join(names)}")
            pos[role] = names.index(name)
    want = {"user": "token", "item": "token", "rating": "float", "timestamp": "float"}
    for role in ROLES:
        if role in pos:
            continue
        if RECBOLE_FIELDS[role] in names:
            pos[role] = names.index(RECBOLE_FIELDS[role])
            continue
        for j, (n, t) in enumerate(fields):
            if _norm(n) in SYNONYMS[role] and t == want[role] and j not in pos.values():
                pos[role] = j
                break
    missing = [r for r in ("user", "item") if r not in pos]
    if missing:
        raise DataError(f"{source}: no {' or '.join(RECBOLE_FIELDS[r] for r in missing)} field (header: "
                        f"{', '.join(f'{n}:{t}' for n, t in fields)}); name RecBole's "
                        f"{' and '.join(r.upper() + '_ID_FIELD' for r in missing)} with "
                        f"{' and '.join(f'--{r}-col' for r in missing)}")
    for role, j in pos.items():
        n, t = fields[j]
        if t != want[role]:
            raise DataError(f"{source}:1: {role} field {n!r} is :{t}; RecBole's "
                            f"{'ids' if role in ('user', 'item') else role + 's'} are :{want[role]}")
    if len(set(pos.values())) != len(pos):
        raise DataError(f"{source}: two roles use the same field: {pos}")
    kw = dict(sep=sep if len(sep) == 1 else re.escape(sep), engine="c" if len(sep) == 1 else "python",
              header=None, skiprows=1, dtype=str, skip_blank_lines=True, keep_default_na=False, na_values=[""],
              encoding="utf-8-sig", encoding_errors="strict", quoting=csv.QUOTE_NONE)
    bad = None
    try:
        df = pd.read_csv(path, **kw)
    except UnicodeDecodeError:
        raise _not_utf8_anywhere(source, path) from None
    except pd.errors.EmptyDataError:
        raise DataError(f"{source}: no interactions (only a header line)") from None
    except (pd.errors.ParserError, ValueError) as e:
        df, bad = None, str(e).strip().splitlines()[-1]
    if df is not None and df.shape[0] == 0:
        raise DataError(f"{source}: no interactions (only a header line)")
    if df is not None and df.shape[1] == len(fields):
        cols = {r: df[p] for r, p in pos.items()}
        problem = any(cols[r].isna().any() for r in ("user", "item"))
        num = {}
        for role in ("rating", "timestamp"):
            if role in cols and not problem:
                num[role] = pd.to_numeric(cols[role], errors="coerce").to_numpy(np.float64)
                problem = not bool(np.isfinite(num[role]).all())
        if not problem:
            where = lambda row: f"{source}:{_line_of_row(path, 1, row)}"  # noqa: E731
            return Interactions(_ids(cols["user"], ids, "user", where), _ids(cols["item"], ids, "item", where),
                                num.get("rating"), source, {r: names[p] for r, p in pos.items()})
    with open(path, encoding="utf-8-sig", errors="replace") as lines:
        found = _find_bad_line(lines, 1, lambda ln: ln.split(sep), pos, len(fields),
                               numeric=("rating", "timestamp"))
    if found:
        raise DataError(f"{source}:{found[0]}: {found[1]} (header: {', '.join(f'{n}:{t}' for n, t in fields)})")
    if df is not None and df.shape[1] != len(fields):
        raise DataError(f"{source}: lines have {df.shape[1]} fields, the header {len(fields)}")
    raise DataError(f"{source}: could not parse ({bad or 'missing values'})")


# ----------------------------------------------------------------------
def lightgcn_file(directory: Path, stem: str) -> Optional[Path]:
    """``directory/stem`` (``train.txt``, ...), else its gzip-compressed ``stem.gz``; None if neither."""
    for p in (directory / stem, directory / f"{stem}.gz"):
        if p.is_file():
            return p
    return None


def read_lightgcn(directory: Path) -> GivenSplit:
    """Read ``train.txt``, ``test.txt`` and, where there is one, ``valid.txt`` (lines
    ``user item item ...``, integers; each may be gzip-compressed, ``train.txt.gz``)."""
    parts = {}
    for stem in ("train.txt", "valid.txt", "test.txt"):
        path = lightgcn_file(directory, stem)
        if path is None and stem == "valid.txt":
            continue
        users, items, heads = _read_lightgcn_file(path or directory / stem)
        if users.size == 0:
            why = {"train.txt": "", "test.txt": " (nothing to evaluate)",
                   "valid.txt": " (remove it to carve a validation part out of train.txt)"}[stem]
            raise DataError(f"{path}: no interactions{why}")
        parts[stem] = (Interactions(users, items, None, str(path)), heads)
    return GivenSplit(parts["train.txt"][0], parts["test.txt"][0],
                      np.unique(np.concatenate([h for _, h in parts.values()])), str(directory),
                      parts["valid.txt"][0] if "valid.txt" in parts else None)


def _read_lightgcn_file(path: Path):
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    heads, counts, flat = [], [], []
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            tok = line.split()
            if not tok:
                continue
            try:
                vals = list(map(int, tok))
            except ValueError:
                bad = next(t for t in tok if not re.fullmatch(r"[+-]?\d+", t))
                raise DataError(f"{path}:{lineno}: expected integer ids, got {bad!r}") from None
            if max(vals) > _INT64_MAX or min(vals) < -_INT64_MAX - 1:
                bad = next(v for v in vals if not -_INT64_MAX - 1 <= v <= _INT64_MAX)
                raise DataError(f"{path}:{lineno}: id {bad} is past int64 (at most {_INT64_MAX}); LightGCN "
                                f"files hold integer ids")
            heads.append(vals[0])
            counts.append(len(vals) - 1)
            flat.extend(vals[1:])
    heads_a = np.asarray(heads, dtype=np.int64)
    users = np.repeat(heads_a, np.asarray(counts, dtype=np.int64))
    return users, np.asarray(flat, dtype=np.int64), heads_a


# ----------------------------------------------------------------------
def apply_min_rating(inter: Interactions, min_rating: Optional[float]) -> Interactions:
    """Keep interactions rated ``>= min_rating`` (all when None)."""
    if min_rating is None:
        return inter
    if inter.ratings is None:
        raise DataError(f"{inter.source}: min_rating needs a rating column; none found")
    keep = inter.ratings >= float(min_rating)
    if not keep.any():
        raise DataError(f"{inter.source}: no interactions with rating >= {min_rating:g}")
    return Interactions(inter.users[keep], inter.items[keep], inter.ratings[keep], inter.source, inter.columns)


def _codes(ids: np.ndarray, vocab: np.ndarray) -> np.ndarray:
    return np.searchsorted(vocab, ids).astype(np.int64)


def index_interactions(inter: Interactions):
    """Re-index ids to ``0..n-1`` (sorted original ids) and merge duplicates.

    Returns ``(pairs, user_ids, item_ids, duplicates)``: ``pairs`` is ``(n, 2)`` int32
    sorted by user then item; ``user_ids[k]`` is the original id of user ``k``.
    """
    if inter.users.size == 0:
        raise DataError(f"{inter.source}: no interactions")
    user_ids = np.unique(inter.users)
    item_ids = np.unique(inter.items)
    pairs, dup = _pairs(_codes(inter.users, user_ids), _codes(inter.items, item_ids), item_ids.size)
    return pairs, user_ids, item_ids, dup


def _pairs(u: np.ndarray, i: np.ndarray, n_items: int):
    key = np.unique(u * n_items + i)
    pairs = np.empty((key.size, 2), dtype=np.int32)
    pairs[:, 0] = key // n_items
    pairs[:, 1] = key % n_items
    return pairs, int(u.size - key.size)


def index_given(given: GivenSplit):
    """Re-index a LightGCN train/(valid/)test cut over the union of their ids.

    Returns ``(train_pairs, valid_pairs or None, test_pairs, user_ids, item_ids, duplicates)``.
    """
    cuts = [given.train, given.test] + ([given.valid] if given.valid is not None else [])
    user_ids = np.unique(np.concatenate([given.line_users] + [c.users for c in cuts]))
    item_ids = np.unique(np.concatenate([c.items for c in cuts]))
    pairs, dup = [], 0
    for c in cuts:
        p, d = _pairs(_codes(c.users, user_ids), _codes(c.items, item_ids), item_ids.size)
        pairs.append(p)
        dup += d
    return pairs[0], (pairs[2] if given.valid is not None else None), pairs[1], user_ids, item_ids, dup
