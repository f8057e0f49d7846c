"""Readers: ids are tokens, columns are named or refused, RecBole atomic files, ids past int64.

Cases are generated (hypothesis, parametrised): every id spelling, column naming and bad
value of a class, not only the example that found it.
"""
from __future__ import annotations

import os
import string
import zipfile
from pathlib import Path

import numpy as np
import pytest
from _cli import run_cli as _cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gnnrec_lab.data import load, readers, registry
from gnnrec_lab.util.errors import DataError

REPO = Path(__file__).resolve().parents[1]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
INT64_MAX = np.iinfo(np.int64).max




def _one_line_error(rc, err, *needles):
    assert rc == 2, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, err


# ----------------------------------------------------------------------
# ids are tokens: "007" and "7" are two users unless integers are asked for
digit_ids = st.text(alphabet="0123456789", min_size=1, max_size=4)


@SETTINGS
@given(rows=st.lists(st.tuples(digit_ids, digit_ids), min_size=1, max_size=30), sep=st.sampled_from([",", "\t", ";"]))
def test_ids_are_tokens_unless_int_is_asked(tmp_path, rows, sep):
    f = tmp_path / "ids.csv"
    f.write_text(f"user{sep}item\n" + "".join(f"{u}{sep}{i}\n" for u, i in rows))
    inter = readers.read_source(f, "csv")
    assert set(inter.users.tolist()) == {u for u, _ in rows}
    assert set(inter.items.tolist()) == {i for _, i in rows}
    as_int = readers.read_source(f, "csv", ids="int")
    assert set(as_int.users.tolist()) == {int(u) for u, _ in rows}
    assert as_int.users.dtype == np.int64


@pytest.mark.parametrize("fmt", ["csv", "parquet", "recbole"])
def test_007_and_7_are_two_users(tmp_path, capsys, fmt):
    rows = [("007", "a"), ("7", "a"), ("007", "b"), ("7", "b"), ("007", "c"), ("7", "c")]
    if fmt == "parquet":
        pd = pytest.importorskip("pandas")
        pytest.importorskip("pyarrow")
        f = tmp_path / "ids.parquet"
        pd.DataFrame({"user_id": [u for u, _ in rows], "item_id": [i for _, i in rows]}).to_parquet(f)
    elif fmt == "recbole":
        f = tmp_path / "ids.inter"
        f.write_text("user_id:token\titem_id:token\n" + "".join(f"{u}\t{i}\n" for u, i in rows))
    else:
        f = tmp_path / "ids.csv"
        f.write_text("user,item\n" + "".join(f"{u},{i}\n" for u, i in rows))
    rc, out, err = _cli(["data", "prepare", f, "--data-dir", tmp_path / "dd"], capsys)
    assert rc == 0, err
    assert "2 users, 3 items, 6 interactions" in out
    assert "columns used: user=" in out
    ds = load(f.stem, data_dir=tmp_path / "dd")
    assert sorted(ds.user_ids.tolist()) == ["007", "7"]


# ----------------------------------------------------------------------
# a header that names no user or item column is refused, not guessed; the columns used are printed
not_an_id = st.text(alphabet=string.ascii_lowercase, min_size=3, max_size=8).filter(
    lambda n: n not in readers._KNOWN)


@SETTINGS
@given(names=st.lists(not_an_id, min_size=2, max_size=4, unique=True), fmt=st.sampled_from(["csv", "parquet"]))
def test_unnamed_user_item_columns_are_refused(tmp_path, names, fmt):
    pd = pytest.importorskip("pandas")
    # numbers under a text header: the header is recognisable as one, and names no id column
    df = pd.DataFrame({n: [10 * k + j for k in range(4)] for j, n in enumerate(names)})
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
        f = tmp_path / "x.parquet"
        df.to_parquet(f)
    else:
        f = tmp_path / "x.csv"
        df.to_csv(f, index=False)
    with pytest.raises(DataError) as e:
        readers.read_source(f, fmt)
    msg = str(e.value)
    assert "--user-col" in msg and "--item-col" in msg and names[0] in msg and "\n" not in msg
    # naming them is enough
    inter = readers.read_source(f, fmt, columns={"user": names[1], "item": names[0]})
    assert inter.columns == {"user": names[1], "item": names[0]}
    assert str(inter.users[0]) == "1" and str(inter.items[3]) == "30"


def test_price_customer_sku_parquet_refused_then_prepared_with_columns(tmp_path, capsys):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    f = tmp_path / "orders.parquet"
    pd.DataFrame({"price": [9.5, 3.0, 9.5, 1.25, 3.0, 7.0] * 2, "customer": ["c1", "c2", "c3"] * 4,
                  "sku": list("abcdefghijkl")}).to_parquet(f)
    rc, out, err = _cli(["data", "prepare", f, "--data-dir", tmp_path / "dd"], capsys)
    _one_line_error(rc, err, str(f), "--user-col", "--item-col", "price, customer, sku")
    assert not (tmp_path / "dd" / "orders").exists()
    rc, out, err = _cli(["data", "prepare", f, "--user-col", "customer", "--item-col", "sku",
                         "--data-dir", tmp_path / "dd"], capsys)
    assert rc == 0, err
    assert "columns used: user=customer, item=sku" in out
    rc, out, err = _cli(["data", "info", "orders", "--data-dir", tmp_path / "dd"], capsys)
    assert "user=customer, item=sku (ids: token)" in out


# ----------------------------------------------------------------------
# binary ids in Parquet, ids past int64: one clear line
@SETTINGS
@given(values=st.lists(st.binary(min_size=1, max_size=8), min_size=1, max_size=6),
       role=st.sampled_from(["user", "item"]))
def test_binary_parquet_ids_are_a_clear_error(tmp_path, values, role):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    other = "item" if role == "user" else "user"
    f = tmp_path / "bin.parquet"
    pq.write_table(pa.table({role: pa.array(values, pa.binary()), other: list(range(len(values)))}), f)
    with pytest.raises(DataError) as e:
        readers.read_source(f, "parquet")
    assert "binary" in str(e.value) and repr(role) in str(e.value) and str(f) in str(e.value)


@SETTINGS
@given(big=st.integers(min_value=INT64_MAX + 1, max_value=2 ** 80), line=st.integers(1, 4))
def test_lightgcn_id_past_int64_names_the_line(tmp_path, big, line):
    d = tmp_path / "lg"
    d.mkdir(exist_ok=True)
    rows = ["0 1 2", "1 2 3", "2 3 4", "3 4 5"]
    rows[line - 1] += f" {big}"
    (d / "train.txt").write_text("\n".join(rows) + "\n")
    (d / "test.txt").write_text("0 3\n")
    with pytest.raises(DataError, match=rf"train\.txt:{line}: id {big} is past int64"):
        readers.read_source(d, "lightgcn")


@SETTINGS
@given(big=st.integers(min_value=INT64_MAX + 1, max_value=2 ** 80), row=st.integers(0, 3),
       blank=st.booleans())
def test_int_ids_past_int64_name_the_line_tokens_keep_them(tmp_path, big, row, blank):
    rows = [f"{k},{10 + k}" for k in range(4)]
    rows[row] = f"{big},7"
    f = tmp_path / "big.csv"
    f.write_text("user,item\n" + ("\n" if blank else "") + "\n".join(rows) + "\n")
    with pytest.raises(DataError) as e:
        readers.read_source(f, "csv", ids="int")
    line = row + 2 + int(blank)
    assert f"{f}:{line}: user id {big} is past int64" in str(e.value)
    assert str(big) in readers.read_source(f, "csv").users.tolist()     # as a token it is just a name


def test_uint64_parquet_past_int64_is_refused(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    f = tmp_path / "u64.parquet"
    pq.write_table(pa.table({"user_id": pa.array([1, 2 ** 63 + 5], pa.uint64()), "item_id": [1, 2]}), f)
    with pytest.raises(DataError, match=r"row 2: user id 9223372036854775813 is past int64"):
        readers.read_source(f, "parquet")


# ----------------------------------------------------------------------
# RecBole atomic files
def _wheel():
    env = os.environ.get("GNNREC_LAB_DATA")
    for d in ([Path(env)] if env else []) + [REPO / "data"]:
        if (d / "downloads" / registry.RECBOLE_WHEEL).is_file():
            return d / "downloads" / registry.RECBOLE_WHEEL
    return None


@pytest.fixture(scope="module")
def ml100k_inter(tmp_path_factory):
    wheel = _wheel()
    if wheel is None:       # fetch it the way `data prepare ml-100k` does
        wheel = registry._ml100k_wheel(tmp_path_factory.mktemp("wheel"))
    out = tmp_path_factory.mktemp("recbole") / "ml-100k.inter"
    with zipfile.ZipFile(wheel) as z:
        out.write_bytes(z.read(readers.RECBOLE_ML100K_MEMBER))
    return wheel, out


def test_recbole_ml100k_inter_is_the_builtin_interaction_set(ml100k_inter, tmp_path, capsys):
    wheel, inter_file = ml100k_inter
    assert readers.detect_format(inter_file) == "recbole"
    got = readers.read_source(inter_file, "recbole")
    assert got.users.dtype.kind == "U"                         # :token ids stay tokens
    assert got.columns == {"user": "user_id", "item": "item_id", "rating": "rating", "timestamp": "timestamp"}
    builtin = readers.read_ml100k(wheel)
    assert {(str(u), str(i)) for u, i in zip(got.users, got.items)} == \
        {(str(u), str(i)) for u, i in zip(builtin.users, builtin.items)}
    assert np.array_equal(np.sort(got.ratings), np.sort(builtin.ratings))
    rc, out, err = _cli(["data", "prepare", inter_file, "--data-dir", tmp_path / "dd"], capsys)
    assert rc == 0, err
    assert "prepared ml-100k-recbole: 943 users, 1,682 items, 100,000 interactions" in out
    rc, out, err = _cli(["data", "prepare", inter_file, "--format", "recbole", "--min-rating", "4",
                         "--data-dir", tmp_path / "dd"], capsys)
    assert rc == 0, err
    assert f"{int((builtin.ratings >= 4).sum()):,} interactions" in out


def test_recbole_fields_named_otherwise(tmp_path, capsys):
    f = tmp_path / "books.inter"
    rows = [(f"r{k % 3}", f"b{k % 5}", 1.0 + k % 5, 1000 + k) for k in range(15)]
    f.write_text("reader:token\tbook:token\tscore:float\twhen:float\n"
                 + "".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in rows))
    rc, out, err = _cli(["data", "prepare", f, "--data-dir", tmp_path / "dd"], capsys)
    _one_line_error(rc, err, "USER_ID_FIELD", "ITEM_ID_FIELD", "--user-col", "--item-col", "reader:token")
    rc, out, err = _cli(["data", "prepare", f, "--user-col", "reader", "--item-col", "book", "--rating-col", "score",
                         "--min-rating", "3", "--data-dir", tmp_path / "dd"], capsys)
    assert rc == 0, err
    assert "columns used: user=reader, item=book, rating=score" in out
    want = {(u, i) for u, i, r, _ in rows if r >= 3}
    ds = load("books-min3", data_dir=tmp_path / "dd", split=(1, 0, 0))
    assert {(ds.user_ids[u], ds.item_ids[i]) for u, i in ds.train} == want
    # usual names of the right type are found without flags (Yelp's business_id, stars)
    g = tmp_path / "yelp.inter"
    g.write_text("review_id:token\tuser_id:token\tbusiness_id:token\tstars:float\n"
                 + "".join(f"v{k}\tu{k % 3}\tb{k % 4}\t{k % 5}\n" for k in range(12)))
    inter = readers.read_source(g, "recbole")
    assert inter.columns == {"user": "user_id", "item": "business_id", "rating": "stars"}


@pytest.mark.parametrize("header, words", [
    ("user_id\titem_id\n", "header field 1 'user_id': expected name:type"),
    ("user_id:token\titem_id:str\n", "header field 2 'item_id:str'"),
    ("user_id:token,item_id:token\n", "header field 1"),                   # not tab-separated
    ("user_id:token\titem_id:token\tuser_id:float\n", "names field 'user_id' twice"),
    ("user_id:float\titem_id:token\n", "user field 'user_id' is :float; RecBole's ids are :token"),
    ("user_id:token\titem_id:token\trating:token\n", "rating field 'rating' is :token"),
    ("\n", "no header"),
])
def test_recbole_bad_header_names_file_and_line(tmp_path, header, words):
    f = tmp_path / "bad.inter"
    f.write_text(header + "1\t2\t3\n")
    with pytest.raises(DataError) as e:
        readers.read_source(f, "recbole")
    assert f"{f}:1:" in str(e.value) and words in str(e.value), str(e.value)


HEADER = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
good_line = st.tuples(st.sampled_from(["u1", "u2", "007"]), st.sampled_from(["i1", "i2"]),
                      st.sampled_from(["1", "4.5"]), st.sampled_from(["100", "2e9"])).map("\t".join)
bad_line = st.sampled_from([
    ("u1\ti1\tfive\t100", "rating 'five' is not a number"),
    ("u1\ti1\t4\tlater", "timestamp 'later' is not a number"),
    ("u1\ti1\t4\t100\textra", "expected 4 fields"),
    ("u1\ti1", "expected at least 4 fields"),
    ("\ti1\t4\t100", "empty user id"),
    ("u1\t\t4\t100", "empty item id"),
    ("u1\ti1\tnan\t100", "rating 'nan' is not a number"),
])


@SETTINGS
@given(before=st.lists(good_line, min_size=1, max_size=8), bad=bad_line, after=st.lists(good_line, max_size=3))
def test_recbole_bad_line_names_file_and_line(tmp_path, before, bad, after):
    f = tmp_path / "lines.inter"
    f.write_text(HEADER + "".join(ln + "\n" for ln in before + [bad[0]] + after))
    with pytest.raises(DataError) as e:
        readers.read_source(f, "recbole")
    msg = str(e.value)
    assert f"{f}:{len(before) + 2}: {bad[1]}" in msg and "\n" not in msg, msg
