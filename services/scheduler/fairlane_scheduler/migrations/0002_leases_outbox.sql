-- Leases: a placement not renewed before lease_expires_at expires and frees its GPUs.
-- Outbox: every committed change is written here in the same transaction, and a relay
-- publishes it to fairlane.placements.v1 (at least once, in order per placement).

ALTER TABLE placements ADD COLUMN lease_expires_at timestamptz;

CREATE INDEX placements_live_lease ON placements (lease_expires_at) WHERE state = 'placed';

CREATE TABLE outbox (
    id            bigserial   PRIMARY KEY,
    placement_id  uuid        NOT NULL,
    payload       jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    published_at  timestamptz
);

CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
