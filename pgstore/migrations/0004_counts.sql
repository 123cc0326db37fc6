-- The fourth version of the schema: Stats reads a small table of counts
-- instead of counting the jobs table, so its cost does not grow with the
-- jobs kept.
--
-- counts holds deltas: the jobs of (kind, state) number the sum of n over
-- the rows of that pair. Statement-level triggers on jobs append one row
-- per (kind, state) that a statement changed, whatever the number of jobs
-- it wrote (a SubmitBatch of 1,000 jobs appends one row, a claim two), so
-- every writer of jobs, whichever program or statement, keeps the counts
-- exact in its own transaction, and writers never wait for each other here:
-- they only insert. A compaction (Store.compactCounts) replaces the rows by
-- their sums, in one statement that deletes only the rows it saw.
CREATE TABLE {{schema}}.counts (
    kind  text NOT NULL,
    state text NOT NULL,
    n     bigint NOT NULL
);
-- The table is small and churns: vacuum it after fewer dead rows than the
-- default fraction would wait for.
ALTER TABLE {{schema}}.counts SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);

CREATE FUNCTION {{schema}}.count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{schema}}.counts (kind, state, n)
    SELECT kind, state, count(*) FROM new_jobs GROUP BY kind, state;
    RETURN NULL;
END
$$;

CREATE FUNCTION {{schema}}.count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{schema}}.counts (kind, state, n)
    SELECT kind, state, -count(*) FROM old_jobs GROUP BY kind, state;
    RETURN NULL;
END
$$;

-- An update counts only the rows whose kind or state changed: the rows
-- before count -1 and after +1 per pair, and pairs whose sum is zero (a
-- change of other columns, such as Wait's mark or a cancel request) are
-- not written.
CREATE FUNCTION {{schema}}.count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{schema}}.counts (kind, state, n)
    SELECT kind, state, sum(n) FROM (
        SELECT kind, state, -count(*) AS n FROM old_jobs GROUP BY kind, state
        UNION ALL
        SELECT kind, state, count(*) FROM new_jobs GROUP BY kind, state) d
    GROUP BY kind, state
    HAVING sum(n) <> 0;
    RETURN NULL;
END
$$;

-- TRUNCATE (by hand: the store never runs it) empties the counts too; it
-- waits for a compaction in progress, whose sums it then removes.
CREATE FUNCTION {{schema}}.count_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE {{schema}}.counts;
    RETURN NULL;
END
$$;

-- A trigger with transition tables fires on one event only, and on every
-- column (PostgreSQL allows no column list with them).
CREATE TRIGGER count_inserted AFTER INSERT ON {{schema}}.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.count_inserted();
CREATE TRIGGER count_deleted AFTER DELETE ON {{schema}}.jobs
    REFERENCING OLD TABLE AS old_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.count_deleted();
CREATE TRIGGER count_updated AFTER UPDATE ON {{schema}}.jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.count_updated();
CREATE TRIGGER count_truncated AFTER TRUNCATE ON {{schema}}.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.count_truncated();

-- The jobs already there. CREATE TRIGGER locked the table against writes
-- (SHARE ROW EXCLUSIVE) until this transaction commits, after the writers
-- that began before it ended, and the migration runs READ COMMITTED: this
-- statement sees every job written without the triggers, and every later
-- write fires them.
INSERT INTO {{schema}}.counts (kind, state, n)
SELECT kind, state, count(*) FROM {{schema}}.jobs GROUP BY kind, state;
