-- Each slow GPU of a running placement that a `degraded` event announced, by source
-- (learned speed or score): the event is written to the outbox in the same transaction
-- as these rows, and only for rows this transaction inserted, so several replicas and
-- restarts announce each (placement, GPU, source) once (issue 27).
CREATE TABLE degraded_gpus (
    placement_id  uuid             NOT NULL REFERENCES placements (id) ON DELETE CASCADE,
    gpu_uuid      text             NOT NULL,
    source        text             NOT NULL CHECK (source IN ('learned', 'score')),
    speed         double precision NOT NULL,
    announced_at  timestamptz      NOT NULL,
    PRIMARY KEY (placement_id, gpu_uuid, source)
);
