-- The first version of the schema. {{schema}} is replaced by the quoted
-- schema name. Every statement runs in one transaction, under the
-- migration lock.

-- jobs holds one row per job. The columns are what an index or a
-- statement needs; doc holds the JSON of every other field of
-- jobstore.Job, so that a field added later needs no migration. A claim
-- changes columns only, so a column wins over the same field in doc.
CREATE TABLE {{schema}}.jobs (
    id               text COLLATE "C" PRIMARY KEY,
    key              text,
    kind             text NOT NULL,
    state            text NOT NULL
                     CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'canceled')),
    priority         integer NOT NULL,
    run_at           timestamptz NOT NULL,
    attempt          integer NOT NULL,
    worker           text NOT NULL DEFAULT '',
    started_at       timestamptz,
    updated_at       timestamptz NOT NULL,
    finished_at      timestamptz,
    cancel_requested boolean NOT NULL DEFAULT false,
    -- session is the lease session of the running attempt's claimant.
    session          integer,
    -- waited is set by Wait: a change to a terminal state then notifies.
    waited           boolean NOT NULL DEFAULT false,
    -- version counts the writes of the row; every change but Wait's mark
    -- is conditional on the version it read.
    version          bigint NOT NULL DEFAULT 1,
    payload          bytea,
    result           bytea,
    doc              bytea NOT NULL
);

-- One job per idempotency key, until it is pruned.
CREATE UNIQUE INDEX jobs_key ON {{schema}}.jobs (key) WHERE key IS NOT NULL;
-- Claim order among queued jobs: priority, then run_at, then ID (FIFO);
-- of every kind, and of one kind.
CREATE INDEX jobs_claim ON {{schema}}.jobs (priority DESC, run_at, id) WHERE state = 'queued';
CREATE INDEX jobs_claim_kind ON {{schema}}.jobs (kind, priority DESC, run_at, id) WHERE state = 'queued';
-- The next queued job to become due.
CREATE INDEX jobs_due ON {{schema}}.jobs (run_at) WHERE state = 'queued';
-- List by state or kind, newest or oldest first; Stats.
CREATE INDEX jobs_state ON {{schema}}.jobs (state, id);
CREATE INDEX jobs_kind ON {{schema}}.jobs (kind, id);
-- Prune: terminal jobs by the time they finished.
CREATE INDEX jobs_finished ON {{schema}}.jobs (finished_at) WHERE finished_at IS NOT NULL;
-- The running jobs of a lease session, for recovery.
CREATE INDEX jobs_session ON {{schema}}.jobs (session) WHERE state = 'running';

-- sessions holds one row per live lease session: a worker process's
-- dedicated connection, which holds the advisory lock (schema OID, id)
-- for as long as it lives, and renews expires_at on the database's clock.
CREATE SEQUENCE {{schema}}.session_ids AS integer CYCLE;
CREATE TABLE {{schema}}.sessions (
    id          integer PRIMARY KEY,
    host        text NOT NULL,
    pid         integer NOT NULL,
    backend_pid integer NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    -- dead_since is set by the first store that finds the session's lock
    -- free; its jobs are recovered Options.LeaseGrace later.
    dead_since  timestamptz
);
