-- The twelfth version of the schema: dependencies between jobs, and
-- batches (jobstore.Spec.After, AfterAny, Batch, AfterBatch).
--
-- A job may wait for others: its state is then 'waiting', which no claim
-- takes (the claim indexes hold queued jobs only). The new fields are
-- columns of their own rather than fields of doc, as tags and meta are
-- (0008): a process of the release before, still running, rewrites doc
-- without them but never touches these columns. None changes after the
-- submit but depended, which only ever goes from false to true.
--
--   after        the IDs of the jobs this one waits for, each once, in
--                the order named; NULL for none.
--   after_any    run once every one of them ended, whatever the outcome;
--                without it a failed or canceled one cancels the job.
--   batch        the batch the job belongs to; NULL for none.
--   after_batch  the batch whose callback the job is; NULL for none.
--   depended     some job names this one in its after. A submit that
--                names a job sets it (and counts a version), under the
--                job's row lock, before its own insert commits; a write
--                that ends a job whose flag it read settles the job's
--                waiting dependents in its own transaction. A job that
--                no one names pays nothing when it ends (see settle.go).
ALTER TABLE {{schema}}.jobs
    DROP CONSTRAINT jobs_state_check,
    ADD CONSTRAINT jobs_state_check
        CHECK (state IN ('waiting', 'queued', 'running', 'succeeded', 'failed', 'canceled')),
    ADD COLUMN after       text[] COLLATE "C" CHECK (cardinality(after) > 0),
    ADD COLUMN after_any   boolean NOT NULL DEFAULT false,
    ADD COLUMN batch       text COLLATE "C",
    ADD COLUMN after_batch text COLLATE "C",
    ADD COLUMN depended    boolean NOT NULL DEFAULT false;

-- The jobs that name a job in their after: "the waiting jobs that wait
-- for X" is one lookup of this index, at every end of a job that others
-- name, and Prune and Delete ask it of the finished jobs they would
-- remove. Jobs without dependencies are not in it. fastupdate is off so
-- that a lookup never reads a long list of pending entries: an end's
-- promotion of its dependents stays a few index pages away.
CREATE INDEX jobs_after ON {{schema}}.jobs USING gin (after) WITH (fastupdate = off) WHERE after IS NOT NULL;
-- The jobs of a batch, and its callbacks.
CREATE INDEX jobs_batch ON {{schema}}.jobs (batch, id) WHERE batch IS NOT NULL;
CREATE INDEX jobs_after_batch ON {{schema}}.jobs (after_batch, id) WHERE after_batch IS NOT NULL;

-- batches holds a row per batch that has jobs. Its row lock orders the
-- submits of a batch: a submit of a job to the batch holds it FOR SHARE
-- until it commits, a submit of a callback FOR UPDATE, so that the
-- callback, which reads the batch's jobs in a statement after it has the
-- lock, waits for every member submit in flight and sees it, and every
-- member submit after it finds the batch closed. Once closed a batch stays
-- closed while it has jobs; Prune and Delete remove the row of a batch
-- whose jobs are all gone.
CREATE TABLE {{schema}}.batches (
    name   text COLLATE "C" PRIMARY KEY,
    closed boolean NOT NULL DEFAULT false
);
