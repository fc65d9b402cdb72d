-- Runs last in CREATE EXTENSION: refuse a server that did not preload the library, track every user
-- table that exists now, and keep tracking tables created later.
SELECT worlds._require_preloaded();

-- The plpgsql API runs with the extension owner's rights over the catalog and generated storage: roles
-- use worlds through these functions (and the router), never by writing worlds_data themselves. The
-- event triggers too: a role that owns a tracked table alters or drops it, and the storage follows as
-- pg_worlds. The SQL wrappers of Rust functions (merge, diff, rebase) stay plain: a merge's DML must run
-- with the session's search_path, so the app's own triggers find their tables.
-- None is SECURITY DEFINER (a DBA's audit, and Postgres's own opr_sanity, expect none they didn't make):
-- each plpgsql function's body moves to schema worlds_data as <name>__body, SECURITY INVOKER with its search_path, and
-- worlds.<name> becomes a C function of the same signature that calls it as the body's owner
-- (catalog/definer.rs). Pure helpers (IMMUTABLE) need no rights and stay as they are. This runs before
-- anything refers to these functions by OID (event triggers, capture triggers, column defaults).
DO $$
DECLARE
    p record;
    g record;
    body regprocedure;
BEGIN
    FOR p IN SELECT f.oid, f.proname, f.proisstrict, f.provolatile, f.proparallel, f.procost, f.prorows, f.proretset,
                    pg_get_function_arguments(f.oid) AS args, pg_get_function_result(f.oid) AS result, f.proacl
             FROM pg_proc f JOIN pg_namespace n ON n.oid = f.pronamespace
             WHERE n.nspname = 'worlds' AND f.prolang = (SELECT oid FROM pg_language WHERE lanname = 'plpgsql')
               AND f.provolatile <> 'i'
               AND f.proname NOT IN ('as_of', '_as_of_query', '_require_select', '_shadow_past', '_unshadow_past')
             ORDER BY f.oid LOOP
        body := p.oid::regprocedure;
        EXECUTE format('ALTER FUNCTION %s SECURITY INVOKER SET search_path = pg_catalog, pg_temp', body);
        EXECUTE format('ALTER FUNCTION %s SET SCHEMA worlds_data', body);
        EXECUTE format('ALTER FUNCTION %s RENAME TO %I', body, p.proname || '__body');
        EXECUTE format('CREATE FUNCTION worlds.%I(%s) RETURNS %s LANGUAGE c %s %s PARALLEL %s COST %s%s AS %L, %L',
                       p.proname, p.args, p.result,
                       CASE WHEN p.proisstrict THEN 'STRICT' ELSE 'CALLED ON NULL INPUT' END,
                       CASE p.provolatile WHEN 's' THEN 'STABLE' ELSE 'VOLATILE' END,
                       CASE p.proparallel WHEN 's' THEN 'SAFE' WHEN 'r' THEN 'RESTRICTED' ELSE 'UNSAFE' END,
                       p.procost, CASE WHEN p.proretset THEN format(' ROWS %s', p.prorows) ELSE '' END,
                       'MODULE_PATHNAME', 'worlds_definer');
        -- the grants the function had (an ACL that leaves PUBLIC out: revoked from PUBLIC too)
        IF p.proacl IS NOT NULL THEN
            IF NOT EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0) THEN
                EXECUTE format('REVOKE ALL ON FUNCTION worlds.%I(%s) FROM PUBLIC', p.proname, pg_get_function_identity_arguments(p.oid));
            END IF;
            FOR g IN SELECT DISTINCT a.grantee FROM aclexplode(p.proacl) a WHERE a.grantee <> 0 AND a.grantee <> a.grantor LOOP
                EXECUTE format('GRANT EXECUTE ON FUNCTION worlds.%I(%s) TO %s', p.proname, pg_get_function_identity_arguments(p.oid), g.grantee::regrole);
            END LOOP;
        END IF;
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', body);
    END LOOP;
    -- the catalog's own trigger, made before its function moved
    DROP TRIGGER settings_upsert ON worlds.settings;
    CREATE TRIGGER settings_upsert BEFORE INSERT ON worlds.settings FOR EACH ROW EXECUTE FUNCTION worlds._settings_upsert();
    -- nothing but other functions may name a body: a trigger or default would call it without the owner's rights
    FOR g IN SELECT pg_describe_object(d.classid, d.objid, d.objsubid) AS what, d.refobjid::regprocedure AS fn
             FROM pg_depend d JOIN pg_proc f ON f.oid = d.refobjid
             WHERE d.refclassid = 'pg_proc'::regclass AND d.deptype = 'n'
               AND f.pronamespace = 'worlds_data'::regnamespace AND d.classid <> 'pg_proc'::regclass LOOP
        RAISE EXCEPTION 'pg_worlds install: % calls % without its owner''s rights', g.what, g.fn;
    END LOOP;
END $$;

SELECT worlds.track(c.oid::regclass)
FROM pg_class c
WHERE c.relkind = 'r' AND worlds._trackable(c.oid::regclass)
ORDER BY c.oid;

-- events are numbered without a sequence (see worlds._next_seq)
ALTER TABLE worlds.event ALTER COLUMN seq SET DEFAULT worlds._next_seq();

-- (CREATE TABLE is tracked by the utility hook: route/hooks/utility.rs, track_created)
CREATE EVENT TRIGGER worlds_ddl ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE AS', 'SELECT INTO', 'ALTER TABLE')
    EXECUTE FUNCTION worlds._on_ddl();
CREATE EVENT TRIGGER worlds_drop ON sql_drop
    WHEN TAG IN ('DROP TABLE', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION worlds._on_drop();

-- The internal ones (named _...) are pg_worlds' own: a role calling one directly would act with the
-- owner's rights (drop storage, discard any world, read every world's rows). Kept callable: those a
-- session's own statements call (a past session's views, the history views' check, AS OF's cache, which
-- checks the role's rights itself). The API functions check what they do.
DO $$
DECLARE f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = 'worlds' AND p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'c')
               AND p.prosrc = 'worlds_definer' AND p.proname LIKE '\_%'
               AND p.proname NOT IN ('_past_session_moment', '_may_read_history', '_moment_of', '_in_window', '_not_a_time') LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
    -- administration: tracking (which tables worlds cover), history purge, every world's rows for pg_dump
    REVOKE EXECUTE ON FUNCTION worlds.track(regclass), worlds.untrack(regclass), worlds.purge_history(integer),
        worlds._purge_dropped(), worlds._purge_table(integer, integer, boolean), worlds._purge_batch(integer[], integer),
        worlds._portable_rows(), worlds._portable_worlds() FROM PUBLIC;
    -- internal C functions that change the catalog (extension membership, dependencies, triggers), or take
    -- locks and caches: pg_worlds' own functions call them with its owner's rights, no role calls them
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = 'worlds' AND p.proname IN ('_add_member', '_drop_member', '_forget_reads_of',
                   '_create_capture_triggers', '_tracking_changed', '_capture_rows', '_release_made_now',
                   '_forget_user_types', '_lock_tracking', '_prepare_world_storage', '_main_writes_parts', '_reads_begin', '_drop_world_schemas', '_free_world_rows') LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END $$;
GRANT USAGE ON SCHEMA worlds TO PUBLIC;
GRANT SELECT ON worlds.world, worlds.tables, worlds.settings, worlds.column_log, worlds.dropped_table, worlds.world_schema TO PUBLIC;
GRANT USAGE ON SCHEMA worlds_data TO PUBLIC;

-- pg_worlds' own tables never reach a logical decoding stream (a FOR ALL TABLES publication, CDC), and
-- have a replica identity: storage/decoding.rs
SELECT worlds._keep_internal_out_of_decoding();
-- what a subscriber's replication connection reads for pg_catalog.pg_publication_tables (storage/decoding.rs)
CREATE VIEW worlds._publication_tables AS
    SELECT * FROM pg_catalog.pg_publication_tables WHERE schemaname NOT IN ('worlds', 'worlds_data');
GRANT SELECT ON worlds._publication_tables TO PUBLIC;
REVOKE EXECUTE ON FUNCTION worlds._keep_internal_out_of_decoding() FROM PUBLIC;
