-- Two replicas' batches no longer deadlock on each other. fairlane_place_many (0011)
-- inserted a batch's rows in the order the scheduler decided them, so a batch of one
-- replica could take node n1's port and GPUs and then wait for n2's, while another's
-- held n2's and waited for n1's: Postgres found the cycle after deadlock_timeout (1 s
-- by default), rolled one back whole and its placements were retried, a second late.
-- With three replicas on one Postgres that was the benchmark's p99 (docs/benchmarks.md,
-- "Three replicas"). Now every batch takes its contended rows in one order, whatever
-- the order of its placements: the placements (unique MASTER_PORT per node) by master
-- node and port, the allocations (unique live GPU) by node and GPU. A batch then only
-- ever waits for a row ordered after every row it holds, so no cycle can form between
-- batches of single-node placements. (A multi-node gang's GPUs on other nodes than its
-- master can still close one; Postgres then breaks it as before.)
--
-- When the batch cannot be written set-based (a quota applies, a proposed port is
-- taken) or a row of it conflicted, it goes placement by placement in the same order,
-- each in a subtransaction of its own as fairlane_place_batch (0008) did, now from the
-- arrays directly instead of a JSON copy of the batch, and at once: 0011 first tried
-- such a batch in one subtransaction and, on a conflict, wrote it all again; the
-- answers are the same either way. They stay in the batch's order; only the order of
-- the batch's rows and outbox events in that path follows the nodes.
-- fairlane_place_batch stays for replicas of older releases.
CREATE OR REPLACE FUNCTION fairlane_place_many(
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
    in_order integer[] := ARRAY(
        SELECT u.k FROM unnest(p_masters, p_ports) WITH ORDINALITY AS u(master, port, k)
         ORDER BY u.master, u.port, u.k);
    k integer;
    lo integer;  -- where placement k's allocations start
    o text;
    pt integer;
    d jsonb;
    written uuid[];
BEGIN
    IF fairlane_batch_is_plain(p_namespaces, p_job_ids, p_states, p_masters, p_ports) THEN
        BEGIN
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
                 ORDER BY b.master, b.port, b.k
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
             WHERE p_states[j] = 'placed' AND p_ids[j] = ANY (written)
             ORDER BY p_nodes[a], p_gpus[a];
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
        EXCEPTION WHEN unique_violation THEN
            NULL;  -- rolled back whole: placement by placement, below
        END;
    END IF;
    outcomes := array_fill(NULL::text, ARRAY[n]);
    ports := array_fill(NULL::integer, ARRAY[n]);
    details := array_fill(NULL::jsonb, ARRAY[n]);
    FOREACH k IN ARRAY in_order LOOP
        lo := CASE WHEN k = 1 THEN 1 ELSE p_ends[k - 1] + 1 END;
        BEGIN
            SELECT f.outcome, f.port, f.detail INTO o, pt, d
              FROM fairlane_place(
                  p_ids[k], p_namespaces[k], p_job_ids[k], p_requests[k], p_shas[k],
                  p_states[k], p_created[k], p_leases[k], p_priorities[k], p_fallbacks[k],
                  p_masters[k], p_ports[k], p_first, p_last, p_assignments[k],
                  p_payloads[k], p_gpus[lo:p_ends[k]], p_nodes[lo:p_ends[k]],
                  p_indices[lo:p_ends[k]], p_scores[lo:p_ends[k]],
                  p_models[lo:p_ends[k]]) AS f;
        EXCEPTION WHEN unique_violation THEN
            o := 'conflict';
            pt := NULL;
            d := NULL;
        END;
        outcomes[k] := o;
        ports[k] := pt;
        details[k] := d;
    END LOOP;
END $$;
