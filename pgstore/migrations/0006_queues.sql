-- The sixth version of the schema: queues. Every job is in one (the
-- default queue for the jobs already there), and a queue may be paused:
-- claims pass over the jobs of a paused queue, in every process, from the
-- commit of the pause on.
ALTER TABLE {{schema}}.jobs ADD COLUMN queue text COLLATE "C" NOT NULL DEFAULT 'default';
-- Claim order within one queue: the claims of workers that take some
-- queues only, and the earliest RunAt of a queue.
CREATE INDEX jobs_claim_queue ON {{schema}}.jobs (queue, priority DESC, run_at, id) WHERE state = 'queued';

-- queues holds the settings of the queues that have some. A queue without
-- a row has none: it runs.
CREATE TABLE {{schema}}.queues (
    name       text COLLATE "C" PRIMARY KEY,
    paused     boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The counts are kept per queue too: the deltas already there are of the
-- default queue, where their jobs are.
ALTER TABLE {{schema}}.counts ADD COLUMN queue text COLLATE "C" NOT NULL DEFAULT 'default';

CREATE OR REPLACE FUNCTION {{schema}}.count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{schema}}.counts (queue, kind, state, n)
    SELECT queue, kind, state, count(*) FROM new_jobs GROUP BY queue, kind, state;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{schema}}.counts (queue, kind, state, n)
    SELECT queue, kind, state, -count(*) FROM old_jobs GROUP BY queue, kind, state;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{schema}}.counts (queue, kind, state, n)
    SELECT queue, kind, state, sum(n) FROM (
        SELECT queue, kind, state, -count(*) AS n FROM old_jobs GROUP BY queue, kind, state
        UNION ALL
        SELECT queue, kind, state, count(*) FROM new_jobs GROUP BY queue, kind, state) d
    GROUP BY queue, kind, state
    HAVING sum(n) <> 0;
    RETURN NULL;
END
$$;
