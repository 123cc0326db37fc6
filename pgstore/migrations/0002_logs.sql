-- The output of exec jobs, kept where every machine can read it. A log is
-- a sequence of chunks; a chunk's offset is where its first byte is in
-- the log, so a reader that has read up to some offset asks only for the
-- chunks that end after it. A log goes with its job (Prune).
CREATE TABLE {{schema}}.logs (
    id     text COLLATE "C" NOT NULL REFERENCES {{schema}}.jobs (id) ON DELETE CASCADE,
    "offset" bigint NOT NULL,
    data   bytea NOT NULL,
    PRIMARY KEY (id, "offset")
);
