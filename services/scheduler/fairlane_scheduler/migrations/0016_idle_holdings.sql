-- Idle holdings (issue 29 item 3). A running placement's last idle episode that an
-- `idle` event announced: the event is written to the outbox in the same transaction as
-- the row, and only when this transaction wrote it, so several replicas and restarts
-- announce each episode once. When a GPU of the placement is seen busy again, ended_at
-- is that busy record's time; a new episode is announced only if it began after it (a
-- replica that has not read the busy record yet cannot announce the old one again).
CREATE TABLE idle_placements (
    placement_id  uuid        PRIMARY KEY REFERENCES placements (id) ON DELETE CASCADE,
    idle_since    timestamptz NOT NULL,
    announced_at  timestamptz NOT NULL,
    ended_at      timestamptz
);

-- A namespace's idle policy, set by the admin like its quota. No row: an idle placement
-- is announced and nothing else happens. With one, once the idle event has warned, the
-- placement's lease ends at most idle_lease_s after the warning for as long as the
-- episode lasts (a renewal cannot move it later); it then expires like any lease.
CREATE TABLE idle_policies (
    namespace     text             PRIMARY KEY,
    idle_lease_s  double precision NOT NULL CHECK (idle_lease_s > 0 AND idle_lease_s <= 31536000)
);
