"""Question items and their HITs: pure functions of the shown rows (no connection, store or platform).

An item is one question: one row (tuple operators) or a chunk of one group's rows (group operators). An items frame
holds item_id, ROW_ID, row_no, row_hash, item_key, occurrence; ``hit_layout`` packs the items that still need answers
into HITs of at most tuples_per_hit rows, and ``hit_batch`` puts them in the platform's columnar form.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
import pandas as pd

from ..crowd import HitBatch
from ..udf import HumanOperator
from .columns import ROW_ID


def signature(op: HumanOperator, question: str, domain: tuple[str, ...] | None, columns: list[str]) -> str:
    """Hash of what makes two items the same question: operator, question, answers, published columns."""
    sig = json.dumps([op.name, op.kind, question, domain, list(columns)])
    return hashlib.sha1(sig.encode()).hexdigest()[:16]


def row_hashes(shown: pd.DataFrame) -> np.ndarray:
    """A content hash of each shown row (its published text)."""
    return pd.util.hash_pandas_object(shown, index=False).to_numpy()


def keyed_order(row_hash: np.ndarray, key: str) -> np.ndarray:
    """The order of a keyed hash of each row's content (ties, i.e. identical rows, in input order)."""
    n = len(row_hash)
    salt = np.uint64(int(key[:16], 16) & 0xFFFFFFFFFFFFFFFF)
    with np.errstate(over="ignore"):  # splitmix64 of content hash ^ salt
        z = (np.asarray(row_hash, dtype=np.uint64) ^ salt) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return np.lexsort((np.arange(n), z))


@dataclasses.dataclass(frozen=True)
class Shuffle:
    """The order rows are packed into HITs in: a shuffle that does not reveal the input order. Without a seed, and
    always where the order decides what an item holds (``split``: a group cut into items, a knock-out round),
    the order of a keyed hash of each row's content and the seed (ties, i.e. identical rows, in input order), so
    the same data is split into the same items on every run and a rerun is served from the cache. Otherwise a
    permutation drawn from ``rng`` (tuple items hold one row each: their packing never changes what is bought)."""

    signature: str                       # the operator's signature (its published columns)
    seed: int | None                     # the call's seed, else the connection's
    rng: np.random.Generator             # the run's generator (drawn from only with a seed)

    def __call__(self, row_hash: np.ndarray, split: bool = False) -> np.ndarray:
        if self.seed is not None and not split:
            return self.rng.permutation(len(row_hash))
        key = (self.signature if self.seed is None
               else hashlib.sha1(f"{self.signature}:{self.seed}".encode()).hexdigest())
        return keyed_order(row_hash, key)


def tuple_items(shown: pd.DataFrame, shuffle: Shuffle, item_signature: str) -> pd.DataFrame:
    """Items of a tuple operator, one per shown row, in shuffled order (``item_signature``: of shown's columns)."""
    n = len(shown)
    row_hash = row_hashes(shown)
    order = shuffle(row_hash)  # rows are shuffled before they are grouped into HITs
    row_hash = row_hash[order]
    items = pd.DataFrame({"item_id": np.arange(n), ROW_ID: order, "row_no": 1, "row_hash": row_hash})
    items["item_key"] = np.char.add(item_signature + ":", row_hash.astype(str)).astype(object)
    return with_occurrence(items)


def group_round_items(shown: pd.DataFrame, groups: np.ndarray, rows: np.ndarray, first_id: int, shuffle: Shuffle,
                      tuples_per_hit: int) -> pd.DataFrame:
    """Items of one knock-out round over the given rows of each group (shuffled, then chunked)."""
    row_hash = row_hashes(shown.iloc[rows])
    order = shuffle(row_hash, split=True)
    row_hash = row_hash[order]
    items = group_items(groups[order], rows[order], row_hash, tuples_per_hit)
    items["item_id"] += first_id
    sig = shuffle.signature
    items["item_key"] = items.groupby("item_id")["row_hash"].transform(
        lambda h: sig + ":" + hashlib.sha1(h.to_numpy().tobytes()).hexdigest()[:20])
    return with_occurrence(items)


def with_occurrence(items: pd.DataFrame) -> pd.DataFrame:
    """Number identical items 0, 1, ... in input order (not shuffled order): the n-th copy of the same content
    reuses the n-th purchase, so a rerun maps the same rows to the same answers."""
    first = items.groupby("item_id", sort=False).agg(item_key=("item_key", "first"), row=(ROW_ID, "min"))
    first = first.sort_values("row", kind="stable")
    occurrence = pd.Series(first.groupby("item_key").cumcount().to_numpy(), index=first.index.to_numpy())
    items["occurrence"] = items["item_id"].map(occurrence).astype(np.int64)
    return items


def group_items(group: np.ndarray, rows: np.ndarray, row_hash: np.ndarray, n_per_hit: int) -> pd.DataFrame:
    """Round-1 items of a group operator: each group cut into balanced chunks of at most N rows,
    rows inside an item ordered by content (so the cache key and the answer's row_no are stable)."""
    df = pd.DataFrame({"group": group, ROW_ID: rows, "row_hash": row_hash})
    size = df.groupby("group")["group"].transform("size").to_numpy()
    chunks = np.ceil(size / n_per_hit).astype(np.int64)
    pos = df.groupby("group").cumcount().to_numpy()
    df["chunk"] = pos % chunks  # round-robin over the shuffled rows: balanced chunk sizes
    df = df.sort_values(["group", "chunk", "row_hash"], kind="stable")
    df["item_id"] = pd.factorize(pd.MultiIndex.from_arrays([df["group"], df["chunk"]]))[0]
    df["row_no"] = df.groupby("item_id").cumcount() + 1
    return df.reset_index(drop=True)


def hit_layout(items: pd.DataFrame, have: pd.Series, assignments: int, cap: int, run_id: int, first_hit: int,
               round_no: int, group: pd.Series | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pack items that still need answers into HITs of at most N tuples; one HIT layout per missing count.

    ``have``: answers held per (item_key, occurrence); ``first_hit``: HITs this run numbered already; ``group``:
    item_id -> a group number (the worker a HIT is built for, quality-aware assignment): a HIT never mixes groups,
    groups in ascending order, items without one (or -1) last. Returns ``hits`` (hit_id, run_id, assignments,
    round) and ``layout`` (item_id, hit_id, item_no)."""
    per_item = items.groupby("item_id", sort=False).agg(rows=("row_no", "size"), item_key=("item_key", "first"),
                                                       occurrence=("occurrence", "first"))
    index = pd.MultiIndex.from_arrays([per_item["item_key"], per_item["occurrence"]])
    got = have.reindex(index).fillna(0).to_numpy(np.int64)
    per_item["need"] = assignments - got
    per_item = per_item[per_item["need"] > 0]
    if group is not None:  # each group's items together, in the groups' order (stable: the items' order within)
        code = group.reindex(per_item.index).fillna(-1).to_numpy(np.int64)
        code = np.where(code < 0, np.iinfo(np.int64).max, code)
        per_item = per_item.assign(group=code).iloc[np.argsort(code, kind="stable")]
    hits, layout = [], []
    n = first_hit  # HIT numbers continue across FKA's sample HITs and knock-out rounds
    for need, part in per_item.groupby("need", sort=True):
        hit_no = (pack(part["rows"].to_numpy(), cap) if group is None
                  else pack_groups(part["rows"].to_numpy(), part["group"].to_numpy(), cap)) + n
        ids = np.char.add(f"R{run_id}-", np.char.zfill((hit_no + 1).astype(str), 5)).astype(object)
        item_no = pd.Series(hit_no).groupby(hit_no).cumcount().to_numpy() + 1
        layout.append(pd.DataFrame({"item_id": part.index.to_numpy(), "hit_id": ids, "item_no": item_no}))
        unique_ids = pd.unique(ids)
        hits.append(pd.DataFrame({"hit_id": unique_ids, "run_id": run_id, "assignments": int(need), "round": round_no}))
        n += len(unique_ids)
    if not hits:
        return (pd.DataFrame({"hit_id": [], "run_id": [], "assignments": [], "round": []}),
                pd.DataFrame({"item_id": [], "hit_id": [], "item_no": []}))
    return pd.concat(hits, ignore_index=True), pd.concat(layout, ignore_index=True)


def pack(rows: np.ndarray, cap: int) -> np.ndarray:
    """HIT number of each item, filling HITs in order up to ``cap`` (tuples_per_hit) rows."""
    if (rows == 1).all():
        return np.arange(len(rows)) // cap
    out = np.empty(len(rows), dtype=np.int64)
    hit, fill = 0, 0
    for i, r in enumerate(rows.tolist()):  # group items: one step per item (a group chunk), never per row
        if fill + r > cap and fill > 0:
            hit, fill = hit + 1, 0
        out[i] = hit
        fill += r
    return out


def pack_groups(rows: np.ndarray, groups: np.ndarray, cap: int) -> np.ndarray:
    """HIT number of each item as :func:`pack`, a new HIT at every change of group (``groups`` sorted)."""
    out = np.empty(len(rows), dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    n = 0
    for lo, hi in zip(starts, np.r_[starts[1:], len(rows)]):  # one step per group (the workers of a round)
        out[lo:hi] = pack(rows[lo:hi], cap) + n
        n = int(out[hi - 1]) + 1
    return out


def later_round_hits(groups: np.ndarray, items: pd.DataFrame, cap: int) -> int:
    """Estimated HITs of the knock-out rounds after the first: each round's winners, N rows per HIT
    (``groups``: the group of each input row)."""
    groups = groups[items.drop_duplicates("item_id")[ROW_ID].to_numpy()]
    winners = pd.Series(groups).value_counts().to_numpy()  # items per group = winners entering round 2
    total = 0
    while (winners > 1).any():
        winners = winners[winners > 1]
        total += int(np.ceil(winners.sum() / cap))
        winners = np.ceil(winners / cap).astype(np.int64)
    return total


def gold_copies(layout: pd.DataFrame, known: pd.Series, share: float) -> pd.DataFrame:
    """Gold questions (ours): for each HIT of ``layout`` (item_id, hit_id, item_no), ceil(share × its items) copies
    of items whose answer is known (``known``: item_id -> answer), taken from the batch's other HITs where it has
    any, chosen by a hash of (HIT, item) so the same layout gets the same gold. Only items the batch publishes
    anyway are copied: a gold question shows nothing new. Returns hit_id, item_no (after the HIT's own), item_id,
    answer."""
    out = []
    candidates = known.index.to_numpy(np.int64)
    if not len(candidates) or share <= 0:
        return pd.DataFrame({"hit_id": [], "item_no": [], "item_id": [], "answer": []})
    mix = np.uint64(0x9E3779B97F4A7C15)
    for hit_no, (hit_id, own) in enumerate(layout.groupby("hit_id", sort=True)):
        n_gold = int(np.ceil(share * len(own)))
        pool = candidates[~np.isin(candidates, own["item_id"].to_numpy())]
        pool = pool if len(pool) else candidates  # a batch of one HIT: its own items, shown twice
        salt = np.uint64((hit_no + 1) * 0xBF58476D1CE4E5B9 % 2**64)  # (integer hashing: wraps modulo 2**64)
        score = ((pool.astype(np.uint64) + np.uint64(1)) * mix) ^ salt
        chosen = pool[np.argsort(score, kind="stable")[:n_gold]]
        out.append(pd.DataFrame({"hit_id": hit_id, "item_no": int(own["item_no"].max()) + 1 + np.arange(len(chosen)),
                                 "item_id": chosen, "answer": known.loc[chosen].to_numpy()}))
    return pd.concat(out, ignore_index=True)


def with_gold(batch: HitBatch, keys: pd.DataFrame, gold: pd.DataFrame) -> tuple[HitBatch, pd.DataFrame]:
    """The batch with its gold questions (``gold_copies``) appended to their HITs, each showing exactly the rows of
    the item it copies, and the items' keys (hit_id, item_no, item_key, occurrence, gold: the known answer)."""
    keys = keys.assign(gold=None)
    if not len(gold):
        return batch, keys
    origin = keys.drop_duplicates("item_id")[["item_id", "hit_id", "item_no", "item_key", "occurrence"]].rename(
        columns={"hit_id": "from_hit", "item_no": "from_no"})
    gold = gold.merge(origin, on="item_id")
    shown = batch.items.rename(columns={"hit_id": "from_hit", "item_no": "from_no"})
    copies = gold[["hit_id", "item_no", "from_hit", "from_no"]].merge(shown, on=["from_hit", "from_no"])
    items = pd.concat([batch.items, copies[batch.items.columns]], ignore_index=True).sort_values(
        ["hit_id", "item_no", "row_no"], kind="stable", ignore_index=True)
    answers = gold[["hit_id", "item_no", "answer"]].astype({"answer": str})
    keys = pd.concat([keys, gold[["item_id", "hit_id", "item_no", "item_key", "occurrence"]].assign(
        gold=answers["answer"].to_numpy())], ignore_index=True)
    return dataclasses.replace(batch, items=items, gold=answers.reset_index(drop=True)), keys


def hit_batch(items: pd.DataFrame, hits: pd.DataFrame, layout: pd.DataFrame, shown: pd.DataFrame, question: str,
              domain: tuple[str, ...] | None, reward: float, fee: float, target) -> HitBatch:
    """The HITs in the platform's columnar form: only published text (``shown``) leaves here."""
    rows = items.merge(layout, on="item_id").sort_values(["hit_id", "item_no", "row_no"], kind="stable")
    table = pd.concat([rows[["hit_id", "item_no", "row_no"]].reset_index(drop=True),
                       shown.iloc[rows[ROW_ID].to_numpy()].reset_index(drop=True)], axis=1)
    hit_rows = hits.assign(question=question, domain=[domain] * len(hits), reward=reward, fee_rate=fee,
                           target=target)
    return HitBatch(hit_rows.reset_index(drop=True), table, list(shown.columns))
