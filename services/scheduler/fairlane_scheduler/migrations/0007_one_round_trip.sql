-- One round trip per placement and per release: server-side functions that do in one
-- statement what the scheduler did in a dozen. The scheduler decides on its in-memory
-- view; these functions still check everything that matters against the committed rows
-- (the job id, the quota under its row lock, the port) and the unique indexes of 0001
-- still forbid two live allocations of one GPU and two live placements of one port,
-- whatever any replica's view says.
--
-- No NOTIFY: a transaction that notifies takes a database-wide lock from its commit
-- until it ends, fsync included, so notifying writes commit one at a time (no group
-- commit; about 50 placements/s on the development VM). The outbox relay polls instead.

-- Why a namespace may not take GPUs of these models now: NULL when they fit, else its
-- quota and what it holds (the scheduler words the refusal). Locks the quota row, so a
-- namespace's placements are serialised until the transaction ends.
CREATE FUNCTION fairlane_quota_refusal(p_namespace text, p_models text[]) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    q quotas%ROWTYPE;
    used jsonb;
    used_total integer;
BEGIN
    SELECT * INTO q FROM quotas WHERE namespace = p_namespace FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT coalesce(jsonb_object_agg(model, n), '{}'), coalesce(sum(n), 0)::integer
      INTO used, used_total
      FROM (SELECT model, count(*) AS n FROM allocations
             WHERE live AND namespace = p_namespace GROUP BY model) AS u;
    IF (q.max_gpus IS NOT NULL AND used_total + cardinality(p_models) > q.max_gpus)
       OR EXISTS (
           SELECT 1 FROM (SELECT m, count(*) AS n FROM unnest(p_models) AS m GROUP BY m) AS w
            WHERE q.max_gpus_per_model ? w.m
              AND coalesce((used ->> w.m)::integer, 0) + w.n
                  > (q.max_gpus_per_model ->> w.m)::integer) THEN
        RETURN jsonb_build_object(
            'max_gpus', q.max_gpus, 'max_gpus_per_model', q.max_gpus_per_model, 'used', used);
    END IF;
    RETURN NULL;
END $$;

-- The MASTER_PORT for a placement on p_master: p_hint (the scheduler's choice) when no
-- live placement holds it there, else the lowest free one in the range; NULL: none free.
CREATE FUNCTION fairlane_free_port(p_master text, p_hint integer, p_first integer, p_last integer)
RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT port FROM (
        SELECT p_hint AS port, 0 AS pref
        UNION ALL
        SELECT s, 1 FROM generate_series(p_first, p_last) AS s) AS c
     WHERE NOT EXISTS (SELECT 1 FROM placements
                        WHERE state = 'placed' AND master_node = p_master AND master_port = c.port)
     ORDER BY pref, port LIMIT 1
$$;

-- Before a placement takes GPUs: may the namespace have them (quota), and which port on
-- the master node is free. Outcomes: ('ok', port, NULL, the assignment with that port),
-- ('quota', NULL, why), ('no_port').
CREATE FUNCTION fairlane_admit(
    p_namespace text, p_models text[], p_master text, p_port integer, p_first integer,
    p_last integer, p_assignment jsonb,
    OUT outcome text, OUT port integer, OUT detail jsonb, OUT assignment jsonb)
LANGUAGE plpgsql AS $$
BEGIN
    detail := fairlane_quota_refusal(p_namespace, p_models);
    IF detail IS NOT NULL THEN
        outcome := 'quota';
        RETURN;
    END IF;
    port := fairlane_free_port(p_master, p_port, p_first, p_last);
    IF port IS NULL THEN
        outcome := 'no_port';
        RETURN;
    END IF;
    assignment := p_assignment;
    IF port <> p_port THEN  -- another replica took the scheduler's choice meanwhile
        SELECT jsonb_agg(e || jsonb_build_object('master_port', port) ORDER BY i)
          INTO assignment FROM jsonb_array_elements(p_assignment) WITH ORDINALITY AS t(e, i);
    END IF;
    outcome := 'ok';
END $$;

-- A placed placement's allocations and its event. A GPU another live placement holds
-- raises unique_violation (23505), which rolls back the whole statement.
CREATE FUNCTION fairlane_allocate(
    p_id uuid, p_namespace text, p_payload jsonb, p_gpus text[], p_nodes text[],
    p_indices integer[], p_scores double precision[], p_models text[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO allocations (placement_id, node, gpu_uuid, gpu_index, score, namespace, model)
    SELECT p_id, n, g, i, s, p_namespace, m
      FROM unnest(p_nodes, p_gpus, p_indices, p_scores, p_models) AS a(n, g, i, s, m);
    INSERT INTO outbox (placement_id, payload) VALUES (p_id, p_payload);
END $$;

-- A new placement, placed or pending, in one statement. Outcomes: 'exists' (the job id
-- is taken in the namespace: the caller reads it, to replay or refuse), 'pending',
-- 'created' (with the port and the assignment as stored), or fairlane_admit's refusals.
CREATE FUNCTION fairlane_place(
    p_id uuid, p_namespace text, p_job_id text, p_request jsonb, p_sha text, p_state text,
    p_created timestamptz, p_lease timestamptz, p_priority integer, p_fallback boolean,
    p_master text, p_port integer, p_first integer, p_last integer, p_assignment jsonb,
    p_payload jsonb, p_gpus text[], p_nodes text[], p_indices integer[],
    p_scores double precision[], p_models text[],
    OUT outcome text, OUT port integer, OUT detail jsonb, OUT assignment jsonb)
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM placements WHERE namespace = p_namespace AND job_id = p_job_id) THEN
        outcome := 'exists';
        RETURN;
    END IF;
    assignment := p_assignment;
    IF p_state = 'placed' THEN
        SELECT * INTO outcome, port, detail, assignment FROM fairlane_admit(
            p_namespace, p_models, p_master, p_port, p_first, p_last, p_assignment);
        IF outcome <> 'ok' THEN
            RETURN;
        END IF;
    END IF;
    INSERT INTO placements (id, namespace, job_id, request, request_sha256, state,
                            master_node, master_port, assignment, created_at,
                            lease_expires_at, priority, placed_at, fallback)
    VALUES (p_id, p_namespace, p_job_id, p_request, p_sha, p_state, p_master, port,
            assignment, p_created, p_lease, p_priority,
            CASE WHEN p_state = 'placed' THEN p_created END, p_fallback)
    ON CONFLICT (namespace, job_id) DO NOTHING;
    IF NOT FOUND THEN  -- the same job id, committed by another request meanwhile
        outcome := 'exists';
        RETURN;
    END IF;
    IF p_state = 'pending' THEN
        INSERT INTO outbox (placement_id, payload) VALUES (p_id, p_payload);
            outcome := 'pending';
        RETURN;
    END IF;
    PERFORM fairlane_allocate(p_id, p_namespace, jsonb_set(p_payload, '{nodes}', assignment),
                              p_gpus, p_nodes, p_indices, p_scores, p_models);
    outcome := 'created';
END $$;

-- Give a pending placement its GPUs, in one statement. Outcomes: 'gone' (no longer
-- pending: placed or cancelled meanwhile), 'created', or fairlane_admit's refusals.
CREATE FUNCTION fairlane_promote(
    p_id uuid, p_namespace text, p_placed timestamptz, p_lease timestamptz,
    p_fallback boolean, p_master text, p_port integer, p_first integer, p_last integer,
    p_assignment jsonb, p_payload jsonb, p_gpus text[], p_nodes text[], p_indices integer[],
    p_scores double precision[], p_models text[],
    OUT outcome text, OUT port integer, OUT detail jsonb, OUT assignment jsonb)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM placements WHERE id = p_id AND state = 'pending' FOR UPDATE;
    IF NOT FOUND THEN
        outcome := 'gone';
        RETURN;
    END IF;
    SELECT * INTO outcome, port, detail, assignment FROM fairlane_admit(
        p_namespace, p_models, p_master, p_port, p_first, p_last, p_assignment);
    IF outcome <> 'ok' THEN
        RETURN;
    END IF;
    UPDATE placements SET state = 'placed', master_node = p_master, master_port = port,
           assignment = fairlane_promote.assignment, lease_expires_at = p_lease,
           placed_at = p_placed, fallback = p_fallback
     WHERE id = p_id;
    PERFORM fairlane_allocate(p_id, p_namespace, jsonb_set(p_payload, '{nodes}', assignment),
                              p_gpus, p_nodes, p_indices, p_scores, p_models);
    outcome := 'created';
END $$;

-- End an open placement (released, expired, failed) and free its GPUs, with its event,
-- in one statement. Returns the placement's row and whether it was ended now; no row
-- when there is no such placement (in p_namespace, when given).
CREATE FUNCTION fairlane_end(
    p_id uuid, p_state text, p_ended timestamptz, p_ts_ms bigint, p_reason text,
    p_namespace text)
RETURNS TABLE (ended boolean, placement placements)
LANGUAGE plpgsql AS $$
DECLARE
    p placements%ROWTYPE;
BEGIN
    UPDATE placements SET state = p_state, ended_at = p_ended
     WHERE id = p_id AND state IN ('pending', 'placed')
       AND (p_namespace IS NULL OR namespace = p_namespace)
    RETURNING * INTO p;
    IF FOUND THEN
        UPDATE allocations SET live = false WHERE placement_id = p_id AND live;
        INSERT INTO outbox (placement_id, payload) VALUES (p_id, jsonb_build_object(
            'schema', 'placement/1', 'placement_id', p.id::text, 'job_id', p.job_id,
            'namespace', p.namespace, 'event', p_state, 'ts_ms', p_ts_ms,
            'nodes', p.assignment, 'reason', p_reason));
            RETURN QUERY SELECT true, p;
        RETURN;
    END IF;
    RETURN QUERY SELECT false, x FROM placements AS x
     WHERE x.id = p_id AND (p_namespace IS NULL OR x.namespace = p_namespace);
END $$;
