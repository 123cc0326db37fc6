-- The eighth version of the schema: a job's tags and metadata.
--
-- Each is a column of its own rather than a field of doc: a process of
-- the release before, still running, rewrites doc without them, but
-- never touches these columns, so what a submit gave a job is kept until
-- the job is gone. Neither changes after the submit. NULL is none.
ALTER TABLE {{schema}}.jobs
    ADD COLUMN tags jsonb CHECK (jsonb_typeof(tags) = 'array'),
    ADD COLUMN meta jsonb CHECK (jsonb_typeof(meta) = 'object');

-- List by tag: the jobs whose tags hold one.
CREATE INDEX jobs_tags ON {{schema}}.jobs USING gin (tags) WHERE tags IS NOT NULL;
