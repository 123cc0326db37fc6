-- The third version of the schema: one index fewer to keep up on every
-- submit. The earliest RunAt of the queued jobs (after a claim that found
-- nothing, and in Stats) is read from the claim indexes instead: their
-- first entry of each priority is that priority's earliest RunAt, and
-- priorities are bounded (-1000 to 1000), so the read visits at most one
-- entry per priority in use.
DROP INDEX {{schema}}.jobs_due;
