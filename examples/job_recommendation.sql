-- The job-recommendation scenario of kanon-crowd-db §1-2, on the Adult census table.
-- Run: crowddb sql "$(cat examples/job_recommendation.sql)" --db jobs.duckdb   (after examples/job_recommendation.py
-- created jobs.duckdb), or paste the statements one by one into db.sql(...).

-- 1. Column roles live in the catalog: QIs are generalized before publication; sensitive and ground truth never leave.
DELETE FROM crowddb_columns WHERE table_name = 'adult';
INSERT INTO crowddb_columns VALUES
    ('adult', 'age', 'quasi_identifier', 'numeric'),
    ('adult', 'sex', 'quasi_identifier', 'categorical'),
    ('adult', 'education_num', 'quasi_identifier', 'numeric'),
    ('adult', 'occupation', 'sensitive', NULL),
    ('adult', 'occupation', 'ground_truth', NULL),
    ('adult', 'id', 'key', NULL),
    ('adult', 'age', 'core', NULL), ('adult', 'sex', 'core', NULL), ('adult', 'education_num', 'core', NULL),
    ('adult', 'workclass', 'core', NULL), ('adult', 'hours_per_week', 'core', NULL);

-- 2. One question per person: which job fits? 3 workers per HIT, k = 25 over the quasi-identifiers.
--    The answers join back to the rows; the rest is ordinary SQL.
WITH recommended AS (
    SELECT id, education, getposition(*, k := 25, assignments := 3) AS job
    FROM adult
    WHERE age BETWEEN 25 AND 35 AND native_country = 'Canada'
)
SELECT job, count(*) AS people, round(avg(a.hours_per_week), 1) AS avg_hours
FROM recommended r JOIN adult a USING (id)
GROUP BY job
ORDER BY people DESC;
