-- Nodes an operator took out of placement (maintenance, suspicion); their GPUs keep
-- their scores but receive no new placements until uncordoned.
CREATE TABLE cordons (
    node        text        PRIMARY KEY,
    reason      text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);
