"""Rows an earlier statement chose by a protected column stay chosen in the table it stored them in
(``crowddb_chosen``): a human operator over that table, or over a view or copy of it, is refused as it would be over
the clause itself; a table made anew starts unmarked; a join on the key marks nothing."""

from __future__ import annotations

import numpy as np
import pytest
from privacy_scanner import published_items
from test_privacy_gate import canary, canary_frame  # noqa: F401 - the fixture

from crowddb.errors import PrivacyError

ASK = "SELECT id, getposition(*, k := 5, assignments := 1, domain := ['a', 'b']) AS answer FROM {}"


def test_a_table_filled_by_a_protected_filter_is_refused_with_the_clause(canary):  # noqa: F811
    canary.sql("CREATE TABLE few AS SELECT * FROM people WHERE secret < 'CANARY-0031'")
    assert canary.sql("SELECT table_name, reason FROM crowddb_chosen").fetchall() == [
        ("few", "WHERE secret < 'CANARY-0031', which reads the sensitive column people.secret")]
    with pytest.raises(PrivacyError, match=r"chosen by the table few it reads \(an earlier statement chose its rows "
                                           r"by WHERE secret < 'CANARY-0031', which reads the sensitive column "
                                           r"people\.secret\)"):
        canary.sql(ASK.format("few"))
    canary.sql("CREATE VIEW few_view AS SELECT * FROM few WHERE age > 20")
    with pytest.raises(PrivacyError, match="chosen by the table few it reads in the view few_view"):
        canary.sql(ASK.format("few_view"))
    assert canary.sql("SELECT count(*) FROM crowddb_hits").fetchall() == [(0,)]


def test_a_table_made_anew_is_not_chosen(canary):  # noqa: F811
    canary.sql("CREATE TABLE few AS SELECT * FROM people WHERE secret < 'CANARY-0031'")
    canary.sql("DROP TABLE few")
    canary.sql("CREATE TABLE few AS SELECT * FROM people")
    assert canary.sql("SELECT count(*) FROM crowddb_chosen").fetchall() == [(0,)]
    canary.sql(ASK.format("few")).fetchall()
    assert len(published_items(canary)) == len(canary_frame())


def test_a_join_on_the_key_and_a_core_filter_choose_nothing(canary):  # noqa: F811
    canary.sql("CREATE TABLE joined AS SELECT p.* FROM people p JOIN people q ON p.id = q.id WHERE p.city = 'north'")
    canary.sql("DELETE FROM joined WHERE hobby = 'golf'")
    canary.sql("UPDATE joined SET note = 'x' WHERE age > 40")
    assert canary.sql("SELECT count(*) FROM crowddb_chosen").fetchall() == [(0,)]
    canary.sql(ASK.format("joined")).fetchall()
    frame = canary_frame()
    expected = int(np.sum((frame["city"] == "north") & (frame["hobby"] != "golf")))
    assert len(published_items(canary)) == expected


def test_a_delete_by_a_protected_column_marks_the_table_it_cut(canary):  # noqa: F811
    canary.sql("DELETE FROM people WHERE secret > 'CANARY-0050'")
    with pytest.raises(PrivacyError, match=r"chosen by the table people it reads \(an earlier statement chose its "
                                           r"rows by WHERE secret > 'CANARY-0050'"):
        canary.sql(ASK.format("people"))


def test_a_temp_table_keeps_its_mark_under_its_own_key(canary):  # noqa: F811
    canary.sql("CREATE TEMP TABLE people AS SELECT * FROM main.people WHERE secret < 'CANARY-0031'")
    with pytest.raises(PrivacyError, match="chosen by the table people it reads"):
        canary.sql(ASK.format("people"))
    canary.sql("CREATE TEMP TABLE few AS SELECT * FROM main.people WHERE secret < 'CANARY-0031'")
    with pytest.raises(PrivacyError, match="chosen by the table few it reads"):
        canary.sql(ASK.format("few"))


def test_a_table_made_again_from_itself_or_renamed_stays_chosen(canary):  # noqa: F811
    canary.sql("CREATE TABLE few AS SELECT * FROM people WHERE secret < 'CANARY-0031'")
    canary.sql("CREATE OR REPLACE TABLE few AS SELECT * FROM few")
    canary.sql("ALTER TABLE few RENAME TO renamed")
    canary.sql("CREATE TABLE few AS SELECT * FROM renamed")
    for table in ("few", "renamed"):
        with pytest.raises(PrivacyError, match=f"chosen by the table {table} it reads"):
            canary.sql(ASK.format(table))
