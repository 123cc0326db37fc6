-- The tenth version of the schema: schedules (jobstore.Scheduler). A row
-- per schedule: its definition (jobstore.Schedule's JSON, in doc), and its
-- latest fired tick and that tick's job, which every process that fires a
-- tick moves forward, never back.
CREATE TABLE {{schema}}.schedules (
    name      text COLLATE "C" PRIMARY KEY,
    doc       jsonb NOT NULL,
    last_tick timestamptz,
    last_job  text
);
