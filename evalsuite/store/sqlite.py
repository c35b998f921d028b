"""SQLite store: one file per run; every scored sample is committed as soon as its batch completes."""
from __future__ import annotations

import json
import operator
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable

from evalsuite.errors import EvalsuiteError, StoreMismatch
from evalsuite.store.bulk import gc_paused
from evalsuite.store.records import KLDResult, SampleResult, VariantInfo
from evalsuite.store.state import STATE_VERSION, RunState, check_fields

SCHEMA_VERSION = 2  # 2: per-sample metrics and the n outputs of pass@k tasks
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS variants (variant TEXT PRIMARY KEY, info TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS samples (
  variant TEXT, task TEXT, task_version TEXT, sample_id TEXT, prompt_hash TEXT, prompt TEXT, output TEXT,
  score REAL, extracted TEXT, reason TEXT, metadata TEXT, n_tokens INTEGER, ttft_s REAL, itl_s REAL,
  metrics TEXT, outputs TEXT, created REAL, token_ids TEXT DEFAULT '[]', stop TEXT DEFAULT '',
  decode TEXT DEFAULT '', PRIMARY KEY (variant, task, sample_id));
CREATE TABLE IF NOT EXISTS kld (
  variant TEXT, task TEXT, sample_id TEXT, token_kld TEXT, top1_agree INTEGER, n_tokens INTEGER,
  method TEXT DEFAULT '', PRIMARY KEY (variant, task, sample_id));
"""
_SAMPLE_COLS = ("variant", "task", "task_version", "sample_id", "prompt_hash", "prompt", "output", "score",
                "extracted", "reason", "metadata", "n_tokens", "ttft_s", "itl_s", "metrics", "outputs", "token_ids",
                "stop", "decode")
_JSON_COLS = ("metadata", "metrics", "outputs", "token_ids")
_GET_SAMPLE = operator.attrgetter(*_SAMPLE_COLS)  # a SampleResult's values in column order, in one call
_JSON_AT = tuple(i for i, c in enumerate(_SAMPLE_COLS) if c in _JSON_COLS)
#: columns added after schema 2 was first written (older stores get them, empty: their rows regenerate)
_ADDED = {"samples": (("token_ids", "TEXT DEFAULT '[]'"), ("stop", "TEXT DEFAULT ''"), ("decode", "TEXT DEFAULT ''")),
          "kld": (("method", "TEXT DEFAULT ''"),)}


class Store:
    """A run's results. Writes are transactional per batch: a crash (even kill -9) loses the batch in flight,
    which a resumed run generates again; nothing committed is lost or repeated."""

    FILENAME = "store.sqlite"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.conn = sqlite3.connect(self.path)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.executescript(_SCHEMA)
        for table, added in _ADDED.items():  # a store written before these columns existed
            cols = {r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")}
            with self.conn:
                for name, decl in added:
                    if name not in cols:
                        self.conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")

    @classmethod
    def create(cls, run_dir: Path, config: dict[str, Any]) -> "Store":
        run_dir.mkdir(parents=True, exist_ok=True)
        if (run_dir / cls.FILENAME).exists():
            raise EvalsuiteError(f"run folder {run_dir} already holds a run; use --resume {run_dir.name}")
        store = cls(run_dir / cls.FILENAME)
        store.update_state(schema_version=SCHEMA_VERSION, state_version=STATE_VERSION, config=config,
                           created=time.time())
        return store

    @classmethod
    def open(cls, run_dir: Path) -> "Store":
        path = Path(run_dir) / cls.FILENAME
        if not path.exists():
            raise EvalsuiteError(f"no run store at {path}")
        store = cls(path)
        version = store.state().schema_version
        if version != SCHEMA_VERSION:
            raise StoreMismatch(f"store {path} has schema {version}, this evalsuite reads {SCHEMA_VERSION}")
        return store

    def close(self) -> None:
        self.conn.close()

    # -- meta -------------------------------------------------------------------------------------------
    def set_meta(self, items: dict[str, Any]) -> None:
        with self.conn:
            self.conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                  [(k, json.dumps(v)) for k, v in items.items()])

    def meta(self) -> dict[str, Any]:
        """The raw meta table (key -> value); readers use ``state()``."""
        return {k: json.loads(v) for k, v in self.conn.execute("SELECT key, value FROM meta")}

    def state(self) -> RunState:
        """The run's state, typed (a store of an older state version migrated: evalsuite.store.state)."""
        return RunState.from_meta(self.meta())

    def update_state(self, **fields: Any) -> None:
        """Store the named RunState fields (and only those), in one transaction."""
        check_fields(set(fields))
        self.set_meta(fields)

    @property
    def config(self) -> dict[str, Any]:
        return self.state().config

    # -- variants ---------------------------------------------------------------------------------------
    def put_variant(self, info: VariantInfo) -> None:
        with self.conn:
            self.conn.execute("INSERT OR REPLACE INTO variants VALUES (?, ?)",
                              (info.variant, json.dumps(info.to_dict())))

    def variant_infos(self) -> dict[str, VariantInfo]:
        rows = self.conn.execute("SELECT variant, info FROM variants")
        return {v: _variant_info(json.loads(i)) for v, i in rows}

    # -- samples ----------------------------------------------------------------------------------------
    def put_samples(self, results: Iterable[SampleResult]) -> None:
        """Commit a batch atomically; a sample already stored is a programming error (never stored twice)."""
        rows = []
        for r in results:
            row = list(_GET_SAMPLE(r))
            for i in _JSON_AT:
                row[i] = _dumps(row[i])
            row.append(time.time())
            rows.append(row)
        with self.conn:
            self.conn.executemany(f"INSERT INTO samples ({','.join(_SAMPLE_COLS)}, created) VALUES "
                                  f"({','.join('?' * (len(_SAMPLE_COLS) + 1))})", rows)

    def done_ids(self, variant: str, task: str) -> set[str]:
        rows = self.conn.execute("SELECT sample_id FROM samples WHERE variant=? AND task=?", (variant, task))
        return {r[0] for r in rows}

    def samples(self, variant: str | None = None, task: str | None = None) -> list[SampleResult]:
        sql, args = f"SELECT {','.join(_SAMPLE_COLS)} FROM samples WHERE 1=1", []
        if variant is not None:
            sql, args = sql + " AND variant=?", args + [variant]
        if task is not None:
            sql, args = sql + " AND task=?", args + [task]
        out = []
        with gc_paused():
            for (variant_, task_, version, sid, prompt_hash, prompt, output, score, extracted, reason, metadata,
                 n_tokens, ttft_s, itl_s, metrics, outputs, token_ids, stop, decode) in self.conn.execute(
                    sql + " ORDER BY variant, task, sample_id", args):  # the columns in _SAMPLE_COLS order
                out.append(SampleResult(
                    variant_, task_, version, sid, prompt_hash, output, score, extracted=extracted, reason=reason,
                    metadata=_loads(metadata), prompt=prompt, n_tokens=n_tokens, ttft_s=ttft_s, itl_s=itl_s,
                    metrics=_loads(metrics), outputs=tuple(_loads(outputs)),
                    token_ids=tuple(_loads(token_ids) or ()), stop=stop, decode=decode))
        return out

    def row_marks(self, table: str) -> dict[tuple[str, str], tuple[int, int]]:
        """(variant, task) -> (rows, last row id) of ``table`` ("samples" or "kld"): rows are only ever added, so
        an unchanged mark means unchanged rows (what ``gate.store_gate.StoreGate`` recomputes by)."""
        if table not in ("samples", "kld"):
            raise ValueError(f"no table {table!r}")
        return {(v, t): (n, last) for v, t, n, last in
                self.conn.execute(f"SELECT variant, task, COUNT(*), MAX(rowid) FROM {table} GROUP BY variant, task")}

    def variants_present(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT DISTINCT variant FROM samples ORDER BY variant")]

    # -- kld --------------------------------------------------------------------------------------------
    def put_kld(self, results: Iterable[KLDResult]) -> None:
        rows = [(r.variant, r.task, r.sample_id, json.dumps([round(x, 6) for x in r.token_kld]), r.top1_agree,
                 r.n_tokens, r.method) for r in results]
        with self.conn:
            self.conn.executemany("INSERT INTO kld VALUES (?, ?, ?, ?, ?, ?, ?)", rows)

    def kld_done(self, variant: str, task: str) -> set[str]:
        rows = self.conn.execute("SELECT sample_id FROM kld WHERE variant=? AND task=?", (variant, task))
        return {r[0] for r in rows}

    def kld(self, variant: str | None = None, task: str | None = None) -> list[KLDResult]:
        sql, args = "SELECT variant, task, sample_id, token_kld, top1_agree, n_tokens, method FROM kld WHERE 1=1", []
        if variant is not None:
            sql, args = sql + " AND variant=?", args + [variant]
        if task is not None:
            sql, args = sql + " AND task=?", args + [task]
        return [KLDResult(v, t, s, tuple(json.loads(k)), a, n, m or "") for v, t, s, k, a, n, m in
                self.conn.execute(sql + " ORDER BY variant, task, sample_id", args)]

    def kld_methods(self) -> dict[str, dict[str, int]]:
        """Per variant: how many KLD rows each method measured ("" = the run's ``kld_method``)."""
        out: dict[str, dict[str, int]] = {}
        for v, m, n in self.conn.execute("SELECT variant, method, COUNT(*) FROM kld GROUP BY variant, method"):
            out.setdefault(v, {})[m or ""] = n
        return out


def _dumps(value: Any) -> str:
    """A JSON column's text; an empty dict / list / tuple (most rows' metrics, outputs, token ids) without the
    encoder (100,000-row stores: ``benchmarks/gating/compare_logs.py``)."""
    if not value and type(value) in (dict, list, tuple):
        return "{}" if type(value) is dict else "[]"
    return json.dumps(value)


def _loads(text: str) -> Any:
    """A JSON column's value; the empty ``{}`` / ``[]`` without the parser."""
    if text == "{}":
        return {}
    if text == "[]":
        return []
    return json.loads(text)


def _variant_info(d: dict[str, Any]) -> VariantInfo:
    return VariantInfo(**d)


def resolve_run_dir(run: str, runs_root: Path) -> Path:
    """A run argument is a run folder path or a run id under ``runs_root``."""
    path = Path(run)
    if (path / Store.FILENAME).exists():
        return path
    if (runs_root / run / Store.FILENAME).exists():
        return runs_root / run
    raise EvalsuiteError(f"run {run!r} not found (looked for {path}/{Store.FILENAME} and {runs_root / run})")


def require_finished(store: Store) -> None:
    """A run that did not finish cannot be gated or reported (its samples are incomplete)."""
    if store.state().finished is None:
        raise EvalsuiteError(f"run {store.path.parent.name} did not finish; continue it with "
                             f"`evalsuite run --resume {store.path.parent.name}`")


def score_table(store: Store) -> tuple[list[str], list[list[str]]]:
    """Mean score per variant × task (n in brackets), variants in run order."""
    sums: dict[tuple[str, str], list[float]] = {}
    for r in store.samples():
        sums.setdefault((r.variant, r.task), []).append(r.score)
    tasks = sorted({t for _, t in sums})
    variants = list(dict.fromkeys(v for v, _ in sums))
    order = store.state().variant_order
    variants.sort(key=lambda v: (order.index(v) if v in order else len(order), v))
    rows = []
    for v in variants:
        cells = [f"{sum(s) / len(s):.3f} (n={len(s)})" if (s := sums.get((v, t))) else "-" for t in tasks]
        rows.append([v] + cells)
    return ["variant"] + tasks, rows
