-- The ninth version of the schema: the workers that ended lately
-- (jobstore.WorkerHistory). A worker's row leaves workers when it
-- unregisters, when its store closes, and with its lease session's row
-- when recovery deletes that; each of those deletes records the worker
-- here, with the time, replacing an earlier end of its ID. EndedWorkers
-- reads them, with the workers whose session died and is not recovered
-- yet, and deletes those older than jobstore.RecentWorkerWindow.
CREATE TABLE {{schema}}.workers_ended (
    id       text PRIMARY KEY,
    info     jsonb NOT NULL,
    ended_at timestamptz NOT NULL
);
CREATE INDEX workers_ended_at ON {{schema}}.workers_ended (ended_at);

CREATE FUNCTION {{schema}}.worker_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{schema}}.workers_ended (id, info, ended_at) VALUES (OLD.id, OLD.info, now())
    ON CONFLICT (id) DO UPDATE SET info = EXCLUDED.info, ended_at = EXCLUDED.ended_at;
    RETURN NULL;
END
$$;
CREATE TRIGGER workers_ended AFTER DELETE ON {{schema}}.workers
FOR EACH ROW EXECUTE FUNCTION {{schema}}.worker_ended();
