-- The eleventh version of the schema: store-wide settings, a row per
-- setting, its value as JSON. The first is the retention policy
-- (jobstore.RetentionKeeper), row 'retention', which the processes that
-- fire schedules apply.
CREATE TABLE {{schema}}.settings (
    name  text COLLATE "C" PRIMARY KEY,
    value jsonb NOT NULL
);
