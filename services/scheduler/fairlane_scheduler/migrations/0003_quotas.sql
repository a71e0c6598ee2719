-- Quotas per namespace: GPUs held at once, optionally per GPU model (catalogue keys).
-- No row: no limit. Allocations remember their namespace and model so that usage is
-- counted inside the same transaction that places, under the quota row's lock.

CREATE TABLE quotas (
    namespace           text    PRIMARY KEY,
    max_gpus            integer CHECK (max_gpus >= 0),
    max_gpus_per_model  jsonb   NOT NULL DEFAULT '{}'
);

ALTER TABLE allocations ADD COLUMN namespace text NOT NULL DEFAULT '';
ALTER TABLE allocations ADD COLUMN model text NOT NULL DEFAULT '';

CREATE INDEX allocations_live_namespace ON allocations (namespace) WHERE live;
