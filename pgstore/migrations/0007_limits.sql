-- The seventh version of the schema: limits and rates of queues.
--
-- The tables are locked in the order a claim locks them, jobs first, so
-- that a claim of a process of the release before, still running, waits
-- for the migration rather than deadlock with it.
LOCK TABLE {{schema}}.jobs, {{schema}}.queues IN ACCESS EXCLUSIVE MODE;

-- A queue may have a concurrency limit (queue_limit), a limit per
-- partition of its jobs (per_partition) and a rate (rate_n starts in any
-- window of rate_per_us microseconds); 0 is none. A claim of a limited
-- queue's job holds a transaction-level advisory lock of the queue while
-- it counts the queue's running jobs, and of its partitions, and the
-- recent starts.
ALTER TABLE {{schema}}.queues
    ADD COLUMN queue_limit   integer NOT NULL DEFAULT 0 CHECK (queue_limit >= 0),
    ADD COLUMN per_partition integer NOT NULL DEFAULT 0 CHECK (per_partition >= 0),
    ADD COLUMN rate_n        integer NOT NULL DEFAULT 0 CHECK (rate_n >= 0),
    ADD COLUMN rate_per_us   bigint  NOT NULL DEFAULT 0 CHECK (rate_per_us >= 0);

-- A job's partition is a column, as its queue is, so that a claim counts
-- the running jobs of a partition from an index. It was kept in doc only:
-- every job that may run again (all but the succeeded) gets it from
-- there, and so does every job inserted without it (by a process of the
-- release before, still running). A doc that does not decode leaves it
-- NULL, as a read of the job reports the doc corrupt anyway.
ALTER TABLE {{schema}}.jobs ADD COLUMN partition text COLLATE "C";
CREATE FUNCTION {{schema}}.doc_partition(doc bytea) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN convert_from(doc, 'UTF8')::json ->> 'partition';
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$$;
UPDATE {{schema}}.jobs SET partition = {{schema}}.doc_partition(doc)
WHERE state <> 'succeeded' AND position('"partition"'::bytea IN doc) > 0;
CREATE FUNCTION {{schema}}.fill_partition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.partition := {{schema}}.doc_partition(NEW.doc);
    RETURN NEW;
END
$$;
CREATE TRIGGER jobs_fill_partition BEFORE INSERT ON {{schema}}.jobs FOR EACH ROW
WHEN (NEW.partition IS NULL AND position('"partition"'::bytea IN NEW.doc) > 0)
EXECUTE FUNCTION {{schema}}.fill_partition();

-- The running jobs of each queue and partition: what a claim of a limited
-- queue counts. Running jobs are few, and so is this index.
CREATE INDEX jobs_running_queue ON {{schema}}.jobs (queue, partition) WHERE state = 'running';

-- queue_starts holds the recent starts of the rate-limited queues, on the
-- database's clock: the claims of each queue keep those of its window and
-- the latest N (its rate's N), and delete the rest.
CREATE TABLE {{schema}}.queue_starts (
    queue text COLLATE "C" NOT NULL,
    at    timestamptz NOT NULL
);
CREATE INDEX queue_starts_at ON {{schema}}.queue_starts (queue, at);
