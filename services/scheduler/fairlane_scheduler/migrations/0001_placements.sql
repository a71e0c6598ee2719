-- Placements and their GPU allocations. The database, not application code, forbids
-- two live allocations of one GPU and two live placements of one port on a node, so
-- any number of scheduler replicas can share this database.

CREATE TABLE placements (
    id              uuid        PRIMARY KEY,
    namespace       text        NOT NULL,
    job_id          text        NOT NULL,
    request         jsonb       NOT NULL,
    request_sha256  text        NOT NULL,
    state           text        NOT NULL CHECK (state IN ('placed', 'released', 'expired', 'failed')),
    master_node     text        NOT NULL,
    master_port     integer     NOT NULL CHECK (master_port BETWEEN 1 AND 65535),
    assignment      jsonb       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    ended_at        timestamptz,
    UNIQUE (namespace, job_id)
);

CREATE UNIQUE INDEX placements_one_live_port_per_node
    ON placements (master_node, master_port) WHERE state = 'placed';

CREATE TABLE allocations (
    placement_id  uuid             NOT NULL REFERENCES placements (id) ON DELETE CASCADE,
    node          text             NOT NULL,
    gpu_uuid      text             NOT NULL,
    gpu_index     integer          NOT NULL,
    score         double precision NOT NULL,
    live          boolean          NOT NULL DEFAULT true,
    PRIMARY KEY (placement_id, gpu_uuid)
);

CREATE UNIQUE INDEX allocations_one_live_per_gpu ON allocations (gpu_uuid) WHERE live;
