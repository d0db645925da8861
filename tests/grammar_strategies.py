"""Hypothesis strategies for tests/privacy/test_privacy_grammar.py: SQL drawn from DuckDB's grammar over the canary table.

Every strategy here yields SQL *text*; nothing imports crowddb. The text may contain two placeholders the test fills in
per example: ``{db}`` (the connection's catalog, ``SELECT current_database()``) and ``{tmp}`` (a fresh directory).

The canary table (``CANARY_COLUMNS``, in this order)::

    id      key                      1..60
    age     quasi-identifier         20..69
    sex     quasi-identifier         'Female' / 'Male'
    edu     quasi-identifier         5..16
    city    core                     'Oslo', 'Lima', ...
    hobby   core                     'chess', 'golf', ...
    note    core                     'quiet', 'loud', ...
    secret  sensitive                'MARKER-S-<id>'
    secret2 sensitive                'MARKER-T-<id>'
    job     ground truth             'teacher' / 'driver' / 'clerk'

A *laundering* statement moves a protected value (``PROTECTED``) into a column whose name is core (``CORE_TEXT``):
through a function, a macro, a variable, a positional reference, a renaming alias list, a struct, a star modifier, a
write, a file, a name that resolves elsewhere... The test then asks the crowd about (or ANONYMIZEs) the result.

A ``Scenario`` is one example: setup statements, then one final statement (a crowd query or an ANONYMIZE call).
"""

from __future__ import annotations

import dataclasses
import re

import duckdb
from hypothesis import strategies as st

CANARY_COLUMNS = ("id", "age", "sex", "edu", "city", "hobby", "note", "secret", "secret2", "job")
QUASI_IDENTIFIERS = ("age", "sex", "edu")
CORE_TEXT = ("city", "hobby", "note")
CORE = QUASI_IDENTIFIERS + CORE_TEXT
PROTECTED = ("secret", "secret2", "job")
JOBS = ("teacher", "driver", "clerk")
K = 5
OPERATOR_ARGS = f"k := {K}, assignments := 1, domain := ['yes','no']"

#: every way the test spells the canary table (``{db}`` is the catalog)
CANARY_SPELLINGS = ("canary", "main.canary", "{db}.main.canary", "{db}.canary", '"CANARY"', '"canary"',
                    'main."Canary"')


@dataclasses.dataclass(frozen=True)
class Snippet:
    """An SQL fragment and the statements that must run before it (a macro it calls, a variable it reads)."""

    sql: str
    setup: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One generated example: ``setup`` statements, then ``final`` ('crowd': a getposition query; 'anonymize')."""

    setup: tuple[str, ...]
    final: str
    kind: str

    @property
    def statements(self) -> tuple[str, ...]:
        return self.setup + (self.final,)

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example: runnable SQL, one statement a line
        lines = [f"Scenario(kind={self.kind!r}, statements=["]
        lines += [f"    {s!r}," for s in self.statements]
        return "\n".join(lines + ["])"])


# ------------------------------------------------------------------------------------------- DuckDB's functions

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
#: functions with side effects outside the statement, or whose names are not functions of a value
_SKIP_FUNCTIONS = {"write_log", "nextval", "currval", "setseed"}


def _catalog_functions() -> tuple[tuple[str, int], ...]:
    """Scalar functions of a fresh DuckDB taking one or two VARCHAR/ANY arguments: (name, arity), sorted."""
    con = duckdb.connect()
    try:
        rows = con.execute("""
            SELECT DISTINCT function_name, len(parameter_types) AS arity
            FROM duckdb_functions()
            WHERE function_type = 'scalar' AND len(parameter_types) BETWEEN 1 AND 2
              AND list_bool_and(list_transform(parameter_types, lambda t: t IN ('VARCHAR', 'ANY')))
            ORDER BY 1, 2""").fetchall()
    finally:
        con.close()
    return tuple((name, int(arity)) for name, arity in rows
                 if _NAME.match(name) and name not in _SKIP_FUNCTIONS
                 and not name.startswith(("collate_", "icu_collate_", "internal_")))


CATALOG_FUNCTIONS = _catalog_functions()


# ------------------------------------------------------------------------------------- protected expressions

protected_column = st.sampled_from(PROTECTED)
core_text_column = st.sampled_from(CORE_TEXT)
canary_name = st.sampled_from(CANARY_SPELLINGS)


@st.composite
def catalog_function_call(draw, argument: str) -> str:
    """A DuckDB catalog function (1-2 text parameters) applied to ``argument``."""
    name, arity = draw(st.sampled_from(CATALOG_FUNCTIONS))
    if arity == 1:
        return f"{name}({argument})"
    other = draw(st.sampled_from(("'-'", "' '", "'%s'", "city", "note", "secret2")))
    return draw(st.sampled_from((f"{name}({argument}, {other})", f"{name}({other}, {argument})")))


#: expressions that keep the protected value readable (the marker survives): ``{}`` is the protected expression
TEXT_PRESERVING = (
    "{}", "upper({})", "lower({})", "concat(city, ' ', {})", "{} || ''", "coalesce({}, city)",
    "CASE WHEN age > 0 THEN {} ELSE city END", "[{}][1]", "list_value({}, city)[1]", "struct_pack(v := {}).v",
    "{{'v': {}}}.v", "(SELECT {})", "trim({})", "CAST({} AS VARCHAR)", "printf('%s', {})", "format('{{}}', {})",
    "replace({}, 'zz', 'y')", "list_transform([{}], lambda x: upper(x))[1]", "[x FOR x IN [{}]][1]",
    "map([1], [{}])[1]", "list_reduce([{}, city], lambda a, b: a || b)", "({})[1:]",
    "string_agg({}, ',') OVER ()", "first({}) OVER (PARTITION BY city)", "max({}) OVER (ORDER BY age)",
    "lag({}) OVER (ORDER BY age)", "(list({}) OVER ())[1]", "any_value({}) OVER (PARTITION BY sex)",
)


@st.composite
def protected_expression(draw, outer: str = "o", simple: bool = False) -> Snippet:
    """An expression over the canary's columns (the current row aliased ``outer``) whose value carries a protected
    column: directly, through DuckDB functions, a subquery, a macro, a variable or the row itself.
    ``simple``: only expressions of the row's own columns (for ALTER ... USING, generated columns)."""
    p = draw(protected_column)
    forms = ["column", "catalog", "wrapped", "wrapped_catalog"]
    if not simple:
        forms += ["correlated", "aggregate_subquery", "query_table", "macro_wrap", "macro_peek", "macro_noarg",
                  "variable_list", "variable_map", "variable_text", "row_struct"]
    form = draw(st.sampled_from(forms))
    wrap = draw(st.sampled_from(TEXT_PRESERVING)) if form != "column" else "{}"
    if simple:
        wrap = draw(st.sampled_from([w for w in TEXT_PRESERVING if "OVER" not in w and "SELECT" not in w]))
    if form == "column":
        return Snippet(p)
    if form == "catalog":
        return Snippet(draw(catalog_function_call(p)))
    if form == "wrapped":
        return Snippet(wrap.format(p))
    if form == "wrapped_catalog":
        return Snippet(wrap.format(draw(catalog_function_call(p))))
    if form == "correlated":
        return Snippet(wrap.format(f"(SELECT c2.{p} FROM canary AS c2 WHERE c2.id = {outer}.id)"))
    if form == "aggregate_subquery":
        agg = draw(st.sampled_from((f"max({p})", f"string_agg({p}, ',')", f"list({p})::VARCHAR")))
        return Snippet(wrap.format(f"(SELECT {agg} FROM {draw(canary_name)})"))
    if form == "query_table":
        reader = draw(st.sampled_from(("query('SELECT * FROM canary')", "query_table('canary')")))
        return Snippet(wrap.format(f"(SELECT max(q.{p}) FROM {reader} AS q WHERE q.id = {outer}.id)"))
    if form == "macro_wrap":
        body = draw(st.sampled_from(("x", "upper(x)", "concat(x, '')", "[x][1]")))
        return Snippet(wrap.format(f"launder({p})"), (f"CREATE OR REPLACE MACRO launder(x) AS {body}",))
    if form == "macro_peek":  # the macro reads the protected column; its argument is the key or a core column
        arg, cond = draw(st.sampled_from((("id", "c.id = x"), ("city", "c.city = x"), ("age", "c.age = x"))))
        return Snippet(wrap.format(f"peek({arg})"),
                       (f"CREATE OR REPLACE MACRO peek(x) AS (SELECT max(c.{p}) FROM canary AS c WHERE {cond})",))
    if form == "macro_noarg":
        return Snippet(wrap.format("everything()"),
                       (f"CREATE OR REPLACE MACRO everything() AS (SELECT string_agg({p}, ',') FROM canary)",))
    if form == "variable_list":
        return Snippet(wrap.format("getvariable('v')[id]"),
                       (f"SET VARIABLE v = (SELECT list({p} ORDER BY id) FROM canary)",))
    if form == "variable_map":
        return Snippet(wrap.format("getvariable('v')[id]"),
                       (f"SET VARIABLE v = (SELECT map(list(id), list({p})) FROM canary)",))
    if form == "variable_text":
        return Snippet(wrap.format("getvariable('v')"),
                       (f"SET VARIABLE v = (SELECT string_agg({p}, ',') FROM canary)",))
    # row_struct: the table alias is the whole row, as a struct
    return Snippet(draw(st.sampled_from((f"CAST({outer} AS VARCHAR)", f"{outer}.{p}", f"to_json({outer})"))))


# ------------------------------------------------------------------------------------------------ projections

def _select_list(columns, replace: dict[str, str]) -> str:
    return ", ".join(f"{replace[c]} AS {c}" if c in replace else c for c in columns)


@st.composite
def laundering_select(draw, source: str, *, full: bool = False, key_offset: int = 0) -> Snippet:
    """A SELECT over ``source`` (aliased ``o``) whose output has a core-named column carrying a protected value.
    ``full``: the output is the canary's ten columns in their order (for positional INSERT / COPY FROM);
    ``key_offset``: ids are shifted (rows inserted beside the originals)."""
    target = draw(core_text_column)
    px = draw(protected_expression(outer="o"))
    columns = CANARY_COLUMNS if full or draw(st.booleans()) else ("id",) + CORE
    replace = {target: px.sql}
    if key_offset:
        replace["id"] = f"id + {key_offset}"
    forms = ["explicit", "star_replace", "cte", "union_by_name", "lateral_alias"]
    if not full and not key_offset:
        forms += ["star_exclude_rename", "positional", "alias_columns", "struct_star", "struct_unnest",
                  "columns_regex", "columns_lambda", "view_like_subquery"]
    form = draw(st.sampled_from(forms))
    src = f"{source} AS o"
    if form == "explicit":
        sql = f"SELECT {_select_list(columns, replace)} FROM {src}"
    elif form == "star_replace":
        extra = f", {replace['id']} AS id" if key_offset else ""
        sql = f"SELECT * REPLACE ({px.sql} AS {target}{extra}) FROM {src}"
    elif form == "cte":
        sql = f"WITH w AS (SELECT {_select_list(columns, replace)} FROM {src}) SELECT * FROM w"
    elif form == "union_by_name":
        reordered = draw(st.permutations(columns))
        plain = _select_list(columns, {"id": replace["id"]} if key_offset else {})
        sql = (f"SELECT {plain} FROM {src} WHERE age < 40 UNION ALL BY NAME "
               f"SELECT {_select_list(reordered, replace)} FROM {src} WHERE age >= 40")
    elif form == "lateral_alias":
        others = _select_list([c for c in columns if c != target], {k: v for k, v in replace.items() if k != target})
        sql = f"SELECT {px.sql} AS h0, {others}, h0 AS {target} FROM {src}"
    elif form == "star_exclude_rename":
        p = draw(protected_column)
        sql = f"SELECT * EXCLUDE ({target}) RENAME ({p} AS {target}) FROM {src}"
    elif form == "positional":  # #n counts the FROM clause's columns: #8 is secret
        p = draw(protected_column)
        refs = [f"#{CANARY_COLUMNS.index(c) + 1}" for c in columns]
        refs[columns.index(target)] = f"#{CANARY_COLUMNS.index(p) + 1} AS {target}"
        sql = f"SELECT {', '.join(refs)} FROM {source}"
    elif form == "alias_columns":  # the alias list renames positionally: swap the target's and a protected name
        p = draw(protected_column)
        names = list(CANARY_COLUMNS)
        i, j = names.index(target), names.index(p)
        names[i], names[j] = names[j], names[i]
        keep = draw(st.sampled_from((", ".join(CORE), "*")))
        sql = f"SELECT id, {keep} FROM {source} AS o({', '.join(names)})" if keep != "*" else \
            f"SELECT * FROM {source} AS o({', '.join(names)})"
    elif form in ("struct_star", "struct_unnest"):
        fields = ", ".join(f"'{c}': {replace.get(c, c)}" for c in columns)
        inner = f"SELECT {{{fields}}} AS s FROM {src}"
        sql = f"SELECT s.* FROM ({inner})" if form == "struct_star" else f"SELECT unnest(s) FROM ({inner})"
    elif form == "columns_regex":
        rest = "|".join(c for c in columns if c != target)
        sql = f"SELECT COLUMNS('^({rest})$'), {px.sql} AS {target} FROM {src}"
    elif form == "columns_lambda":
        rest = ", ".join(f"'{c}'" for c in columns if c != target)
        sql = f"SELECT COLUMNS(lambda c: c IN ({rest})), {px.sql} AS {target} FROM {src}"
    else:  # view_like_subquery: a derived table with a renaming column list
        inner = _select_list(columns, replace)
        sql = f"SELECT * FROM (SELECT {inner} FROM {src}) AS d({', '.join(columns)})"
    return Snippet(sql, px.setup)


@st.composite
def plain_copy_select(draw, source: str) -> Snippet:
    """A copy of the canary's rows with nothing laundered (the roles must follow the copy)."""
    return Snippet(draw(st.sampled_from((f"SELECT * FROM {source}", f"FROM {source}",
                                         f"SELECT {', '.join(CANARY_COLUMNS)} FROM {source}"))))


# ------------------------------------------------------------------------------------------- setup statements

@dataclasses.dataclass
class Names:
    """What the final statement may read, and what writes may target, as setup statements make them."""

    tables: list[str] = dataclasses.field(default_factory=lambda: list(CANARY_SPELLINGS))
    relations: list[str] = dataclasses.field(default_factory=list)  # views, table macros, files

    def readable(self) -> list[str]:
        return self.tables + self.relations


@dataclasses.dataclass(frozen=True)
class Step:
    statements: tuple[str, ...]
    tables: tuple[str, ...] = ()
    relations: tuple[str, ...] = ()


def _source_select(draw, source: str, **kw) -> Snippet:
    if draw(st.integers(0, 3)) == 0:
        return draw(plain_copy_select(source))
    return draw(laundering_select(source, **kw))


@st.composite
def create_table_as(draw, names: Names) -> Step:
    """CREATE [TEMP] TABLE ... AS, under a new name, a temp shadow of the canary, another schema or an attached
    database (optionally USEd)."""
    where = draw(st.sampled_from(("new", "temp_new", "quoted", "temp_shadow", "schema", "attached", "attached_use",
                                  "rename_original")))
    body = _source_select(draw, draw(canary_name) if where != "rename_original" else "canary_old")
    pre: tuple[str, ...] = ()
    if where in ("new", "temp_new"):
        temp = "TEMP " if where == "temp_new" else ""
        name, stmt = "t_copy", f"CREATE OR REPLACE {temp}TABLE t_copy AS {body.sql}"
    elif where == "quoted":
        name, stmt = '"T_Copy"', f'CREATE OR REPLACE TABLE main."T_Copy" AS {body.sql}'
    elif where == "temp_shadow":
        body = _source_select(draw, draw(st.sampled_from(("main.canary", "{db}.main.canary"))))
        name, stmt = "canary", f"CREATE OR REPLACE TEMP TABLE canary AS {body.sql}"
    elif where == "schema":
        pre = ("CREATE SCHEMA IF NOT EXISTS s1",)
        name, stmt = "s1.canary", f"CREATE OR REPLACE TABLE s1.canary AS {body.sql}"
        if draw(st.booleans()):
            pre += ("SET search_path = 's1,main'",)
    elif where in ("attached", "attached_use"):
        pre = ("ATTACH IF NOT EXISTS ':memory:' AS a1",)
        body = _source_select(draw, draw(st.sampled_from(("{db}.main.canary", "{db}.canary"))))
        name, stmt = "a1.canary", f"CREATE OR REPLACE TABLE a1.canary AS {body.sql}"
        if where == "attached_use":
            return Step(pre + body.setup + (stmt, "USE a1"), tables=("a1.canary", "canary"))
    else:  # the original renamed away, and a laundered copy made under its name
        pre = ("ALTER TABLE canary RENAME TO canary_old",)
        name, stmt = "canary", f"CREATE TABLE canary AS {body.sql}"
    return Step(pre + body.setup + (stmt,), tables=(name,))


@st.composite
def create_view(draw, names: Names) -> Step:
    """CREATE [TEMP] VIEW, with or without a (renaming) column list."""
    temp = draw(st.sampled_from(("", "TEMP ")))
    name = draw(st.sampled_from(("v_copy", "canary"))) if temp else "v_copy"
    # a temp view named canary must read the original by its catalog ("main.canary" is temp.main.canary, itself)
    source = "{db}.main.canary" if name == "canary" else draw(canary_name)
    if draw(st.booleans()):
        target, p = draw(core_text_column), draw(protected_column)
        cols = list(CANARY_COLUMNS)
        i, j = cols.index(target), cols.index(p)
        cols[i], cols[j] = cols[j], cols[i]
        cols = cols[:draw(st.integers(max(i, j) + 1, len(cols)))]
        return Step((f"CREATE OR REPLACE {temp}VIEW {name}({', '.join(cols)}) AS SELECT * FROM {source}",),
                    relations=(name,))
    body = _source_select(draw, source)
    return Step(body.setup + (f"CREATE OR REPLACE {temp}VIEW {name} AS {body.sql}",), relations=(name,))


@st.composite
def create_table_macro(draw, names: Names) -> Step:
    """CREATE MACRO ... AS TABLE: a relation whose body reads the canary."""
    if draw(st.booleans()):
        body = _source_select(draw, draw(canary_name))
        return Step(body.setup + (f"CREATE OR REPLACE MACRO tm() AS TABLE {body.sql}",), relations=("tm()",))
    body = _source_select(draw, "query_table(t)")
    return Step(body.setup + (f"CREATE OR REPLACE MACRO tm2(t) AS TABLE {body.sql}",),
                relations=("tm2('canary')",))


@st.composite
def insert_statement(draw, names: Names) -> Step:
    """INSERT ... SELECT (positional, BY NAME, column list), VALUES with scalar subqueries, ON CONFLICT, OR
    REPLACE, into the canary (rows beside the originals) or a copy."""
    form = draw(st.sampled_from(("positional", "by_name", "column_list", "values", "on_conflict", "or_replace")))
    target = draw(st.sampled_from(names.tables))
    source = draw(canary_name)
    if form == "positional":
        body = draw(laundering_select(source, full=True, key_offset=1000))
        return Step(body.setup + (f"INSERT INTO {target} {body.sql}",))
    if form == "by_name":
        body = draw(laundering_select(source, key_offset=1000))
        return Step(body.setup + (f"INSERT INTO {target} BY NAME {body.sql}",))
    if form == "column_list":
        col, px = draw(core_text_column), draw(protected_expression(outer="o"))
        cols = list(draw(st.permutations(("id",) + CORE)))
        values = ["id + 1000" if c == "id" else (px.sql if c == col else c) for c in cols]
        return Step(px.setup + (f"INSERT INTO {target} ({', '.join(cols)}) SELECT {', '.join(values)} FROM {source} AS o",))
    if form == "values":
        p, col = draw(protected_column), draw(core_text_column)
        rows = []
        for i in range(1, K + 2):
            row = {"id": str(2000 + i), "age": "33", "sex": "'Male'", "edu": "9", "city": "'Oslo'", "hobby": "'golf'",
                   "note": "'quiet'", "secret": "NULL", "secret2": "NULL", "job": "NULL"}
            row[col] = f"(SELECT {p} FROM {source} WHERE id = {i})"
            rows.append("(" + ", ".join(row[c] for c in CANARY_COLUMNS) + ")")
        return Step((f"INSERT INTO {target} VALUES {', '.join(rows)}",))
    pk = ("CREATE OR REPLACE TABLE pk (id INTEGER PRIMARY KEY, age INTEGER, sex VARCHAR, edu INTEGER, city VARCHAR, "
          "hobby VARCHAR, note VARCHAR, secret VARCHAR, secret2 VARCHAR, job VARCHAR)", f"INSERT INTO pk SELECT * FROM {source}")
    if form == "on_conflict":
        col, p = draw(core_text_column), draw(protected_column)
        value = draw(st.sampled_from((f"EXCLUDED.{p}", f"upper(EXCLUDED.{p})", f"concat({col}, EXCLUDED.{p})")))
        return Step(pk + (f"INSERT INTO pk SELECT * FROM {source} ON CONFLICT (id) DO UPDATE SET {col} = {value}",),
                    tables=("pk",))
    body = draw(laundering_select(source, full=True))
    return Step(pk + body.setup + (f"INSERT OR REPLACE INTO pk {body.sql}",), tables=("pk",))


@st.composite
def update_statement(draw, names: Names) -> Step:
    """UPDATE ... SET core = protected: directly, with FROM another table, correlated, WHERE on a QI."""
    target, col = draw(st.sampled_from(names.tables)), draw(core_text_column)
    form = draw(st.sampled_from(("set", "from", "correlated")))
    where = draw(st.sampled_from(("", " WHERE age > 30", " WHERE city <> 'none'")))
    if form == "set":
        px = draw(protected_expression(outer="u"))
        return Step(px.setup + (f"UPDATE {target} AS u SET {col} = {px.sql}{where}",))
    p = draw(protected_column)
    if form == "from":
        cond = f"c2.id = u.id{where.replace(' WHERE', ' AND').replace('age', 'u.age').replace('city', 'u.city')}"
        return Step((f"UPDATE {target} AS u SET {col} = c2.{p} FROM {draw(canary_name)} AS c2 WHERE {cond}",))
    return Step((f"UPDATE {target} AS u SET {col} = (SELECT c2.{p} FROM canary AS c2 WHERE c2.id = u.id){where}",))


@st.composite
def alter_statement(draw, names: Names) -> Step:
    """ALTER TABLE: ALTER ... TYPE ... USING, RENAME / ADD / DROP COLUMN."""
    target, col, p = draw(st.sampled_from(names.tables)), draw(core_text_column), draw(protected_column)
    form = draw(st.sampled_from(("using", "rename_swap", "drop_rename", "drop_add_update", "add_default")))
    if form == "using":
        px = draw(protected_expression(simple=True))
        return Step((f"ALTER TABLE {target} ALTER {col} SET DATA TYPE VARCHAR USING {px.sql}",))
    if form == "rename_swap":
        return Step((f"ALTER TABLE {target} RENAME COLUMN {col} TO {col}_old",
                     f"ALTER TABLE {target} RENAME COLUMN {p} TO {col}"))
    if form == "drop_rename":
        return Step((f"ALTER TABLE {target} DROP COLUMN {col}", f"ALTER TABLE {target} RENAME {p} TO {col}"))
    if form == "drop_add_update":
        return Step((f"ALTER TABLE {target} DROP COLUMN {col}", f"ALTER TABLE {target} ADD COLUMN {col} VARCHAR",
                     f"UPDATE {target} SET {col} = {p}"))
    return Step((f"ALTER TABLE {target} ADD COLUMN {col}_x VARCHAR DEFAULT 'x'",
                 f"UPDATE {target} SET {col}_x = {p}"))


@st.composite
def copy_round_trip(draw, names: Names) -> Step:
    """COPY (laundering SELECT) TO a file, then read it back (CTAS over the file, or COPY ... FROM)."""
    fmt = draw(st.sampled_from(("csv", "parquet", "json")))
    opts = {"csv": "(HEADER)", "parquet": "(FORMAT parquet)", "json": "(FORMAT json)"}[fmt]
    back = draw(st.sampled_from(("ctas", "copy_into_canary", "copy_into_copy")))
    body = draw(laundering_select(draw(canary_name), full=back != "ctas", key_offset=1000 if back != "ctas" else 0))
    out = body.setup + (f"COPY ({body.sql}) TO '{{tmp}}/leak.{fmt}' {opts}",)
    if back == "ctas":
        reader = draw(st.sampled_from((f"'{{tmp}}/leak.{fmt}'", f"read_{fmt if fmt != 'json' else 'json_auto'}('{{tmp}}/leak.{fmt}')")))
        return Step(out + (f"CREATE OR REPLACE TABLE t_file AS SELECT * FROM {reader}",), tables=("t_file",))
    if back == "copy_into_canary":
        return Step(out + (f"COPY {draw(st.sampled_from(names.tables))} FROM '{{tmp}}/leak.{fmt}' {opts}",))
    return Step(out + ("CREATE OR REPLACE TABLE t_file AS SELECT * FROM canary LIMIT 0",
                       f"COPY t_file FROM '{{tmp}}/leak.{fmt}' {opts}"), tables=("t_file",))


@st.composite
def merge_statement(draw, names: Names) -> Step:
    """MERGE INTO ... WHEN MATCHED THEN UPDATE SET core = protected / WHEN NOT MATCHED THEN INSERT laundered rows."""
    target = draw(st.sampled_from(names.tables))
    if draw(st.booleans()):
        col, px = draw(core_text_column), draw(protected_expression(outer="o"))
        return Step(px.setup + (f"MERGE INTO {target} AS m USING (SELECT id AS sid, {px.sql} AS v FROM "
                                f"{draw(canary_name)} AS o) AS s ON m.id = s.sid WHEN MATCHED THEN UPDATE SET {col} = s.v",))
    body = draw(laundering_select(draw(canary_name), full=True, key_offset=1000))
    return Step(body.setup + (f"MERGE INTO {target} AS m USING ({body.sql}) AS s ON m.id = s.id "
                              "WHEN NOT MATCHED THEN INSERT",))


@st.composite
def generated_column_table(draw, names: Names) -> Step:
    """A table whose core-named column is GENERATED from a protected one, filled from the canary."""
    col, px = draw(core_text_column), draw(protected_expression(simple=True))
    defs = ", ".join(f"{c} {'INTEGER' if c in ('id', 'age', 'edu') else 'VARCHAR'}"
                     + (f" GENERATED ALWAYS AS ({px.sql})" if c == col else "") for c in CANARY_COLUMNS)
    filled = [c for c in CANARY_COLUMNS if c != col]
    return Step((f"CREATE OR REPLACE TABLE gen ({defs})",
                 f"INSERT INTO gen ({', '.join(filled)}) SELECT {', '.join(filled)} FROM {draw(canary_name)}"),
                tables=("gen",))


SETUP_STEPS = (create_table_as, create_view, create_table_macro, insert_statement, update_statement,
               alter_statement, copy_round_trip, merge_statement, generated_column_table)


@st.composite
def setup_step(draw, names: Names) -> Step:
    """One setup step (a few statements), maybe PREPAREd and EXECUTEd instead of run."""
    step = draw(st.sampled_from(SETUP_STEPS).flatmap(lambda make: make(names)))
    last = step.statements[-1]
    if draw(st.integers(0, 3)) == 0 and last.upper().startswith(("INSERT", "UPDATE")):  # DuckDB prepares these
        return dataclasses.replace(step, statements=step.statements[:-1] + (f"PREPARE p1 AS {last}", "EXECUTE p1"))
    return step


# --------------------------------------------------------------------------------------------- final statements

@st.composite
def final_source(draw, names: Names, *, row_filters: bool = False) -> Snippet:
    """What the final statement reads: a name (canary spelling or a made relation) or a laundering subquery of one,
    optionally filtered by a quasi-identifier (allowed) or, with ``row_filters``, by a protected column."""
    name = draw(st.sampled_from(names.readable()))
    if draw(st.booleans()):
        inner = draw(laundering_select(name))
        source = Snippet(f"({inner.sql})", inner.setup)
    else:
        source = Snippet(name)
    filters = ["", " WHERE age >= 25"]
    if row_filters:
        p = draw(protected_column)
        filters += [f" WHERE {p} < 'MARKER-S-3'", f" WHERE {p} IN ('teacher', 'MARKER-S-1', 'MARKER-T-1')",
                    f" WHERE length({p}) > 10", f" WHERE md5({p}) < '8'"]
    where = draw(st.sampled_from(filters))
    if where:
        source = Snippet(f"(SELECT * FROM {source.sql} AS f{where})", source.setup)
    return source


@st.composite
def crowd_query(draw, names: Names, *, row_filters: bool = False) -> Snippet:
    """SELECT ..., getposition(<cols or *>, k := 5, assignments := 1, domain := ['yes','no']) AS answer FROM ...
    (setup: what the source needs; the query may be PREPAREd, then the final statement is EXECUTE q)."""
    source = draw(final_source(names, row_filters=row_filters))
    args = draw(st.sampled_from(("*", "hobby", "city, hobby, note", "age, sex, edu, city, hobby, note", "src.*",
                                 "COLUMNS('^(age|city|hobby|note)$')")))
    lead = draw(st.sampled_from(("", "id, ", "src.id, ")))
    query = f"SELECT {lead}getposition({args}, {OPERATOR_ARGS}) AS answer FROM {source.sql} AS src"
    if draw(st.integers(0, 7)) == 0:
        return Snippet("EXECUTE q", source.setup + (f"PREPARE q AS {query}",))
    return Snippet(query, source.setup)


@st.composite
def anonymize_query(draw, names: Names) -> Snippet:
    """SELECT * FROM ANONYMIZE(<source>, k := 5)."""
    source = draw(final_source(names))
    return Snippet(f"SELECT * FROM ANONYMIZE({source.sql}, k := {K})", source.setup)


@st.composite
def scenario(draw, *, kinds=("crowd", "anonymize"), row_filters: bool = False, max_steps: int = 3) -> Scenario:
    """1-``max_steps`` setup steps, then a crowd query or an ANONYMIZE call over what they made."""
    names = Names()
    setup: list[str] = []
    for _ in range(draw(st.integers(1, max_steps))):
        step = draw(setup_step(names))
        setup += step.statements
        names.tables += [t for t in step.tables if t not in names.tables]
        names.relations += [r for r in step.relations if r not in names.relations]
    kind = draw(st.sampled_from(kinds))
    final = draw(crowd_query(names, row_filters=row_filters) if kind == "crowd" else anonymize_query(names))
    return Scenario(tuple(setup) + final.setup, final.sql, kind)
