-- The fifth version of the schema: the registry of live workers
-- (jobstore.WorkerRegistry). A worker's row names the lease session of its
-- store, and lives as long as that session: it is listed only while the
-- session is alive (its advisory lock held, its lease renewed), and goes
-- with the session's row when recovery deletes it.
CREATE TABLE {{schema}}.workers (
    id         text PRIMARY KEY,
    session    integer NOT NULL REFERENCES {{schema}}.sessions (id) ON DELETE CASCADE,
    -- token tells one registration from a later one of the same id, so
    -- that an unregister removes only its own.
    token      text NOT NULL,
    info       jsonb NOT NULL
);
CREATE INDEX workers_session ON {{schema}}.workers (session);
