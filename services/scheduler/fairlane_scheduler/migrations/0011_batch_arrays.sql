-- Group commit, cheaper for Postgres and for the scheduler. fairlane_place_batch (0008)
-- ran every placement of a batch in a subtransaction of its own (a savepoint, a
-- subtransaction id, its own entry in the commit record) and took its arguments as one
-- JSON document that it parsed and unpacked element by element; fairlane_end_batch
-- (0009) ran three statements per release. Now:
--
-- * fairlane_place_many takes one array per column (one element per placement; the
--   allocations of all placements flattened, with where each placement's end) and
--   writes the batch in ONE subtransaction. If a unique index refuses any row (a GPU
--   or a port another replica took since the scheduler decided), that subtransaction
--   rolls back and the batch is written again the old way, each placement in its own,
--   so that only the placement that lost its race is refused ('conflict') and the
--   others commit: the same answers and rows as fairlane_place_batch, in either path.
--   The unique indexes of 0001 stay the arbiter.
-- * fairlane_end_many ends a batch of releases with one statement per table (lock the
--   placements in id order, so that two batches cannot deadlock; end them; free their
--   allocations; write their events), answering each as fairlane_end (0007) would.
--
-- fairlane_place_batch and fairlane_end_batch stay for replicas of the previous
-- release during a rolling upgrade.

-- Whether a batch may be written set-based: no quota applies to it (a quota judges
-- each placement on those before it), no job id twice, and every proposed port free
-- (else the database picks one, placement by placement).
CREATE FUNCTION fairlane_batch_is_plain(
    p_namespaces text[], p_job_ids text[], p_states text[], p_masters text[],
    p_ports integer[])
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (SELECT 1 FROM quotas WHERE namespace = ANY (p_namespaces))
       AND (SELECT count(DISTINCT (u.ns, u.job)) FROM unnest(p_namespaces, p_job_ids) AS u(ns, job))
           = cardinality(p_job_ids)
       AND NOT EXISTS (
           SELECT 1 FROM unnest(p_states, p_masters, p_ports) AS u(st, master, port)
             JOIN placements AS x
               ON x.state = 'placed' AND x.master_node = u.master AND x.master_port = u.port
            WHERE u.st = 'placed')
$$;

-- The new placements of a batch in one statement, in one subtransaction while no row
-- conflicts. One row: the outcome, port and detail of each placement, in order, as
-- fairlane_place (0007) answers them; 'conflict': a GPU or port another placement holds.
-- The allocations of placement k are elements p_ends[k-1]+1 .. p_ends[k] of p_gpus,
-- p_nodes, p_indices, p_scores and p_models.
CREATE FUNCTION fairlane_place_many(
    p_ids uuid[], p_namespaces text[], p_job_ids text[], p_requests jsonb[],
    p_shas text[], p_states text[], p_created timestamptz[], p_leases timestamptz[],
    p_priorities integer[], p_fallbacks boolean[], p_masters text[], p_ports integer[],
    p_first integer, p_last integer, p_assignments jsonb[], p_payloads jsonb[],
    p_ends integer[], p_gpus text[], p_nodes text[], p_indices integer[],
    p_scores double precision[], p_models text[],
    OUT outcomes text[], OUT ports integer[], OUT details jsonb[])
LANGUAGE plpgsql AS $$
DECLARE
    n integer := cardinality(p_ids);
    k integer;
    lo integer := 1;  -- where placement k's allocations start
    o text;
    pt integer;
    d jsonb;
    written uuid[];
BEGIN
    outcomes := '{}';
    ports := '{}';
    details := '{}';
    BEGIN
        IF fairlane_batch_is_plain(p_namespaces, p_job_ids, p_states, p_masters, p_ports) THEN
            -- One statement per table. A job id another request committed is skipped
            -- ('exists'); a GPU or port taken meanwhile raises unique_violation.
            WITH ins AS (
                INSERT INTO placements (id, namespace, job_id, request, request_sha256,
                                        state, master_node, master_port, assignment,
                                        created_at, lease_expires_at, priority, placed_at,
                                        fallback)
                SELECT b.id, b.ns, b.job, b.req, b.sha, b.st, b.master,
                       CASE WHEN b.st = 'placed' THEN b.port END, b.asg, b.created,
                       b.lease, b.prio, CASE WHEN b.st = 'placed' THEN b.created END, b.fb
                  FROM unnest(p_ids, p_namespaces, p_job_ids, p_requests, p_shas, p_states,
                              p_created, p_leases, p_priorities, p_fallbacks, p_masters,
                              p_ports, p_assignments)
                       WITH ORDINALITY AS b(id, ns, job, req, sha, st, created, lease, prio,
                                            fb, master, port, asg, k)
                 ORDER BY b.k
                ON CONFLICT (namespace, job_id) DO NOTHING
                RETURNING id)
            SELECT coalesce(array_agg(ins.id), '{}') INTO written FROM ins;
            INSERT INTO allocations (placement_id, node, gpu_uuid, gpu_index, score,
                                     namespace, model)
            SELECT p_ids[j], p_nodes[a], p_gpus[a], p_indices[a], p_scores[a],
                   p_namespaces[j], p_models[a]
              FROM generate_series(1, n) AS j,
                   generate_series(CASE WHEN j = 1 THEN 1 ELSE p_ends[j - 1] + 1 END,
                                   p_ends[j]) AS a
             WHERE p_states[j] = 'placed' AND p_ids[j] = ANY (written);
            INSERT INTO outbox (placement_id, payload)
            SELECT p_ids[j], CASE WHEN p_states[j] = 'placed'
                                  THEN jsonb_set(p_payloads[j], '{nodes}', p_assignments[j])
                                  ELSE p_payloads[j] END
              FROM generate_series(1, n) AS j
             WHERE p_ids[j] = ANY (written) ORDER BY j;
            SELECT array_agg(CASE WHEN p_ids[j] <> ALL (written) THEN 'exists'
                                  WHEN p_states[j] = 'placed' THEN 'created'
                                  ELSE 'pending' END ORDER BY j),
                   array_agg(CASE WHEN p_ids[j] = ANY (written) AND p_states[j] = 'placed'
                                  THEN p_ports[j] END ORDER BY j),
                   array_fill(NULL::jsonb, ARRAY[n])
              INTO outcomes, ports, details
              FROM generate_series(1, n) AS j;
            RETURN;
        END IF;
        FOR k IN 1 .. n LOOP
            SELECT f.outcome, f.port, f.detail INTO o, pt, d
              FROM fairlane_place(
                  p_ids[k], p_namespaces[k], p_job_ids[k], p_requests[k], p_shas[k],
                  p_states[k], p_created[k], p_leases[k], p_priorities[k], p_fallbacks[k],
                  p_masters[k], p_ports[k], p_first, p_last, p_assignments[k],
                  p_payloads[k], p_gpus[lo:p_ends[k]], p_nodes[lo:p_ends[k]],
                  p_indices[lo:p_ends[k]], p_scores[lo:p_ends[k]],
                  p_models[lo:p_ends[k]]) AS f;
            outcomes := outcomes || o;
            ports := ports || pt;
            details := details || d;
            lo := p_ends[k] + 1;
        END LOOP;
    EXCEPTION WHEN unique_violation THEN
        -- Rolled back whole: the batch again, each placement in a subtransaction of
        -- its own (0008), so that only the one that lost its race is refused.
        SELECT array_agg(b.outcome ORDER BY b.i), array_agg(b.port ORDER BY b.i),
               array_agg(b.detail ORDER BY b.i)
          INTO outcomes, ports, details
          FROM fairlane_place_batch((
              SELECT jsonb_agg(jsonb_build_array(
                         p_ids[j], p_namespaces[j], p_job_ids[j], p_requests[j],
                         p_shas[j], p_states[j], p_created[j], p_leases[j],
                         p_priorities[j], p_fallbacks[j], p_masters[j], p_ports[j],
                         p_assignments[j], p_payloads[j],
                         to_jsonb(p_gpus[s.lo:p_ends[j]]), to_jsonb(p_nodes[s.lo:p_ends[j]]),
                         to_jsonb(p_indices[s.lo:p_ends[j]]),
                         to_jsonb(p_scores[s.lo:p_ends[j]]),
                         to_jsonb(p_models[s.lo:p_ends[j]])) ORDER BY j)
                FROM generate_series(1, cardinality(p_ids)) AS j,
                     LATERAL (SELECT CASE WHEN j = 1 THEN 1 ELSE p_ends[j - 1] + 1 END
                                  AS lo) AS s),
              p_first, p_last) AS b;
    END;
END $$;

-- The endings of a batch, set-based. One row per element that fairlane_end would
-- answer (none for no such placement in its namespace), i from 1; the same id twice is
-- ended by the first that may end it and then reported as ended before. The row holds
-- the placement's columns that its answer needs (not the request: the scheduler would
-- decode it to drop it).
CREATE FUNCTION fairlane_end_many(
    p_ids uuid[], p_states text[], p_ended timestamptz[], p_ts_ms bigint[],
    p_reasons text[], p_namespaces text[])
RETURNS TABLE (
    i bigint, ended boolean, id uuid, job_id text, namespace text, state text,
    created_at timestamptz, assignment jsonb, request_sha256 text,
    lease_expires_at timestamptz, ended_at timestamptz, fallback boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM 1 FROM placements AS x WHERE x.id = ANY (p_ids) ORDER BY x.id FOR UPDATE;
    RETURN QUERY
    WITH req AS (
        SELECT u.id, u.o, p_states[u.o] AS st, p_ended[u.o] AS at, p_ts_ms[u.o] AS ts,
               p_reasons[u.o] AS why, p_namespaces[u.o] AS ns
          FROM unnest(p_ids) WITH ORDINALITY AS u(id, o)),
    firsts AS (
        SELECT DISTINCT ON (r.id) r.*
          FROM req AS r JOIN placements AS x ON x.id = r.id
         WHERE x.state IN ('pending', 'placed') AND (r.ns IS NULL OR x.namespace = r.ns)
         ORDER BY r.id, r.o),
    done AS (
        UPDATE placements AS x SET state = f.st, ended_at = f.at
          FROM firsts AS f WHERE x.id = f.id
        RETURNING x AS p, f.o, f.ts, f.why),
    freed AS (
        UPDATE allocations AS a SET live = false
          FROM done WHERE a.placement_id = (done.p).id AND a.live),
    events AS (
        INSERT INTO outbox (placement_id, payload)
        SELECT (d.p).id, jsonb_build_object(
                   'schema', 'placement/1', 'placement_id', (d.p).id::text,
                   'job_id', (d.p).job_id, 'namespace', (d.p).namespace,
                   'event', (d.p).state, 'ts_ms', d.ts, 'nodes', (d.p).assignment,
                   'reason', d.why)
          FROM done AS d ORDER BY (d.p).id)
    SELECT q.o, q.ended, (q.p).id, (q.p).job_id, (q.p).namespace, (q.p).state,
           (q.p).created_at, (q.p).assignment, (q.p).request_sha256,
           (q.p).lease_expires_at, (q.p).ended_at, (q.p).fallback
      FROM (SELECT r.o, coalesce(r.o = d.o, false) AS ended, coalesce(d.p, x) AS p
              FROM req AS r
              LEFT JOIN done AS d ON (d.p).id = r.id
              LEFT JOIN placements AS x ON x.id = r.id
             WHERE (d.o IS NOT NULL OR x.id IS NOT NULL)
               AND (r.ns IS NULL OR coalesce((d.p).namespace, x.namespace) = r.ns)) AS q
     ORDER BY q.o;
END $$;
