-- Group end: the releases and expiries a replica handled in one turn of its loop, ended
-- by one statement in one transaction (one round trip, one WAL flush), each answered as
-- fairlane_end (0007) answers it. The placements are ended in id order, so that two
-- batches lock their rows in the same order and cannot deadlock; the same id twice is
-- ended once and then reported as ended before, as two statements would. One row per
-- element that fairlane_end answers (none for no such placement), i from 1.
CREATE FUNCTION fairlane_end_batch(
    p_ids uuid[], p_states text[], p_ended timestamptz[], p_ts_ms bigint[],
    p_reasons text[], p_namespaces text[])
RETURNS TABLE (i bigint, ended boolean, placement placements)
LANGUAGE plpgsql AS $$
DECLARE
    k bigint;
BEGIN
    FOR k IN SELECT u.o FROM unnest(p_ids) WITH ORDINALITY AS u(id, o) ORDER BY u.id, u.o
    LOOP
        RETURN QUERY SELECT k, e.ended, e.placement
          FROM fairlane_end(p_ids[k], p_states[k], p_ended[k], p_ts_ms[k], p_reasons[k],
                            p_namespaces[k]) AS e;
    END LOOP;
END $$;
