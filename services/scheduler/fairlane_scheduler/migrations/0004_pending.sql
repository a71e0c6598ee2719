-- Pending placements: a request that asked to queue waits here, without GPUs, until the
-- scheduler can place it (by priority, then age).

ALTER TABLE placements DROP CONSTRAINT placements_state_check;
ALTER TABLE placements ADD CONSTRAINT placements_state_check
    CHECK (state IN ('pending', 'placed', 'released', 'expired', 'failed'));
ALTER TABLE placements ALTER COLUMN master_node DROP NOT NULL;
ALTER TABLE placements ALTER COLUMN master_port DROP NOT NULL;
ALTER TABLE placements ADD COLUMN priority integer NOT NULL DEFAULT 0;
ALTER TABLE placements ADD COLUMN placed_at timestamptz;

CREATE INDEX placements_pending ON placements (priority DESC, created_at) WHERE state = 'pending';
