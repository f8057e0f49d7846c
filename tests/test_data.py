"""Datasets: MovieLens-100K from the recbole wheel, file loaders, splits, the cache, the `data` CLI."""
import csv
import io
import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from gnnrec_lab.commands import cli
from gnnrec_lab.data import Dataset, data_dir, describe, list_datasets, load, prepare, registry, storage
from gnnrec_lab.util.errors import DataError

REPO = Path(__file__).resolve().parents[1]
WHEEL = registry.RECBOLE_WHEEL


# ----------------------------------------------------------------------
# helpers
def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _pairs_as_ids(ds: Dataset, part: str = "all") -> set:
    """Interactions of ``ds`` as a set of (original user id, original item id)."""
    arrays = [ds.train, ds.valid, ds.test] if part == "all" else [getattr(ds, part)]
    rows = np.concatenate([np.asarray(a) for a in arrays])
    uid = ds.user_ids if ds.user_ids is not None else np.arange(ds.n_users)
    iid = ds.item_ids if ds.item_ids is not None else np.arange(ds.n_items)
    return {(uid[u].item(), iid[i].item()) for u, i in rows}


def _find_wheel():
    """The recbole wheel from an earlier download, to avoid fetching it once per test session."""
    env = os.environ.get("GNNREC_LAB_DATA")
    for d in ([Path(env)] if env else []) + [REPO / "data", Path.cwd() / "data"]:
        if (d / "downloads" / WHEEL).is_file():
            return d / "downloads" / WHEEL
    return None


@pytest.fixture(scope="session")
def ml_dir(tmp_path_factory):
    """A data directory holding the recbole wheel (copied from an earlier download, else fetched by pip)."""
    d = tmp_path_factory.mktemp("ml100k-data")
    found = _find_wheel()
    if found:
        (d / "downloads").mkdir()
        shutil.copy(found, d / "downloads" / WHEEL)
    return d


@pytest.fixture
def dd(tmp_path):
    return tmp_path / "data"


# ----------------------------------------------------------------------
# MovieLens-100K
def test_ml100k_from_recbole_wheel(ml_dir):
    ds = load("ml-100k", data_dir=ml_dir)
    assert (ds.n_users, ds.n_items, ds.n_interactions) == (943, 1682, 100_000)
    assert (ml_dir / "downloads" / WHEEL).is_file()
    assert ds.user_ids.dtype.kind == "i" and ds.user_ids[0] == 1 and ds.user_ids[-1] == 943
    for part in (ds.train, ds.valid, ds.test):
        assert part.dtype == np.int32 and part.shape[1] == 2
    # parts are disjoint and together hold every rating exactly once
    allrows = np.concatenate([ds.train, ds.valid, ds.test]).astype(np.int64)
    assert np.unique(allrows[:, 0] * ds.n_items + allrows[:, 1]).size == 100_000
    # the same ratings as the file in the wheel, read independently
    with zipfile.ZipFile(ml_dir / "downloads" / WHEEL) as z:
        text = z.read("recbole/dataset_example/ml-100k/ml-100k.inter").decode()
    lines = text.splitlines()[1:]
    sample = [tuple(int(x) for x in ln.split("\t")[:2]) for ln in lines[:: 997]]
    got = _pairs_as_ids(ds)
    assert all(s in got for s in sample)
    assert describe("ml-100k", ml_dir)["n_train_exact"] is True


def test_ml100k_min_rating_counts_match_the_file(ml_dir):
    name = prepare("ml-100k", min_rating=4, data_dir=ml_dir, progress=False)
    assert name == "ml-100k-min4"
    with zipfile.ZipFile(ml_dir / "downloads" / WHEEL) as z:
        rows = list(csv.reader(io.StringIO(z.read(registry.readers.RECBOLE_ML100K_MEMBER).decode()),
                               delimiter="\t"))[1:]
    want = {(int(r[0]), int(r[1])) for r in rows if float(r[2]) >= 4}
    ds = load(name, data_dir=ml_dir)
    assert ds.meta["min_rating"] == 4.0
    assert _pairs_as_ids(ds) == want
    assert ds.n_users == len({u for u, _ in want}) and ds.n_items == len({i for _, i in want})


UDATA = "1\t10\t5\t100\n1\t11\t3\t101\n2\t10\t4\t102\n2\t12\t1\t103\n3\t11\t2\t104\n3\t12\t5\t105\n1\t12\t4\t106\n"


def test_user_given_udata_and_grouplens_zip(tmp_path):
    u = _write(tmp_path / "src" / "u.data", UDATA)
    name = prepare(str(u), data_dir=tmp_path / "d1", progress=False)
    assert name == "ml-100k"
    ds = load(name, data_dir=tmp_path / "d1")
    assert ds.meta["format"] == "ml100k" and ds.meta["kind"] == "real"
    assert _pairs_as_ids(ds) == {(1, 10), (1, 11), (2, 10), (2, 12), (3, 11), (3, 12), (1, 12)}
    z = tmp_path / "src" / "ml-100k.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("ml-100k/README", "x")
        zf.writestr("ml-100k/u.data", UDATA)
    name = prepare(str(z), name="ml-tiny", data_dir=tmp_path / "d2", progress=False)
    assert name == "ml-tiny"
    ds = load(name, data_dir=tmp_path / "d2", split=(1.0, 0.0, 0.0))
    assert ds.test.shape == (0, 2) and ds.meta["source"] == str(z)
    assert _pairs_as_ids(ds) == {(1, 10), (1, 11), (2, 10), (2, 12), (3, 11), (3, 12), (1, 12)}


# ----------------------------------------------------------------------
# file formats
LGCN_TRAIN = "0 1 2 3 4 5 6 7 8 9\n1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18\n2\n3 1 1 2 5\n\n4 7 8 9\n"
LGCN_TEST = "0 11\n1 1\n3 3 4\n4 10\n"


def test_lightgcn_directory_keeps_given_test_and_carves_valid(dd, tmp_path):
    src = tmp_path / "gowalla-mini"
    _write(src / "train.txt", LGCN_TRAIN)
    _write(src / "test.txt", LGCN_TEST)
    name = prepare(str(src), data_dir=dd, progress=False)
    assert name == "gowalla-mini"
    ds = load(name, data_dir=dd)
    assert ds.meta["format"] == "lightgcn" and ds.meta["given_test"]
    assert ds.n_users == 5                       # user 2 has an empty line and still counts
    assert ds.n_items == 18                      # items 1..18 over train and test
    assert ds.meta["duplicates_merged"] == 1     # "3 1 1 2 5"
    given_train = {(0, i) for i in range(1, 10)} | {(1, i) for i in range(2, 19)} | \
                  {(3, 1), (3, 2), (3, 5), (4, 7), (4, 8), (4, 9)}
    assert _pairs_as_ids(ds, "test") == {(0, 11), (1, 1), (3, 3), (3, 4), (4, 10)}
    tv = _pairs_as_ids(ds, "train") | _pairs_as_ids(ds, "valid")
    assert tv == given_train and not (_pairs_as_ids(ds, "train") & _pairs_as_ids(ds, "valid"))
    valid_per_user = np.bincount(ds.valid[:, 0], minlength=ds.n_users)
    # 1/9 of each user's train items (round half up, at least one for users with >= 3)
    assert valid_per_user.tolist() == [1, 2, 0, 1, 1]
    other = load(name, data_dir=dd, seed=7)
    assert _pairs_as_ids(other, "test") == _pairs_as_ids(ds, "test")


ERIN = {("erin", "m1"), ("erin", "m2"), ("erin", "m3")}


def test_csv_with_header_string_ids_and_duplicates(dd, tmp_path):
    f = _write(tmp_path / "ratings.csv",
               "userId,movieId,rating,timestamp\n"
               "alice,m1,5,1\nalice,m2,3,2\nbob,m1,4,3\nalice,m1,2,4\n"   # alice-m1 twice
               "bob,m3,1,5\ncarol,m2,5,6\ncarol,m3,4,7\n\n"
               "dave,m1,4.5,8\nerin,m1,4,9\nerin,m2,4,9\nerin,m3,4,9\n")
    name = prepare(str(f), data_dir=dd, progress=False)
    assert name == "ratings"
    ds = load(name, data_dir=dd)
    assert ds.n_users == 5 and ds.n_items == 3
    assert list(ds.user_ids) == ["alice", "bob", "carol", "dave", "erin"]
    assert ds.meta["duplicates_merged"] == 1
    assert _pairs_as_ids(ds) == {("alice", "m1"), ("alice", "m2"), ("bob", "m1"), ("bob", "m3"),
                                 ("carol", "m2"), ("carol", "m3"), ("dave", "m1")} | ERIN
    name = prepare(str(f), min_rating=4, data_dir=dd, progress=False)
    assert name == "ratings-min4"
    ds = load(name, data_dir=dd)
    # duplicates merged before thresholding: alice-m1 (5 and 2) counts once
    assert _pairs_as_ids(ds) == {("alice", "m1"), ("bob", "m1"), ("carol", "m2"), ("carol", "m3"),
                                 ("dave", "m1")} | ERIN


def test_tsv_without_header_and_explicit_columns(dd, tmp_path):
    f = _write(tmp_path / "edges.tsv", "7\t100\t1\n7\t101\t0\n8\t100\t1\n7\t102\t1\n")
    ds = load(prepare(str(f), data_dir=dd, progress=False), data_dir=dd)
    assert ds.meta["columns"] == {"user": 0, "item": 1, "rating": 2}
    # ids are tokens unless integers are asked for
    assert _pairs_as_ids(ds) == {("7", "100"), ("7", "101"), ("8", "100"), ("7", "102")}
    ds = load(prepare(str(f), ids="int", name="edges-int", data_dir=dd, progress=False), data_dir=dd)
    assert _pairs_as_ids(ds) == {(7, 100), (7, 101), (8, 100), (7, 102)}
    # items first, ';' separated, columns given by position
    g = _write(tmp_path / "swapped.txt", "100;7;x\n101;7;y\n100;8;z\n102;7;z\n")
    name = prepare(str(g), columns={"user": "1", "item": 0}, sep=";", ids="int", data_dir=dd, progress=False)
    ds = load(name, data_dir=dd)
    assert _pairs_as_ids(ds) == {(7, 100), (7, 101), (8, 100), (7, 102)}
    # columns given by header name
    h = _write(tmp_path / "named.csv", "ts,who,what\n1,u1,i1\n2,u2,i1\n3,u1,i2\n4,u1,i3\n")
    name = prepare(str(h), columns={"user": "who", "item": "what"}, data_dir=dd, progress=False)
    assert _pairs_as_ids(load(name, data_dir=dd)) == {("u1", "i1"), ("u2", "i1"), ("u1", "i2"), ("u1", "i3")}


def test_parquet(dd, tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    f = tmp_path / "clicks.parquet"
    pd.DataFrame({"uid": [5, 5, 6, 6, 6, 6], "sku": ["a", "b", "a", "c", "c", "d"],
                  "stars": [1.0, 5, 5, 4, 2, 4]}).to_parquet(f)
    name = prepare(str(f), columns={"user": "uid", "item": "sku", "rating": "stars"}, min_rating=4,
                   data_dir=dd, progress=False)
    ds = load(name, data_dir=dd, split=(1, 0, 0))
    assert name == "clicks-min4" and ds.meta["format"] == "parquet"
    assert _pairs_as_ids(ds) == {(5, "b"), (6, "a"), (6, "c"), (6, "d")}
    with pytest.raises(DataError, match=r"column 'nope' not found"):
        prepare(str(f), columns={"user": "nope"}, data_dir=dd, progress=False)


# ----------------------------------------------------------------------
# mistakes: one line naming the file (and line)
@pytest.mark.parametrize("text, line, words", [
    ("user,item,rating\n1,2,5\n1,3,4\n2\n", 4, "expected at least 3 fields, got 1"),
    ("user\titem\n1\t2\n\t3\n", 3, "empty user id"),
    ("1,2,5\n1,3,4\n2,4,five\n", 3, "rating 'five' is not a number"),
    ("1,2,5\n1,3,4\n2,4,5,6,7\n1,4,1\n", 3, "expected 3 fields"),
])
def test_malformed_csv_line_named(dd, tmp_path, text, line, words):
    f = _write(tmp_path / "bad.csv", text)
    with pytest.raises(DataError) as e:
        prepare(str(f), data_dir=dd, progress=False)
    msg = str(e.value)
    assert f"{f}:{line}:" in msg and words in msg and "\n" not in msg


def test_malformed_lightgcn_line_named(dd, tmp_path):
    src = tmp_path / "lg"
    _write(src / "train.txt", "0 1 2\n1 2 x3\n")
    _write(src / "test.txt", "0 3\n")
    with pytest.raises(DataError, match=rf"{src / 'train.txt'}:2: expected integer ids, got 'x3'"):
        prepare(str(src), data_dir=dd, progress=False)


def test_wrong_format_empty_missing_unknown(dd, tmp_path):
    f = _write(tmp_path / "ok.csv", "1,2\n1,3\n1,4\n")
    with pytest.raises(DataError, match="format 'lightgcn' needs a directory with train.txt and test.txt"):
        prepare(str(f), format="lightgcn", data_dir=dd)
    with pytest.raises(DataError, match="not a Parquet file"):
        prepare(str(f), format="parquet", data_dir=dd)
    with pytest.raises(DataError, match="allowed: auto, ml100k, lightgcn, csv, parquet"):
        prepare(str(f), format="excel", data_dir=dd)
    with pytest.raises(DataError, match=r"empty\.csv: no interactions \(empty file\)"):
        prepare(str(_write(tmp_path / "empty.csv", "\n\n")), data_dir=dd)
    with pytest.raises(DataError, match="only a header"):
        prepare(str(_write(tmp_path / "head.csv", "user,item\n")), data_dir=dd)
    with pytest.raises(DataError, match="no such file or directory"):
        prepare(str(tmp_path / "missing.csv"), data_dir=dd)
    with pytest.raises(DataError, match=r"unknown dataset 'gowala'; built-in: ml-100k, gowalla, synth-tiny"):
        load("gowala", data_dir=dd)
    with pytest.raises(DataError, match="not a dataset name"):
        load("../data", data_dir=dd)
    with pytest.raises(DataError, match="unknown synthetic dataset 'synth-huge'"):
        describe("synth-huge", data_dir=dd)
    with pytest.raises(DataError, match="is a built-in dataset"):
        prepare(str(f), name="ml-100k", data_dir=dd)
    with pytest.raises(DataError, match="reserved for synthetic datasets"):
        prepare(str(f), name="synth-tiny", data_dir=dd)
    with pytest.raises(DataError, match="not a valid dataset name"):
        prepare(str(f), name="../x", data_dir=dd)
    with pytest.raises(DataError, match=r"name: 'downloads' is reserved \(the data directory keeps its downloads/"):
        prepare(str(f), name="downloads", data_dir=dd)
    with pytest.raises(DataError, match="min_rating needs a rating column"):
        prepare(str(_write(tmp_path / "two.csv", "1,2\n")), min_rating=3, data_dir=dd)
    with pytest.raises(DataError, match="synthetic datasets have no ratings"):
        prepare("synth-tiny", min_rating=3, data_dir=dd)


def test_too_few_interactions_to_split(dd, tmp_path):
    f = _write(tmp_path / "sparse.csv", "1,1\n1,2\n2,1\n3,3\n")
    with pytest.raises(DataError, match="users with too few interactions to split"):
        prepare(str(f), data_dir=dd, progress=False)
    assert not (dd / "sparse" / "splits" / "seed2020_0.8-0.1-0.1").exists()


def test_split_arguments_validated(dd):
    for bad in [(0.8, 0.1), (0.5, 0.1, 0.1), (0, 0.5, 0.5), (0.8, -0.1, 0.3), "abc"]:
        with pytest.raises(DataError, match="split"):
            load("synth-tiny", split=bad, data_dir=dd)
    with pytest.raises(DataError, match="seed"):
        load("synth-tiny", seed=-1, data_dir=dd)


# ----------------------------------------------------------------------
# splits
def test_split_deterministic_per_user_and_proportional(dd):
    a = load("synth-small", data_dir=dd)
    b = load("synth-small", data_dir=dd, seed=2020)
    c = load("synth-small", data_dir=dd, seed=1)
    assert np.array_equal(a.train, b.train) and np.array_equal(a.test, b.test)
    assert not np.array_equal(a.test, c.test)
    total = a.n_interactions
    assert total == c.n_interactions == 200_000
    for part, frac in ((a.train, 0.8), (a.valid, 0.1), (a.test, 0.1)):
        assert abs(part.shape[0] / total - frac) < 0.01
    # every user with >= 3 interactions is in every part; parts are disjoint
    deg = np.bincount(np.concatenate([a.train, a.valid, a.test])[:, 0], minlength=a.n_users)
    for part in (a.train, a.valid, a.test):
        assert (np.bincount(part[:, 0], minlength=a.n_users)[deg >= 3] >= 1).all()
    keys = [set((p[:, 0].astype(np.int64) * a.n_items + p[:, 1]).tolist()) for p in (a.train, a.valid, a.test)]
    assert not (keys[0] & keys[1]) and not (keys[0] & keys[2]) and not (keys[1] & keys[2])
    # a different split of the same data
    d = load("synth-small", data_dir=dd, split=(0.7, 0.0, 0.3))
    assert d.valid.shape == (0, 2) and abs(d.test.shape[0] / total - 0.3) < 0.01


def test_small_users_stay_in_train(dd, tmp_path):
    rows = [f"{u},{i}" for u in range(4) for i in range(10)] + ["9,1", "9,2"]
    ds = load(prepare(str(_write(tmp_path / "mix.csv", "\n".join(rows) + "\n")), data_dir=dd, progress=False),
              data_dir=dd)
    kept = ds.user_ids.tolist().index("9")
    assert (ds.train[:, 0] == kept).sum() == 2
    assert (ds.test[:, 0] != kept).all() and (ds.valid[:, 0] != kept).all()
    assert ds.meta["counts"]["users_kept_in_train"] == 1


# ----------------------------------------------------------------------
# cache
def test_cache_is_reused_and_damage_is_rebuilt(dd):
    first = load("synth-tiny", data_dir=dd)
    d = dd / "synth-tiny"
    sd = d / "splits" / "seed2020_0.8-0.1-0.1"
    mtime = (sd / "train.npy").stat().st_mtime_ns
    load("synth-tiny", data_dir=dd)
    assert (sd / "train.npy").stat().st_mtime_ns == mtime          # not rebuilt
    # a truncated split array (crash mid-copy) is detected and the split rebuilt identically
    with open(sd / "train.npy", "r+b") as f:
        f.truncate(200)
    again = load("synth-tiny", data_dir=dd)
    assert np.array_equal(again.train, first.train)
    # a damaged meta.json and a truncated interactions file rebuild the dataset
    (d / "meta.json").write_text("{not json")
    assert load("synth-tiny", data_dir=dd).n_interactions == 6000
    with open(d / "interactions.npy", "r+b") as f:
        f.truncate(1000)
    assert np.array_equal(load("synth-tiny", data_dir=dd).test, first.test)
    # leftovers of a crashed writer (dead process) are swept
    stale = dd / ".tmp-synth-tiny-999999999-deadbeef"
    stale.mkdir()
    load("synth-tiny", data_dir=dd)
    assert not stale.exists()


def test_user_dataset_rebuilt_from_its_recipe(dd, tmp_path):
    f = _write(tmp_path / "r.csv", "".join(f"{u},{i}\n" for u in range(5) for i in range(6)))
    name = prepare(str(f), data_dir=dd, progress=False)
    before = load(name, data_dir=dd)
    with open(dd / name / "interactions.npy", "r+b") as fh:
        fh.truncate(100)
    after = load(name, data_dir=dd)
    assert np.array_equal(before.train, after.train)
    (dd / name / "recipe.json").unlink()
    (dd / name / "meta.json").write_text("")
    with pytest.raises(DataError, match="damaged"):
        load(name, data_dir=dd)


def test_npy_writer_streams_a_valid_file(tmp_path):
    with storage.NpyWriter(tmp_path / "x.npy") as w:
        for k in range(3):
            w.append(np.arange(10, dtype=np.int32).reshape(5, 2) + k)
    a = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert a.shape == (15, 2) and a.dtype == np.int32 and a[14, 1] == 11
    assert a.offset % 64 == 0


def test_describe_and_list_are_cheap(dd, tmp_path):
    assert describe("ml-100k", dd)["n_users"] == 943
    assert describe("synth:users=1000,items=2000,interactions=50000", dd)["n_interactions"] == 50_000
    assert list(dd.iterdir()) == []                  # nothing was prepared or downloaded
    name = prepare(str(_write(tmp_path / "mine.csv", "".join(f"{u},{i}\n" for u in range(3) for i in range(5)))),
                   data_dir=dd, progress=False)
    d = describe(name, dd)
    assert (d["n_users"], d["n_items"], d["n_interactions"], d["kind"], d["prepared"]) == (3, 5, 15, "user", True)
    assert d["n_train"] == load(name, data_dir=dd).n_train and d["n_train_exact"]
    rows = {r["name"]: r for r in list_datasets(dd)}
    assert list(rows)[:len(registry.builtin_names())] == list(registry.builtin_names())
    assert rows["mine"]["prepared"] and not rows["synth-xl"]["prepared"]


def test_data_dir_is_one_place_whatever_the_current_directory(tmp_path, monkeypatch, capsys):
    """$GNNREC_LAB_DATA wins; else the checkout's data/ (this package runs from one), else, for an
    installed package, $GNNREC_LAB_HOME/data. Never a data/ in the shell's current directory, and
    `data list` says which directory it lists."""
    monkeypatch.setenv("GNNREC_LAB_DATA", str(tmp_path / "env"))
    assert data_dir() == tmp_path / "env" and (tmp_path / "env").is_dir()
    monkeypatch.delenv("GNNREC_LAB_DATA")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert registry.checkout_root() == REPO
    assert data_dir() == REPO / "data"
    assert cli.main(["data", "list"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == f"data directory: {REPO / 'data'} (the data/ of the checkout at {REPO})", first
    monkeypatch.setattr(registry, "checkout_root", lambda: None)   # as installed from a wheel
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path / "home"))
    assert data_dir() == tmp_path / "home" / "data"
    assert cli.main(["data", "list"]) == 0
    assert capsys.readouterr().out.startswith(f"data directory: {tmp_path / 'home' / 'data'} ($GNNREC_LAB_HOME/data)")
    assert not (elsewhere / "data").exists()


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="needs the git checkout")
def test_gitignore_ignores_data_dirs_at_any_depth_but_not_the_data_package():
    import subprocess

    def ignored(path):
        return subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", path]).returncode == 0
    assert ignored("data/ml-100k/meta.json") and ignored("notebooks/data/synth-tiny/meta.json")
    assert ignored("some/deeper/dir/data/x.npy")
    assert not ignored("gnnrec_lab/data/new_reader.py")   # the package's own data/ stays tracked


# ----------------------------------------------------------------------
# CLI
def test_cli_prepare_info_list(dd, tmp_path, capsys):
    f = _write(tmp_path / "clicks.csv", "".join(f"u{u},i{i}\n" for u in range(6) for i in range(u, u + 10)))
    assert cli.main(["data", "prepare", str(f), "--data-dir", str(dd), "--name", "clicks"]) == 0
    out = capsys.readouterr().out
    assert "prepared clicks: 6 users, 15 items, 60 interactions" in out
    assert cli.main(["data", "info", "clicks", "--data-dir", str(dd), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["users"], info["items"], info["train"] + info["valid"] + info["test"]) == (6, 15, 60)
    assert cli.main(["data", "list", "--data-dir", str(dd)]) == 0
    table = capsys.readouterr().out
    assert "clicks" in table and "synth-xl" in table and "100,000,000" in table


@pytest.mark.parametrize("argv, words", [
    (["data", "info", "nope"], "unknown dataset 'nope'"),
    (["data", "prepare", "synth:users=10,itms=3"], "unknown key 'itms'"),
    (["data", "prepare", "BAD"], ":2: expected at least 2 fields"),
])
def test_cli_user_errors_are_one_line_exit_2(dd, tmp_path, capsys, argv, words):
    bad = _write(tmp_path / "bad.csv", "1,2\n3\n")
    argv = [str(bad) if a == "BAD" else a for a in argv] + ["--data-dir", str(dd)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gnnrec-lab: error: ") and words in err and "\n" not in err


def test_failed_prepare_keeps_the_dataset_it_would_replace(dd, tmp_path):
    """`data prepare bad.csv --name foo` over a good foo: the bad file is refused (here: no user
    has enough interactions to split) and foo stays as it was, loadable, with nothing left over."""
    good = _write(tmp_path / "good.csv", "".join(f"u{u},i{i}\n" for u in range(6) for i in range(u, u + 10)))
    assert prepare(str(good), name="foo", data_dir=dd, progress=False) == "foo"
    before = load("foo", data_dir=dd)
    bad = _write(tmp_path / "bad.csv", "u1,i1\nu2,i2\n")
    with pytest.raises(DataError, match="too few interactions"):
        prepare(str(bad), name="foo", data_dir=dd, progress=False)
    after = load("foo", data_dir=dd)
    assert (after.n_users, after.n_items, after.train.shape) == (before.n_users, before.n_items, before.train.shape)
    assert [m["name"] for m in registry._prepared_metas(dd)].count("foo") == 1
    assert not [p.name for p in dd.iterdir() if p.name.startswith(".tmp-foo")]


LGCN_VALID = "0 12\n1 19\n4 13\n"


def test_lightgcn_directory_with_valid_txt_keeps_all_three_cuts(dd, tmp_path):
    """A valid.txt is the validation cut (not one carved out of train), whatever the split seed."""
    src = tmp_path / "with-valid"
    _write(src / "train.txt", LGCN_TRAIN)
    _write(src / "valid.txt", LGCN_VALID)
    _write(src / "test.txt", LGCN_TEST)
    name = prepare(str(src), format="lightgcn", data_dir=dd, progress=False)
    ds = load(name, data_dir=dd)
    assert ds.meta["given_valid"] and ds.meta["given_test"]
    assert ds.n_items == 19                      # items 1..19 over train, valid and test
    assert _pairs_as_ids(ds, "valid") == {(0, 12), (1, 19), (4, 13)}
    assert _pairs_as_ids(ds, "train") == {(0, i) for i in range(1, 10)} | {(1, i) for i in range(2, 19)} | \
        {(3, 1), (3, 2), (3, 5), (4, 7), (4, 8), (4, 9)}
    assert _pairs_as_ids(ds, "test") == {(0, 11), (1, 1), (3, 3), (3, 4), (4, 10)}
    assert "given train / valid / test kept" in ds.meta["split_protocol"]
    assert ds.meta["counts"]["valid"] == 3 and ds.meta["counts"]["interactions"] == 32 + 3 + 5
    other = load(name, data_dir=dd, seed=7)
    assert _pairs_as_ids(other, "valid") == _pairs_as_ids(ds, "valid")
    # an empty valid.txt is refused with its path, not silently replaced by a carved part
    _write(src / "valid.txt", "\n")
    with pytest.raises(DataError, match=r"valid\.txt: no interactions \(remove it"):
        prepare(str(src), format="lightgcn", data_dir=dd, progress=False)
    assert load(name, data_dir=dd).meta["given_valid"]   # the earlier preparation is kept
    # gzip-compressed files are a LightGCN directory too (as the shipped Gowalla is)
    import gzip
    packed = tmp_path / "packed"
    packed.mkdir()
    for stem, text in (("train.txt", LGCN_TRAIN), ("valid.txt", LGCN_VALID), ("test.txt", LGCN_TEST)):
        (packed / f"{stem}.gz").write_bytes(gzip.compress(text.encode()))
    again = load(prepare(str(packed), data_dir=dd, progress=False), data_dir=dd)
    assert again.meta["format"] == "lightgcn" and again.meta["given_valid"]
    assert _pairs_as_ids(again) == _pairs_as_ids(load(name, data_dir=dd))


def test_gowalla_is_built_in_and_prepares_offline_from_the_shipped_split(dd, monkeypatch):
    """`data prepare gowalla` reads the LightGCN authors' split shipped in the package (no network):
    their counts, their test file byte for byte, and the cut kept as given."""
    import gzip
    import hashlib
    monkeypatch.setattr(registry, "_ml100k_wheel", lambda *a: pytest.fail("gowalla must not download"))
    test_txt = gzip.decompress((registry.GOWALLA_DIR / "test.txt.gz").read_bytes())
    assert hashlib.md5(test_txt).hexdigest() == "c04e2c4bcd2389f53ed8281816166149"   # the authors' test.txt
    before = describe("gowalla", data_dir=dd)
    assert not before["prepared"] and before["n_train"] == registry.GOWALLA_TRAIN
    assert "gowalla" in [r["name"] for r in list_datasets(dd)]
    assert cli.main(["data", "prepare", "gowalla", "--data-dir", str(dd)]) == 0
    ds = load("gowalla", data_dir=dd)
    assert (ds.n_users, ds.n_items) == (29_858, 40_981)
    assert (len(ds.train), len(ds.valid), len(ds.test)) == (719_081, 91_047, 217_242)
    after = describe("gowalla", data_dir=dd)
    assert {k: after[k] for k in ("n_users", "n_items", "n_interactions", "n_train")} == \
        {k: before[k] for k in ("n_users", "n_items", "n_interactions", "n_train")}
    assert ds.meta["kind"] == "real" and ds.meta["source"] == registry.GOWALLA_SOURCE
    # the ids are the files' own: user 0's first test items are the first line of test.txt
    first = test_txt.split(b"\n", 1)[0].split()
    assert int(first[0]) == 0
    user0 = {ds.item_ids[i].item() for u, i in np.asarray(ds.test) if ds.user_ids[u] == 0}
    assert user0 == {int(x) for x in first[1:]}
    with pytest.raises(DataError, match="gowalla has no ratings"):
        prepare("gowalla", min_rating=4, data_dir=dd)


def test_the_paper_protocol_trains_on_train_and_valid_and_validates_nothing(dd, tmp_path):
    """protocol 'paper' (as the LightGCN authors): the given train + valid train, nothing is validated,
    the last model is tested; a dataset without its own valid.txt is refused, naming the protocol."""
    import gnnrec_lab
    from gnnrec_lab.config.run import RunConfig
    from gnnrec_lab.util.errors import ConfigError
    src = tmp_path / "with-valid"
    _write(src / "train.txt", LGCN_TRAIN)
    _write(src / "valid.txt", LGCN_VALID)
    _write(src / "test.txt", LGCN_TEST)
    name = prepare(str(src), format="lightgcn", data_dir=dd, progress=False)
    lab, paper = load(name, data_dir=dd), load(name, data_dir=dd, protocol="paper")
    assert _pairs_as_ids(paper, "train") == _pairs_as_ids(lab, "train") | _pairs_as_ids(lab, "valid")
    assert len(paper.valid) == 0 and _pairs_as_ids(paper, "test") == _pairs_as_ids(lab, "test")
    assert paper.meta["counts"]["train"] == 35 and paper.meta["split_protocol"].startswith("paper:")
    cfg = RunConfig(dataset=name, data_dir=str(dd), layers=1, dim=8, epochs=2, batch_size=16, protocol="paper")
    r = gnnrec_lab.run(cfg)
    assert r.history == [] and r.best_valid == {} and r.test["recall@20"] >= 0 and r.steps == 2 * 3
    assert gnnrec_lab.run(cfg.replace(protocol="lab")).history   # the lab's protocol validates each epoch
    # no valid.txt: nothing to add to train, and the lab's carved validation part is not the paper's
    carved = tmp_path / "no-valid"
    _write(carved / "train.txt", LGCN_TRAIN)
    _write(carved / "test.txt", LGCN_TEST)
    other = prepare(str(carved), format="lightgcn", name="novalid", data_dir=dd, progress=False)
    with pytest.raises(DataError, match="the paper protocol .* has no valid.txt"):
        load(other, data_dir=dd, protocol="paper")
    from gnnrec_lab.memory.preflight import check_launch  # refused before a run is recorded
    with pytest.raises(ConfigError, match="protocol: the paper protocol .*'novalid' has no valid.txt"):
        check_launch(RunConfig(dataset=other, data_dir=str(dd), protocol="paper", batch_size=8))
    check_launch(cfg)
    with pytest.raises(ConfigError, match="protocol: the paper protocol .* no target"):
        RunConfig(protocol="paper", target_recall=0.1)
