"""The demo: recommend jobs for people in the Adult census table without showing the crowd who they are."""

from __future__ import annotations

from . import connect
from .datasets import adult_path

ROLES = {
    "quasi_identifiers": ["age", "sex", "education_num", "marital_status", "race"],
    "sensitive": ["occupation", "income", "capital_gain", "capital_loss"],
    "core": ["age", "sex", "education_num", "marital_status", "race", "workclass", "hours_per_week"],
    "ground_truth": "occupation",
    "key": "id",
}


def run_demo(database: str = ":memory:", rows: int = 2000, seed: int = 7) -> None:
    """Load Adult, ask the simulated crowd for a job per person (k-anonymous HITs), then a best candidate per
    education level (over the same people first: refused, since a worker could intersect the two releases; then
    over people no release has shown), and print costs, privacy parameters and how often the crowd agreed with the
    truth."""
    with connect(database, seed=seed) as db:
        db.load_csv("adult", adult_path(), replace=True, **ROLES)
        print(f"Loaded adult: {db.sql('SELECT count(*) FROM adult').fetchall()[0][0]:,} rows; roles: "
              f"QIs {ROLES['quasi_identifiers']}, sensitive {ROLES['sensitive']}, ground truth 'occupation'.\n")
        # the first rows of the table: rows are never chosen by the key (issue 24)
        query = f"""
            SELECT * FROM (SELECT id, age, education, getposition(*, k := 10) AS job
            FROM adult LIMIT {int(rows)}) ORDER BY id"""
        print("EXPLAIN", " ".join(query.split()))
        print(db.explain(query), "\n")
        jobs = db.sql(query)
        print(jobs.df().head(8).to_string(index=False), "\n")
        print("The plan it ran (db.last_plan):")
        print(db.last_plan, "\n")
        asked, agree = db.sql(f"""
            WITH j AS ({query})
            SELECT count(*), avg((j.job = a.occupation)::INT) FROM j JOIN adult a USING (id)""").fetchall()[0]
        quality = db.sql("SELECT avg(quality) FROM crowddb_workers").fetchall()[0][0]
        print(f"The crowd's job equals the person's real occupation for {agree:.1%} of the {asked:,} people asked "
              f"about (simulated workers, mean quality {quality:.2f}, who saw only the generalized rows).\n")
        print("A published HIT item (what a worker sees):")
        print(db.sql("SELECT content FROM crowddb_hit_items LIMIT 3").df().to_string(index=False), "\n")
        pick = """
            SELECT education, getcandidate(*, 'Prof-specialty') AS candidate, count(*) AS people
            FROM {} GROUP BY education ORDER BY people DESC LIMIT 5"""
        # the core columns listed in their declared order: the order the table itself publishes them in
        columns = ", ".join([*ROLES["core"], "education", "id", "occupation"])
        people = f"(SELECT {columns} FROM adult LIMIT {int(rows)}{{}}) adult"
        # the same people again, grouped by education: each group is shown with the earlier classes it touches, in
        # the boxes getposition showed them in, so a worker who links the two releases learns nothing new
        same = pick.format(people.format(""))
        print("QUERY", " ".join(same.split()))
        print(db.sql(same).df().to_string(index=False), "\n")
        print("The plan it ran (db.last_plan; 'privacy:' says how the rows shown before were kept):")
        print(db.last_plan, "\n")
        print("The bill (every operator run of this session, from crowddb_runs):")
        print(db.sql("""SELECT count(*) AS operator_runs, sum(hits)::BIGINT AS hits,
                               sum(assignments)::BIGINT AS assignments, sum(cached_items)::BIGINT AS cached_items,
                               round(sum(cost), 2) AS usd FROM crowddb_runs""").df().to_string(index=False))
