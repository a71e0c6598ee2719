-- The MASTER_PORT check of every placement, cheaper: fairlane_free_port (0007) judged
-- all 501 ports of the range and sorted them to return the scheduler's hint, which is
-- free nearly always (its view keeps the ports of live placements): 0.28 ms of Postgres
-- CPU a placement, a third of what a placement and its release cost Postgres in the
-- benchmark. Now the hint is probed alone (one index lookup) and the range is searched
-- only when another replica took it. Same answers: the hint when no live placement
-- holds it on p_master, else the lowest free port of the range, NULL when none is.
CREATE OR REPLACE FUNCTION fairlane_free_port(
    p_master text, p_hint integer, p_first integer, p_last integer)
RETURNS integer LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM placements
                    WHERE state = 'placed' AND master_node = p_master AND master_port = p_hint)
    THEN
        RETURN p_hint;
    END IF;
    RETURN (SELECT s FROM generate_series(p_first, p_last) AS s
             WHERE NOT EXISTS (SELECT 1 FROM placements
                                WHERE state = 'placed' AND master_node = p_master
                                  AND master_port = s)
             ORDER BY s LIMIT 1);
END $$;
