"""The privacy boundary: what may reach a worker, decided by construction.

- ``functions``: which DuckDB functions lineage may look through (an allow list built from ``duckdb_functions()``);
- ``selection``: rows a crowd operator shows may not be chosen by a protected column;
- ``gate``: DuckDB classifies every statement; each kind is handled or refused while anything is protected;
- ``identity``: tables by what DuckDB resolves a name to, not by the name a query spells.
"""
