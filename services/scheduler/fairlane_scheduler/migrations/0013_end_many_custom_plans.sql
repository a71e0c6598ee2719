-- fairlane_end_many plans its statements for the tables as they are at each call.
--
-- PL/pgSQL keeps each statement's plan for the session, and after five calls Postgres
-- may settle on a generic plan, made for the table sizes of that moment. A scheduler
-- that starts on a new database makes those plans on empty tables, and for an empty
-- table a scan is the cheapest plan: fairlane_end_many then read every placement ever
-- made (a hash join on a sequential scan of placements, and another to lock them) for
-- each batch of releases, for as long as the pooled connection lived or until an
-- ANALYZE of the table replaced the plans (autovacuum's, at its own pace). In the
-- placement benchmark, whose database is new, that was 1,600-2,100 scans reading
-- 8-10 million rows in a 10 s run, 0.51-0.63 ms of Postgres CPU a placement instead of
-- 0.34, and a fifth fewer placements a second whenever autovacuum had not come by
-- (docs/benchmarks.md). Planning at each call costs a few hundredths of a millisecond
-- a batch; the function then reads its few rows by index, whatever the table's size.
-- (fairlane_place_many reads placements only through fairlane_batch_is_plain, a SQL
-- function planned at each call: the same test found no scan there.)
ALTER FUNCTION fairlane_end_many(uuid[], text[], timestamptz[], bigint[], text[], text[])
    SET plan_cache_mode = force_custom_plan;
