-- Group commit: the placements a replica decided together, written by one statement in
-- one transaction (one round trip, one WAL flush), each still judged on its own.
-- p_batch is a JSON array with one element per placement: the arguments of
-- fairlane_place (0007) in its order, p_first and p_last left out (the batch shares
-- them). Each placement runs in a subtransaction: a GPU or a port another placement
-- holds (the unique indexes of 0001) rolls back that placement alone, answered
-- 'conflict', and the others commit. One row per element, in order (i from 1).
CREATE FUNCTION fairlane_place_batch(p_batch jsonb, p_first integer, p_last integer)
RETURNS TABLE (i bigint, outcome text, port integer, detail jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    e jsonb;
BEGIN
    FOR e, i IN SELECT value, ordinality FROM jsonb_array_elements(p_batch) WITH ORDINALITY
    LOOP
        BEGIN
            SELECT f.outcome, f.port, f.detail INTO outcome, port, detail
              FROM fairlane_place(
                  (e->>0)::uuid, e->>1, e->>2, (e->>3)::jsonb, e->>4, e->>5,
                  (e->>6)::timestamptz, (e->>7)::timestamptz, (e->>8)::integer,
                  (e->>9)::boolean, e->>10, (e->>11)::integer, p_first, p_last,
                  (e->>12)::jsonb, (e->>13)::jsonb,
                  ARRAY(SELECT jsonb_array_elements_text(e->14)),
                  ARRAY(SELECT jsonb_array_elements_text(e->15)),
                  ARRAY(SELECT x::integer FROM jsonb_array_elements_text(e->16) AS x),
                  ARRAY(SELECT x::double precision FROM jsonb_array_elements_text(e->17) AS x),
                  ARRAY(SELECT jsonb_array_elements_text(e->18))) AS f;
        EXCEPTION WHEN unique_violation THEN
            outcome := 'conflict';
            port := NULL;
            detail := NULL;
        END;
        RETURN NEXT;
    END LOOP;
END $$;
