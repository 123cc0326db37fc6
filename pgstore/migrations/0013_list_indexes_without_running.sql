-- The thirteenth version of the schema: the indexes that List reads by
-- state and by kind leave running jobs out. A claim (queued to running)
-- and a completion change state, which these indexes name, so neither
-- update is HOT and each wrote a new entry into both. A claim now writes
-- none there: its new row is running. A list of running jobs reads
-- jobs_session, which holds every running job and only those (their
-- number is bounded by the workers'), and sorts them. List adds the
-- predicates that let the planner use these indexes (query.go).
DROP INDEX {{schema}}.jobs_state;
DROP INDEX {{schema}}.jobs_kind;
CREATE INDEX jobs_state ON {{schema}}.jobs (state, id) WHERE state <> 'running';
CREATE INDEX jobs_kind ON {{schema}}.jobs (kind, id) WHERE state <> 'running';
