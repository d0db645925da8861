-- crowddb catalog: created idempotently on connect, persisted in the database file.
-- Column roles (paper kanon-crowd-db §2.2): quasi-identifiers are generalized before publication, sensitive and
-- ground-truth columns are never published, core columns are what a human operator publishes, the key identifies rows.
CREATE TABLE IF NOT EXISTS crowddb_columns (
    table_name  VARCHAR NOT NULL,
    column_name VARCHAR NOT NULL,
    role        VARCHAR NOT NULL CHECK (role IN ('quasi_identifier', 'sensitive', 'core', 'ground_truth', 'key')),
    kind        VARCHAR CHECK (kind IS NULL OR kind IN ('numeric', 'ordinal', 'categorical')),
    PRIMARY KEY (table_name, column_name, role)
);

-- One row per operator invocation: what it cost and which privacy parameters applied.
CREATE TABLE IF NOT EXISTS crowddb_runs (
    run_id        BIGINT PRIMARY KEY,
    operator      VARCHAR NOT NULL,
    query         VARCHAR,
    input_rows    BIGINT,
    hits          BIGINT,
    assignments   BIGINT,
    cached_items  BIGINT,
    cost          DECIMAL(18, 4),
    k             INTEGER,
    anonymizer    VARCHAR,
    epsilon       DOUBLE,
    delta         DOUBLE,
    created_at    TIMESTAMP DEFAULT current_timestamp
);
-- 'running' (its row is written when the run starts, which takes its id), 'completed', 'failed' (the run stopped
-- after buying some answers, which are kept: a rerun reuses them), or 'interrupted' (its process died: a later run
-- found it 'running' with its process gone, and filled in the HITs, assignments and cost it had on record)
ALTER TABLE crowddb_runs ADD COLUMN IF NOT EXISTS status VARCHAR DEFAULT 'completed';
-- the process running it (pid on host) and when it last wrote a purchase: how a later run knows it was interrupted
ALTER TABLE crowddb_runs ADD COLUMN IF NOT EXISTS pid BIGINT;
ALTER TABLE crowddb_runs ADD COLUMN IF NOT EXISTS host VARCHAR;
ALTER TABLE crowddb_runs ADD COLUMN IF NOT EXISTS heartbeat TIMESTAMP;

CREATE TABLE IF NOT EXISTS crowddb_workers (
    worker_id   VARCHAR PRIMARY KEY,
    platform    VARCHAR NOT NULL,
    quality     DOUBLE,            -- known only for simulated workers
    created_at  TIMESTAMP DEFAULT current_timestamp
);

-- the worker's id on the marketplace that recruited them (a Prolific participant id): what bulk payments name
ALTER TABLE crowddb_workers ADD COLUMN IF NOT EXISTS marketplace_id VARCHAR;

CREATE TABLE IF NOT EXISTS crowddb_hits (
    hit_id          VARCHAR PRIMARY KEY,
    run_id          BIGINT NOT NULL,
    operator        VARCHAR NOT NULL,
    question        VARCHAR NOT NULL,
    domain          VARCHAR,        -- JSON list of allowed answers, NULL when the answer picks one of the items' rows
    n_items         INTEGER NOT NULL,
    assignments     INTEGER NOT NULL,
    reward          DECIMAL(18, 4) NOT NULL,   -- per assignment
    fee_rate        DOUBLE NOT NULL,
    platform        VARCHAR NOT NULL,
    -- 'publishing' (on record before the platform is called: write-ahead), 'published' (the platform accepted it,
    -- not yet collected), 'completed', 'lost' (the platform no longer knows it; its items were bought again). A HIT
    -- left 'publishing' by a run that died is resolved by the next run: the platform is asked whether it has it.
    status          VARCHAR NOT NULL,
    created_at      TIMESTAMP DEFAULT current_timestamp
);

-- What a HIT shows: one row per question item, its published content exactly as the crowd sees it (JSON).
CREATE TABLE IF NOT EXISTS crowddb_hit_items (
    hit_id      VARCHAR NOT NULL,
    item_no     INTEGER NOT NULL,
    item_key    VARCHAR NOT NULL,     -- hash of operator signature + published content
    occurrence  INTEGER NOT NULL,     -- n-th identical item of one query: identical content bought once per copy
    content     VARCHAR NOT NULL,
    PRIMARY KEY (hit_id, item_no)
);

-- a gold question: a copy of an item of the same HIT batch whose answer is known (the answer); NULL for the others.
-- Its answers score workers on the platform and are never taken for the item's answers.
ALTER TABLE crowddb_hit_items ADD COLUMN IF NOT EXISTS gold VARCHAR;

CREATE TABLE IF NOT EXISTS crowddb_assignments (
    assignment_id VARCHAR PRIMARY KEY,
    hit_id        VARCHAR NOT NULL,
    worker_id     VARCHAR NOT NULL,
    submitted_at  TIMESTAMP DEFAULT current_timestamp
);

-- Every answer bought, per assignment and item; also the answer cache (looked up by item_key, occurrence).
CREATE TABLE IF NOT EXISTS crowddb_answers (
    assignment_id VARCHAR NOT NULL,
    hit_id        VARCHAR NOT NULL,
    item_no       INTEGER NOT NULL,
    item_key      VARCHAR NOT NULL,
    occurrence    INTEGER NOT NULL,
    worker_id     VARCHAR NOT NULL,
    answer        VARCHAR,
    PRIMARY KEY (assignment_id, item_no)
);

CREATE TABLE IF NOT EXISTS crowddb_payments (
    assignment_id VARCHAR PRIMARY KEY,
    hit_id        VARCHAR NOT NULL,
    worker_id     VARCHAR NOT NULL,
    reward        DECIMAL(18, 4) NOT NULL,
    fee           DECIMAL(18, 4) NOT NULL,
    paid_at       TIMESTAMP DEFAULT current_timestamp
);

-- Every anonymized, perturbed or synthesized release with its privacy parameters and quality figures (JSON).
CREATE TABLE IF NOT EXISTS crowddb_releases (
    release_id  BIGINT PRIMARY KEY,
    run_id      BIGINT,
    kind        VARCHAR NOT NULL CHECK (kind IN ('anonymization', 'perturbation', 'synthesis')),
    method      VARCHAR NOT NULL,
    k           INTEGER,
    epsilon     DOUBLE,
    delta       DOUBLE,
    params      VARCHAR,
    metrics     VARCHAR,
    created_at  TIMESTAMP DEFAULT current_timestamp
);

-- The privacy ledger of k-anonymous releases (a crowd run 'run:<id>', an ANONYMIZE result 'release:<id>'): each
-- release per table it showed rows of (traceable: its rows could be tied to the table's), and what it showed of each
-- row: the row's rowid and its box (its quasi-identifiers' published texts). The guard of k-anonymity across releases
-- reads them (crowddb/store/composition.py).
CREATE TABLE IF NOT EXISTS crowddb_ledger (
    release     VARCHAR NOT NULL,
    table_name  VARCHAR NOT NULL,
    k           INTEGER NOT NULL,
    traceable   BOOLEAN NOT NULL,
    fingerprint VARCHAR,          -- the set of (row, box) it showed, hashed: a repeat of an earlier release ...
    repeats     VARCHAR,          -- ... is on record by reference to it (its rows are not written again)
    quasi_identifiers VARCHAR,    -- the set its boxes are printed over (a later release may show its boxes again)
    created_at  TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (release, table_name)
);

-- What each release showed of each row, stored as numbers (a 1M-row release appends 1M rows of three integers from
-- Arrow, its box texts once each): release_no numbers the (release, table) entries of crowddb_ledger, in the order
-- they were recorded; a release's boxes are numbered within it (box_id), one row per distinct text.
CREATE SEQUENCE IF NOT EXISTS crowddb_ledger_numbers;
ALTER TABLE crowddb_ledger ADD COLUMN IF NOT EXISTS release_no INTEGER;
CREATE TABLE IF NOT EXISTS crowddb_ledger_boxes (
    release_no  INTEGER NOT NULL,
    box_id      INTEGER NOT NULL,
    box         VARCHAR NOT NULL     -- the published texts of its quasi-identifiers (composition.box_text)
);
CREATE TABLE IF NOT EXISTS crowddb_ledger_rows (
    release_no  INTEGER NOT NULL,
    row_ref     BIGINT NOT NULL,     -- the row's identity (privacy/tracing.py: row_identity)
    box_id      INTEGER NOT NULL
);
-- the ledger as one row per (release, row): read it here (an old database's table of this name is moved into the
-- two tables above when it opens: composition.migrate)
CREATE VIEW IF NOT EXISTS crowddb_published AS
SELECT l.release, l.table_name, r.row_ref, l.k, b.box
FROM crowddb_ledger_rows r JOIN crowddb_ledger l USING (release_no) JOIN crowddb_ledger_boxes b USING (release_no, box_id);

-- Each published row's history so far, kept with the ledger (same transaction) so the guard reads one row per table
-- row, however many releases there were: the XOR of md5_number(release || chr(31) || box) over the row's ledger
-- entries, and the smallest k promised to it; and the release (release_no) and box (box_id) it was newest shown in:
-- the table's persisted partition read in one pass (composition.recorded), without scanning every release's rows.
CREATE TABLE IF NOT EXISTS crowddb_row_history (
    table_name  VARCHAR NOT NULL,
    row_ref     BIGINT NOT NULL,
    history     UHUGEINT NOT NULL,
    k           INTEGER NOT NULL,
    last_release_no INTEGER,
    last_box_id INTEGER
);
ALTER TABLE crowddb_row_history ADD COLUMN IF NOT EXISTS last_release_no INTEGER;
ALTER TABLE crowddb_row_history ADD COLUMN IF NOT EXISTS last_box_id INTEGER;

-- One row per table with releases on record, bumped by each release in its transaction: two connections releasing
-- rows of one table at once conflict here, and the later one is checked again against the earlier one's rows.
CREATE TABLE IF NOT EXISTS crowddb_ledger_tables (
    table_name  VARCHAR PRIMARY KEY,
    releases    BIGINT NOT NULL,
    identity    VARCHAR NOT NULL     -- how its rows are told apart: 'key:<column>' (hashed) or 'rowid'
);
-- true while the table has rows on record from one release only: their histories are that release's entries, read
-- through crowddb_histories and never written (a first release appends its rows alone); the table's next release
-- with rows writes them into crowddb_row_history first (composition.record). NULL (a database made before): false
ALTER TABLE crowddb_ledger_tables ADD COLUMN IF NOT EXISTS pending BOOLEAN;

-- Every published row's history, as crowddb_row_history holds it: its rows, and those of the tables whose one
-- release's histories are still its entries (pending), each a hash of the release and the row's box (computed once
-- per box). Read the histories here; composition.record writes crowddb_row_history.
CREATE VIEW IF NOT EXISTS crowddb_histories AS
WITH pending AS (
    SELECT l.table_name, l.release, l.release_no, l.k
    FROM crowddb_ledger_tables t JOIN crowddb_ledger l USING (table_name) WHERE t.pending),
entries AS (
    SELECT p.table_name, p.release_no, p.k, b.box_id, md5_number(p.release || chr(31) || b.box) AS history
    FROM pending p JOIN crowddb_ledger_boxes b USING (release_no))
SELECT table_name, row_ref, history, k, last_release_no, last_box_id FROM crowddb_row_history
UNION ALL
SELECT e.table_name, r.row_ref, e.history, e.k, r.release_no, r.box_id
FROM entries e JOIN crowddb_ledger_rows r USING (release_no, box_id);

-- Tables whose rows an earlier statement chose by a protected column: CREATE TABLE ... AS or INSERT ... SELECT with
-- such a WHERE (or from such a table), a DELETE by one, an UPDATE whose WHERE reads one. A human operator over them
-- is refused as it would be over the filter itself (privacy/selection.py): workers would learn the protected value
-- from which rows they are shown. ``reason``: the clause, as the refusal quotes it.
CREATE TABLE IF NOT EXISTS crowddb_chosen (
    table_name  VARCHAR NOT NULL,     -- a table's key (privacy/identity.py)
    reason      VARCHAR NOT NULL
);

-- Rows keep their identity: a table renamed, or made or filled from a table's rows (CREATE TABLE ... AS, INSERT ...
-- SELECT), shares that table's privacy ledger and epsilon budget (store/links.py). ``carried``: JSON, the columns it
-- holds unchanged copies of, {its column: the root's column}; the key among them ties its rows to the root's.
CREATE TABLE IF NOT EXISTS crowddb_ledger_links (
    table_name  VARCHAR PRIMARY KEY,  -- a table's key (privacy/identity.py)
    root        VARCHAR NOT NULL,     -- the table whose ledger and budget it shares
    carried     VARCHAR NOT NULL,
    reason      VARCHAR NOT NULL
);

-- PRIVATE_SYNTH's per-object privacy report of every release (Theorem 2 of PrisCrowd), appended, never rewritten.
CREATE TABLE IF NOT EXISTS crowddb_synth_objects (
    release_id      BIGINT NOT NULL,
    object          VARCHAR,
    n_claims        BIGINT,
    released        BOOLEAN,
    rows            BIGINT,
    reached_m       BOOLEAN,
    tried           BIGINT,
    rejected        BIGINT,
    epsilon         DOUBLE,
    delta           DOUBLE,
    guarantee_holds BOOLEAN,
    reason          VARCHAR
);

-- The report of the newest synthesis release, as a table.
CREATE VIEW IF NOT EXISTS crowddb_last_synth_report AS
SELECT * EXCLUDE (release_id) FROM crowddb_synth_objects
WHERE release_id = (SELECT max(release_id) FROM crowddb_synth_objects);

-- The epsilon budget (issue 15, point 3; crowddb/store/privacy.py): one append-only, hash-chained ledger of every act
-- on a differential-privacy budget: 'budget' (a table's limit per protected unit set), 'reset' (what was spent
-- forgotten, itself logged) and 'charge' (one release's (epsilon, delta, rho) for one unit, e.g. one source, written
-- in the release's transaction). hash = HMAC-SHA256(key, prev_hash || the row's content), the key kept outside the
-- database file (issue 24: CROWDDB_LEDGER_KEY, else <file>.key): an edit through a raw connection breaks the chain,
-- and every charge, act and db.privacy_report verifies it. Plain SQL through db.sql/db.execute may not write it.
CREATE TABLE IF NOT EXISTS crowddb_privacy_ledger (
    seq          BIGINT PRIMARY KEY,
    act          VARCHAR NOT NULL,
    table_name   VARCHAR NOT NULL,
    unit         VARCHAR NOT NULL,
    unit_id      VARCHAR,
    release_id   BIGINT,
    epsilon      DOUBLE,
    delta        DOUBLE,
    rho          DOUBLE,
    composition  VARCHAR,
    created_at   TIMESTAMP DEFAULT current_timestamp,
    prev_hash    VARCHAR NOT NULL,
    hash         VARCHAR NOT NULL
);

-- The chain's sealed head (one row, rewritten with every append in the same transaction): the newest row's seq and
-- hash, and HMAC(key, 'head' || seq || hash). What is left of a chain whose newest rows were deleted still verifies;
-- the head then names a row that is gone, and a head for the shorter chain cannot be made without the key.
CREATE TABLE IF NOT EXISTS crowddb_privacy_ledger_head (
    seq   BIGINT NOT NULL,
    hash  VARCHAR NOT NULL,
    mac   VARCHAR NOT NULL
);

-- What each protected unit of each table has spent since the table's last reset, and its budget (the latest 'budget'
-- act): the SQL side of db.privacy_report. rho_spent is NULL when a charge of the unit has no rho (zCDP).
CREATE VIEW IF NOT EXISTS crowddb_privacy_spent AS
WITH budgets AS (
    SELECT table_name, unit, arg_max(epsilon, seq) AS budget_epsilon, arg_max(delta, seq) AS budget_delta,
           arg_max(composition, seq) AS composition
    FROM crowddb_privacy_ledger WHERE act = 'budget' GROUP BY table_name, unit),
resets AS (
    SELECT table_name, unit, max(seq) AS reset_seq FROM crowddb_privacy_ledger WHERE act = 'reset'
    GROUP BY table_name, unit),
spent AS (
    SELECT l.table_name, l.unit, l.unit_id, count(DISTINCT l.release_id) AS releases, sum(l.epsilon) AS epsilon_spent,
           sum(l.delta) AS delta_spent, CASE WHEN bool_and(l.rho IS NOT NULL) THEN sum(l.rho) END AS rho_spent
    FROM crowddb_privacy_ledger l LEFT JOIN resets r ON r.table_name = l.table_name AND r.unit = l.unit
    WHERE l.act = 'charge' AND l.seq > coalesce(r.reset_seq, 0)
    GROUP BY l.table_name, l.unit, l.unit_id)
SELECT s.table_name, s.unit, s.unit_id, s.releases, s.epsilon_spent, s.delta_spent, s.rho_spent, b.composition,
       b.budget_epsilon, b.budget_delta, b.budget_epsilon - s.epsilon_spent AS epsilon_left,
       b.budget_delta - s.delta_spent AS delta_left
FROM spent s LEFT JOIN budgets b ON b.table_name = s.table_name AND b.unit = s.unit;

-- What each worker earned per run, with their marketplace id: the rows `crowddb payments --run N` prints as the CSV
-- marketplaces take for bulk bonus payments (the reward; the fee is the marketplace's own).
CREATE VIEW IF NOT EXISTS crowddb_payouts AS
SELECT h.run_id, p.worker_id, any_value(w.marketplace_id) AS marketplace_id, count(*) AS assignments,
       sum(p.reward) AS reward, sum(p.fee) AS fee
FROM crowddb_payments p JOIN crowddb_hits h USING (hit_id) LEFT JOIN crowddb_workers w USING (worker_id)
GROUP BY h.run_id, p.worker_id;
