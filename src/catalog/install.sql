-- Runs last in CREATE EXTENSION: refuse a server that did not preload the library, track every user
-- table that exists now, and keep tracking tables created later.
SELECT worlds._require_preloaded();

SELECT worlds.track(c.oid::regclass)
FROM pg_class c
WHERE c.relkind = 'r' AND worlds._trackable(c.oid::regclass)
ORDER BY c.oid;

-- events are numbered without a sequence (see worlds._next_seq)
ALTER TABLE worlds.event ALTER COLUMN seq SET DEFAULT worlds._next_seq();

CREATE EVENT TRIGGER worlds_ddl ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO', 'ALTER TABLE')
    EXECUTE FUNCTION worlds._on_ddl();
CREATE EVENT TRIGGER worlds_drop ON sql_drop
    WHEN TAG IN ('DROP TABLE', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION worlds._on_drop();

-- The plpgsql API runs with the extension owner's rights over the catalog and generated storage: roles
-- use worlds through these functions (and the router), never by writing worlds_data themselves. The
-- event triggers too: a role that owns a tracked table alters or drops it, and the storage follows as
-- pg_worlds. The SQL wrappers of Rust functions (merge, diff, rebase) stay plain: a merge's DML must run
-- with the session's search_path, so the app's own triggers find their tables.
DO $$
DECLARE f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = 'worlds' AND p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'plpgsql')
               AND p.proname NOT IN ('as_of', '_as_of_query', '_require_select', '_shadow_past', '_unshadow_past') LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, pg_temp', f);
    END LOOP;
    -- ... and so the internal ones (named _...) are pg_worlds' own: a role calling one directly would act
    -- with the owner's rights (drop storage, discard any world, read every world's rows). Kept callable:
    -- those a session's own statements call (a past session's views, the history views' check, AS OF's
    -- cache, which checks the role's rights itself). The API functions check what they do.
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = 'worlds' AND p.prosecdef AND p.proname LIKE '\_%'
               AND p.proname NOT IN ('_past_session_moment', '_may_read_history', '_moment_of', '_in_window', '_not_a_time') LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
    -- administration: tracking (which tables worlds cover), history purge, every world's rows for pg_dump
    REVOKE EXECUTE ON FUNCTION worlds.track(regclass), worlds.untrack(regclass), worlds.purge_history(integer),
        worlds._portable_rows(), worlds._portable_worlds() FROM PUBLIC;
END $$;
GRANT USAGE ON SCHEMA worlds TO PUBLIC;
GRANT SELECT ON worlds.world, worlds.tables, worlds.settings, worlds.column_log, worlds.dropped_table TO PUBLIC;
GRANT USAGE ON SCHEMA worlds_data TO PUBLIC;
