-- Fractional GPUs (issue 29): a placement may hold a share of one GPU (compute in
-- thousandths, share_milli 1..1000, and memory in MiB). The database stays the arbiter
-- across replicas: gpu_shares keeps, per GPU, the sum of its live allocations' shares
-- and memory, and its CHECK constraints refuse a sum above a whole GPU (1000) or above
-- the GPU's memory. A whole-GPU allocation counts 1000 (so nothing shares its GPU, and
-- it takes no GPU that has a fractional tenant); its memory is the GPU's, which 1000
-- already reserves, so it adds none to the memory sum.
--
-- Statement triggers keep the sums, set-based over the statement's rows (transition
-- tables): one upsert per allocation statement, never a round trip of the scheduler.
-- The upsert takes each GPU's row in node and GPU order, as 0012 inserts allocations,
-- so concurrent transactions serialise on the row and cannot close a cycle over it.
-- Refused sums are raised as unique_violation (23505): the lost race the placement
-- functions already catch (0012's batch falls back placement by placement) and the
-- scheduler retries, as it does for a GPU another replica took.

ALTER TABLE allocations
    ADD COLUMN share_milli integer NOT NULL DEFAULT 1000
        CONSTRAINT allocations_share_milli CHECK (share_milli BETWEEN 1 AND 1000),
    ADD COLUMN memory_mib integer CONSTRAINT allocations_memory_mib CHECK (memory_mib >= 1),
    ADD COLUMN gpu_memory_mib integer
        CONSTRAINT allocations_gpu_memory_mib CHECK (gpu_memory_mib >= 1);

CREATE TABLE gpu_shares (
    gpu_uuid        text    PRIMARY KEY,
    share_milli     integer NOT NULL
        CONSTRAINT gpu_shares_share_fits CHECK (share_milli BETWEEN 0 AND 1000),
    memory_mib      bigint  NOT NULL CONSTRAINT gpu_shares_memory_used CHECK (memory_mib >= 0),
    gpu_memory_mib  integer,  -- the GPU's memory, from its fractional allocations
    CONSTRAINT gpu_shares_memory_fits CHECK (memory_mib <= gpu_memory_mib)
);

INSERT INTO gpu_shares (gpu_uuid, share_milli, memory_mib)
SELECT gpu_uuid, sum(share_milli), 0 FROM allocations WHERE live GROUP BY gpu_uuid;

-- Two whole placements of one GPU still meet this index first (as before 0015); the
-- ledger refuses every other over-commit. The second finds a GPU's live allocations,
-- whole or shared, as the dropped index did (the store's live_holding).
DROP INDEX allocations_one_live_per_gpu;
CREATE UNIQUE INDEX allocations_one_live_whole_per_gpu
    ON allocations (gpu_uuid) WHERE live AND share_milli = 1000;
CREATE INDEX allocations_live_gpu ON allocations (gpu_uuid) WHERE live;

CREATE FUNCTION fairlane_take_shares() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    wanted integer;
    taken integer;
BEGIN
    WITH asks AS (
        SELECT a.gpu_uuid, min(a.node) AS node, sum(a.share_milli)::integer AS share_milli,
               coalesce(sum(a.memory_mib), 0) AS memory_mib,
               max(a.gpu_memory_mib) AS gpu_memory_mib
          FROM new_allocations AS a WHERE a.live GROUP BY a.gpu_uuid),
    upserted AS (
        INSERT INTO gpu_shares AS s (gpu_uuid, share_milli, memory_mib, gpu_memory_mib)
        SELECT q.gpu_uuid, q.share_milli, q.memory_mib, q.gpu_memory_mib
          FROM asks AS q ORDER BY q.node, q.gpu_uuid
        ON CONFLICT (gpu_uuid) DO UPDATE
           SET share_milli = s.share_milli + excluded.share_milli,
               memory_mib = s.memory_mib + excluded.memory_mib,
               gpu_memory_mib = coalesce(excluded.gpu_memory_mib, s.gpu_memory_mib)
         WHERE s.share_milli + excluded.share_milli <= 1000
           AND (coalesce(excluded.gpu_memory_mib, s.gpu_memory_mib) IS NULL
                OR s.memory_mib + excluded.memory_mib
                   <= coalesce(excluded.gpu_memory_mib, s.gpu_memory_mib))
        RETURNING 1)
    SELECT (SELECT count(*) FROM asks), (SELECT count(*) FROM upserted) INTO wanted, taken;
    IF taken < wanted THEN
        RAISE unique_violation USING
            MESSAGE = 'a GPU''s live shares would pass a whole GPU or its memory',
            CONSTRAINT = 'gpu_shares_share_fits', TABLE = 'gpu_shares';
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION fairlane_free_shares() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    WITH freed AS (
        SELECT o.gpu_uuid, min(o.node) AS node, sum(o.share_milli)::integer AS share_milli,
               coalesce(sum(o.memory_mib), 0) AS memory_mib
          FROM old_allocations AS o
          LEFT JOIN new_allocations AS n USING (placement_id, gpu_uuid)
         WHERE o.live AND NOT coalesce(n.live, false)
         GROUP BY o.gpu_uuid),
    locked AS (
        SELECT s.gpu_uuid FROM gpu_shares AS s JOIN freed AS f USING (gpu_uuid)
         ORDER BY f.node, s.gpu_uuid FOR UPDATE OF s)
    UPDATE gpu_shares AS s
       SET share_milli = s.share_milli - f.share_milli, memory_mib = s.memory_mib - f.memory_mib
      FROM freed AS f
     WHERE s.gpu_uuid = f.gpu_uuid AND s.gpu_uuid IN (SELECT gpu_uuid FROM locked);
    RETURN NULL;
END $$;

CREATE TRIGGER allocations_take_shares AFTER INSERT ON allocations
    REFERENCING NEW TABLE AS new_allocations
    FOR EACH STATEMENT EXECUTE FUNCTION fairlane_take_shares();
CREATE TRIGGER allocations_free_shares AFTER UPDATE ON allocations
    REFERENCING OLD TABLE AS old_allocations NEW TABLE AS new_allocations
    FOR EACH STATEMENT EXECUTE FUNCTION fairlane_free_shares();
-- A DELETE (a placement deleted, its allocations with it) frees the live ones too; the
-- function reads an empty new_allocations then.
CREATE FUNCTION fairlane_free_deleted_shares() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE gpu_shares AS s
       SET share_milli = s.share_milli - f.share_milli, memory_mib = s.memory_mib - f.memory_mib
      FROM (SELECT o.gpu_uuid, sum(o.share_milli)::integer AS share_milli,
                   coalesce(sum(o.memory_mib), 0) AS memory_mib
              FROM old_allocations AS o WHERE o.live GROUP BY o.gpu_uuid) AS f
     WHERE s.gpu_uuid = f.gpu_uuid;
    RETURN NULL;
END $$;
CREATE TRIGGER allocations_free_deleted_shares AFTER DELETE ON allocations
    REFERENCING OLD TABLE AS old_allocations
    FOR EACH STATEMENT EXECUTE FUNCTION fairlane_free_deleted_shares();

-- Quotas count shares: a live allocation holds share_milli / 1000 of a GPU of its
-- model, and each GPU a placement asks for p_milli / 1000 (0007's function asks 1000).
CREATE FUNCTION fairlane_quota_refusal_milli(p_namespace text, p_models text[], p_milli integer)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    q quotas%ROWTYPE;
    used jsonb;
    used_total numeric;
BEGIN
    SELECT * INTO q FROM quotas WHERE namespace = p_namespace FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT coalesce(jsonb_object_agg(model, n), '{}'), coalesce(sum(n), 0)
      INTO used, used_total
      FROM (SELECT model, sum(share_milli) / 1000.0 AS n FROM allocations
             WHERE live AND namespace = p_namespace GROUP BY model) AS u;
    IF (q.max_gpus IS NOT NULL
        AND used_total + cardinality(p_models) * p_milli / 1000.0 > q.max_gpus)
       OR EXISTS (
           SELECT 1 FROM (SELECT m, count(*) * p_milli / 1000.0 AS n
                            FROM unnest(p_models) AS m GROUP BY m) AS w
            WHERE q.max_gpus_per_model ? w.m
              AND coalesce((used ->> w.m)::numeric, 0) + w.n
                  > (q.max_gpus_per_model ->> w.m)::numeric) THEN
        RETURN jsonb_build_object(
            'max_gpus', q.max_gpus, 'max_gpus_per_model', q.max_gpus_per_model, 'used', used);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION fairlane_quota_refusal(p_namespace text, p_models text[])
RETURNS jsonb LANGUAGE sql AS $$
    SELECT fairlane_quota_refusal_milli(p_namespace, p_models, 1000)
$$;

-- The one allocation of a fractional placement, with its share and memory: the
-- triggers above add it to its GPU's sums, or refuse it.
CREATE FUNCTION fairlane_allocate_share(
    p_id uuid, p_namespace text, p_gpu text, p_node text, p_index integer,
    p_score double precision, p_model text, p_share_milli integer, p_memory_mib integer,
    p_gpu_memory_mib integer)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO allocations (placement_id, node, gpu_uuid, gpu_index, score, namespace, model,
                             share_milli, memory_mib, gpu_memory_mib)
    VALUES (p_id, p_node, p_gpu, p_index, p_score, p_namespace, p_model, p_share_milli,
            p_memory_mib, p_gpu_memory_mib)
$$;

-- A fractional placement: one share of one GPU. fairlane_place (0007) checks the job id
-- and the port and writes the placement and its event; its own quota check is handed
-- no GPUs (the share's is judged first, here, under the same quota row lock), and the
-- one allocation is inserted here with its share and memory, so the triggers above
-- judge it. Outcomes as fairlane_place's.
CREATE FUNCTION fairlane_place_share(
    p_id uuid, p_namespace text, p_job_id text, p_request jsonb, p_sha text,
    p_created timestamptz, p_lease timestamptz, p_priority integer, p_fallback boolean,
    p_master text, p_port integer, p_first integer, p_last integer, p_assignment jsonb,
    p_payload jsonb, p_gpu text, p_node text, p_index integer, p_score double precision,
    p_model text, p_share_milli integer, p_memory_mib integer, p_gpu_memory_mib integer,
    OUT outcome text, OUT port integer, OUT detail jsonb, OUT assignment jsonb)
LANGUAGE plpgsql AS $$
BEGIN
    detail := fairlane_quota_refusal_milli(p_namespace, ARRAY[p_model], p_share_milli);
    IF detail IS NOT NULL THEN
        outcome := 'quota';
        RETURN;
    END IF;
    SELECT * INTO outcome, port, detail, assignment FROM fairlane_place(
        p_id, p_namespace, p_job_id, p_request, p_sha, 'placed', p_created, p_lease,
        p_priority, p_fallback, p_master, p_port, p_first, p_last, p_assignment, p_payload,
        '{}', '{}', '{}', '{}', '{}');
    IF outcome = 'created' THEN
        PERFORM fairlane_allocate_share(p_id, p_namespace, p_gpu, p_node, p_index, p_score,
                                        p_model, p_share_milli, p_memory_mib, p_gpu_memory_mib);
    END IF;
END $$;

-- A pending fractional placement given its share: fairlane_promote (0007) with no GPUs,
-- then the share's allocation, as fairlane_place_share does. Outcomes as fairlane_promote's.
CREATE FUNCTION fairlane_promote_share(
    p_id uuid, p_namespace text, p_placed timestamptz, p_lease timestamptz,
    p_fallback boolean, p_master text, p_port integer, p_first integer, p_last integer,
    p_assignment jsonb, p_payload jsonb, p_gpu text, p_node text, p_index integer,
    p_score double precision, p_model text, p_share_milli integer, p_memory_mib integer,
    p_gpu_memory_mib integer,
    OUT outcome text, OUT port integer, OUT detail jsonb, OUT assignment jsonb)
LANGUAGE plpgsql AS $$
BEGIN
    detail := fairlane_quota_refusal_milli(p_namespace, ARRAY[p_model], p_share_milli);
    IF detail IS NOT NULL THEN
        outcome := 'quota';
        RETURN;
    END IF;
    SELECT * INTO outcome, port, detail, assignment FROM fairlane_promote(
        p_id, p_namespace, p_placed, p_lease, p_fallback, p_master, p_port, p_first, p_last,
        p_assignment, p_payload, '{}', '{}', '{}', '{}', '{}');
    IF outcome = 'created' THEN
        PERFORM fairlane_allocate_share(p_id, p_namespace, p_gpu, p_node, p_index, p_score,
                                        p_model, p_share_milli, p_memory_mib, p_gpu_memory_mib);
    END IF;
END $$;
