-- Merge policies (spec, "Merge policies"): rules people approve, so an agent keeping to one merges on its
-- own while its merge keeps to them, and waits for a person (SHOW REVIEWS) when it breaks any. The rules
-- are judged inside the merge on what it is about to apply (governance/policies.rs, worlds_core::rules).

-- One row per policy, its columns in SHOW MERGE POLICIES's order. A limit of null is no limit.
CREATE TABLE worlds.merge_policy (
    name                 text PRIMARY KEY,
    max_rows             bigint,
    max_deletes          bigint,
    tables               text,
    review_tables        text,
    review_columns       text,
    schema               boolean NOT NULL DEFAULT false,
    overwrite            boolean NOT NULL DEFAULT false,
    critical             boolean NOT NULL DEFAULT false,
    check_reads          boolean NOT NULL DEFAULT false,
    require_scope        boolean NOT NULL DEFAULT false,
    rows_per_hour        bigint,
    deletes_per_hour     bigint,
    max_age              bigint,                         -- ms
    created              timestamptz NOT NULL DEFAULT clock_timestamp(),
    max_effects          bigint,
    effects_per_hour     bigint,
    review_channels      text,
    confirm_deletes_over bigint
);
GRANT SELECT ON worlds.merge_policy TO PUBLIC;

-- The review queue: worlds whose agent's merge broke its policy's rules, waiting for a person. Written
-- by a background worker in a transaction of its own (the refused merge's is rolled back), so the world
-- stays queued whatever the agent's session does (governance/reviews.rs).
CREATE TABLE worlds.review (
    world   integer PRIMARY KEY REFERENCES worlds.world (num),
    policy  text,
    asked   timestamptz NOT NULL,
    version bigint NOT NULL                              -- the world's version when its agent asked
);

-- A limit: null (none), or a whole number >= 0.
CREATE FUNCTION worlds._limit_setting(key text, v jsonb) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN v IS NULL OR jsonb_typeof(v) = 'null' THEN NULL ELSE worlds._count_setting(key, v, 9223372036854775807) END
$$;

CREATE FUNCTION worlds._bool_setting(key text, v jsonb) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    IF jsonb_typeof(v) = 'boolean' THEN RETURN v::text::boolean; END IF;
    IF jsonb_typeof(v) = 'string' AND lower(v #>> '{}') IN ('true', 'false', 'on', 'off') THEN RETURN (v #>> '{}')::boolean; END IF;
    RAISE EXCEPTION '% must be true or false, not %', key, v USING ERRCODE = 'invalid_parameter_value';
END $$;

-- The policy with the settings applied (keys named only). 22P02 for an unknown key, 22023 for a bad value.
CREATE FUNCTION worlds._policy_settings(p worlds.merge_policy, settings jsonb) RETURNS worlds.merge_policy
LANGUAGE plpgsql STABLE AS $$
DECLARE
    k text;
    v jsonb;
    t text;
BEGIN
    IF settings IS NULL THEN RETURN p; END IF;
    FOR k, v IN SELECT * FROM jsonb_each(settings) LOOP
        t := CASE WHEN jsonb_typeof(v) = 'null' THEN NULL ELSE v #>> '{}' END;
        CASE k
            WHEN 'max_rows' THEN p.max_rows := worlds._limit_setting(k, v);
            WHEN 'max_deletes' THEN p.max_deletes := worlds._limit_setting(k, v);
            WHEN 'rows_per_hour' THEN p.rows_per_hour := worlds._limit_setting(k, v);
            WHEN 'deletes_per_hour' THEN p.deletes_per_hour := worlds._limit_setting(k, v);
            WHEN 'confirm_deletes_over' THEN p.confirm_deletes_over := worlds._limit_setting(k, v);
            WHEN 'max_effects' THEN p.max_effects := worlds._limit_setting(k, v);
            WHEN 'effects_per_hour' THEN p.effects_per_hour := worlds._limit_setting(k, v);
            WHEN 'max_age' THEN p.max_age := CASE WHEN t IS NULL THEN NULL ELSE worlds._ms_setting(k, v) END;
            WHEN 'tables' THEN PERFORM worlds._check_policy_list(k, t); p.tables := t;
            WHEN 'review_tables' THEN PERFORM worlds._check_policy_list(k, t); p.review_tables := t;
            WHEN 'review_columns' THEN PERFORM worlds._check_policy_list(k, t); p.review_columns := t;
            WHEN 'review_channels' THEN PERFORM worlds._check_policy_list(k, t); p.review_channels := t;
            WHEN 'schema' THEN p.schema := worlds._bool_setting(k, v);
            WHEN 'overwrite' THEN p.overwrite := worlds._bool_setting(k, v);
            WHEN 'critical' THEN p.critical := worlds._bool_setting(k, v);
            WHEN 'check_reads' THEN p.check_reads := worlds._bool_setting(k, v);
            WHEN 'require_scope' THEN p.require_scope := worlds._bool_setting(k, v);
            ELSE
                RAISE EXCEPTION 'unknown merge policy setting "%"', k USING ERRCODE = 'invalid_text_representation',
                    HINT = 'Merge policy settings are max_rows, max_deletes, tables, review_tables, review_columns, schema, overwrite, critical, check_reads, require_scope, rows_per_hour, deletes_per_hour, max_age, max_effects, effects_per_hour, review_channels and confirm_deletes_over.';
        END CASE;
    END LOOP;
    RETURN p;
END $$;

CREATE FUNCTION worlds.create_merge_policy(policy_name text, settings jsonb DEFAULT NULL) RETURNS SETOF worlds.merge_policy
LANGUAGE plpgsql AS $$
DECLARE
    p worlds.merge_policy;
BEGIN
    PERFORM worlds._refuse_in_transaction('CREATE MERGE POLICY');
    PERFORM worlds._require('admin');
    IF EXISTS (SELECT 1 FROM worlds.merge_policy x WHERE x.name = policy_name) THEN
        RAISE EXCEPTION 'merge policy "%" already exists', policy_name USING ERRCODE = 'duplicate_object';
    END IF;
    p.name := policy_name;
    p.schema := false; p.overwrite := false; p.critical := false; p.check_reads := false; p.require_scope := false;
    p := worlds._policy_settings(p, settings);
    p.created := clock_timestamp();
    INSERT INTO worlds.merge_policy SELECT p.*;
    RETURN NEXT p;
END $$;

CREATE FUNCTION worlds.alter_merge_policy(policy_name text, settings jsonb) RETURNS SETOF worlds.merge_policy
LANGUAGE plpgsql AS $$
DECLARE
    p worlds.merge_policy;
BEGIN
    PERFORM worlds._refuse_in_transaction('ALTER MERGE POLICY');
    PERFORM worlds._require('admin');
    SELECT * INTO p FROM worlds.merge_policy x WHERE x.name = policy_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'merge policy "%" does not exist', policy_name USING ERRCODE = 'undefined_object';
    END IF;
    p := worlds._policy_settings(p, settings);
    DELETE FROM worlds.merge_policy x WHERE x.name = policy_name;
    INSERT INTO worlds.merge_policy SELECT p.*;
    PERFORM worlds._tracking_changed('worlds.agent'::regclass);
    RETURN NEXT p;
END $$;

CREATE FUNCTION worlds.drop_merge_policy(policy_name text, "cascade" boolean DEFAULT false) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    a text;
    keeping text;
BEGIN
    PERFORM worlds._refuse_in_transaction('DROP MERGE POLICY');
    PERFORM worlds._require('admin');
    PERFORM 1 FROM worlds.merge_policy x WHERE x.name = policy_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'merge policy "%" does not exist', policy_name USING ERRCODE = 'undefined_object';
    END IF;
    SELECT string_agg(x.name, ', ' ORDER BY x.name) INTO keeping FROM worlds.agent x WHERE x.policy = policy_name;
    IF keeping IS NOT NULL AND NOT "cascade" THEN
        RAISE EXCEPTION 'cannot drop merge policy "%": agents keep to it: %', policy_name, keeping
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Use DROP MERGE POLICY ... CASCADE: its agents then keep to none.';
    END IF;
    FOR a IN SELECT x.name FROM worlds.agent x WHERE x.policy = policy_name ORDER BY x.name LOOP
        RAISE NOTICE 'agent "%" keeps to no merge policy now', a;
        UPDATE worlds.agent x SET policy = NULL WHERE x.name = a;
    END LOOP;
    DELETE FROM worlds.merge_policy x WHERE x.name = policy_name;
    PERFORM worlds._tracking_changed('worlds.agent'::regclass);
    RETURN 'DROP MERGE POLICY';
END $$;

CREATE FUNCTION worlds.show_merge_policies() RETURNS SETOF worlds.merge_policy
LANGUAGE sql STABLE AS $$ SELECT * FROM worlds.merge_policy ORDER BY created, name $$;

-- SHOW REVIEWS: the queued worlds, oldest ask first; reasons and changes as the merge would judge them now.
CREATE FUNCTION worlds.show_reviews()
RETURNS TABLE (world text, owner text, policy text, reasons text[], asked timestamptz, version bigint,
               changed_since boolean, scope jsonb, changes jsonb, effects jsonb, run jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    j jsonb;
BEGIN
    PERFORM worlds._require('read');
    FOR r IN SELECT q.*, w.name AS wname, w.owner AS wowner, w.version AS wversion,
                    EXISTS (SELECT 1 FROM worlds.event e WHERE e.world = w.num AND e.event LIKE 'merged part into %' AND e.at > q.asked) AS partly
             FROM worlds.review q JOIN worlds.world w ON w.num = q.world
             WHERE w.dropped IS NULL ORDER BY q.asked LOOP
        j := worlds._review_facts(r.world, r.policy);
        world := r.wname; owner := r.wowner; policy := r.policy;
        reasons := ARRAY(SELECT jsonb_array_elements_text(j -> 'reasons'));
        asked := r.asked; version := r.version;
        changed_since := r.wversion <> r.version OR r.partly;
        scope := (SELECT worlds._scope_shown(x.meta) FROM worlds.world x WHERE x.num = r.world);
        changes := j -> 'changes';
        effects := (SELECT coalesce(jsonb_object_agg(o.channel, o.n), '{}') FROM
                       (SELECT x.channel, count(*) AS n FROM worlds.outbox x WHERE x.world = r.world GROUP BY 1) o);
        -- which run of the agent made it (the spec's run column, as SHOW AUDIT's): from the fork's meta
        run := (SELECT nullif(jsonb_strip_nulls(jsonb_build_object('run_id', x.meta -> 'run_id', 'prompt_version', x.meta -> 'prompt_version',
                                                                  'model', x.meta -> 'model', 'tool_schema', x.meta -> 'tool_schema')), '{}')
                FROM worlds.world x WHERE x.num = r.world);
        RETURN NEXT;
    END LOOP;
END $$;

-- A world leaves the review queue (merged, dropped): its row goes, and LISTEN worlds_reviews hears it.
CREATE FUNCTION worlds._leave_reviews(world_num integer, what text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    q worlds.review;
BEGIN
    DELETE FROM worlds.review r WHERE r.world = world_num RETURNING * INTO q;
    IF FOUND THEN
        PERFORM pg_notify('worlds_reviews', jsonb_build_object('world', (SELECT name FROM worlds.world WHERE num = world_num),
                                                               'event', what, 'policy', q.policy)::text);
    END IF;
END $$;

-- Policies are the database's own configuration: pg_dump carries them (agents are roles, the cluster's,
-- and don't travel with a database's dump; the review queue, audit and outbox are the worlds' state).
SELECT pg_catalog.pg_extension_config_dump('worlds.merge_policy', '');
