-- Agents (spec, "Agents"): an agent is a LOGIN role of the same name, with a catalog row here that says
-- where it may use what its GRANTs allow (its rights, `can`) and how much (its quotas). Its token is the
-- role's password, stored as SCRAM by Postgres and shown once, by CREATE AGENT.
--
-- Who is acting is the session's user (session_user): a SECURITY DEFINER function, SET ROLE to a group
-- role it is in, or any function it calls doesn't change who the agent is.

-- Admins of pg_worlds: they manage agents and may act on any world. Worlds' reviewers: people who
-- approve (merge, drop, alter) others' worlds. Roles are the cluster's: made once, kept across
-- databases and DROP EXTENSION.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'worlds_admin') THEN
        CREATE ROLE worlds_admin NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'worlds_reviewer') THEN
        CREATE ROLE worlds_reviewer NOLOGIN;
    END IF;
END $$;

CREATE TABLE worlds.agent (
    name              text PRIMARY KEY,
    id                text NOT NULL UNIQUE,
    role              oid NOT NULL UNIQUE,              -- the LOGIN role of the same name
    can               text[] NOT NULL DEFAULT '{read,fork,write_own}',
    max_worlds        integer NOT NULL DEFAULT 0,       -- 0: no limit, as every quota below
    writes_per_minute integer NOT NULL DEFAULT 0,
    max_changes       bigint NOT NULL DEFAULT 0,
    world_ttl         bigint NOT NULL DEFAULT 0,        -- ms
    created           timestamptz NOT NULL DEFAULT clock_timestamp(),
    disabled          boolean NOT NULL DEFAULT false,
    max_query_ms      bigint NOT NULL DEFAULT 0,
    max_concurrent    integer NOT NULL DEFAULT 0,
    max_memory_mb     integer NOT NULL DEFAULT 0,
    policy            text,
    max_idle_ms       bigint NOT NULL DEFAULT 0
);
CREATE SEQUENCE worlds.agent_num_seq;
-- (no secret here: the token is the role's password, kept by Postgres as SCRAM)
GRANT SELECT ON worlds.agent TO PUBLIC;

-- What agents did (SHOW AUDIT): one row per statement that forked, wrote, merged, rebased, restored,
-- dropped or changed metadata, written in the statement's own transaction.
CREATE TABLE worlds.audit (
    seq    bigserial PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    agent  text NOT NULL,
    world  text,
    action text NOT NULL,
    rows   bigint,
    run    jsonb,
    deletes bigint,                                    -- a merge's deleted rows (rules per hour)
    target text,                                       -- a merge's target world ('main')
    effects bigint,                                    -- a merge's effects sent or moved (rules per hour)
    xid    xid8 NOT NULL DEFAULT pg_current_xact_id()  -- the action's transaction (UNDO AGENT finds its rows by it)
);
CREATE INDEX audit_agent_at ON worlds.audit (agent, at);

-- A row of SHOW AGENTS (also what ALTER AGENT returns).
CREATE TYPE worlds.agent_row AS (name text, id text, can text, max_worlds integer, writes_per_minute integer,
    max_changes bigint, world_ttl bigint, created timestamptz, disabled boolean, max_query_ms bigint,
    max_concurrent integer, max_memory_mb integer, policy text, max_idle_ms bigint);

-- The session user's agent row, or a row of nulls for a person.
CREATE FUNCTION worlds._session_agent() RETURNS worlds.agent
LANGUAGE sql STABLE AS $$
    SELECT a.* FROM worlds.agent a WHERE a.role = worlds._session_user_id()
$$;

-- Is the session's user an admin of pg_worlds: a superuser, a member of worlds_admin, or an agent with
-- the right admin?
CREATE FUNCTION worlds._is_admin() RETURNS boolean
LANGUAGE sql STABLE AS $$
    -- (by oid, not through the pg_roles view: a session in a world that is gone still leaves it)
    SELECT coalesce((SELECT r.rolsuper FROM pg_catalog.pg_authid r WHERE r.oid = worlds._session_user_id()), false)
        OR coalesce(to_regrole('worlds_admin') IS NOT NULL AND pg_has_role(session_user, 'worlds_admin', 'MEMBER'), false)
        OR coalesce((SELECT a.can @> '{admin}' AND NOT a.disabled FROM worlds.agent a
                     WHERE a.role = worlds._session_user_id()), false)
$$;

-- The rights an action needs, checked for the session's user before it acts (42501 otherwise):
--   read, fork, fork_past (a past moment), write (a world's rows: write, or write_own on its own),
--   rebase (as write), merge (merge, or merge_own on its own), restore, undo (restore and merge),
--   write_main, alter / checkpoint / drop (its own world), ttl_pin and admin (admin only).
-- A person (not an agent) may do anything its GRANTs allow, but alter, drop, merge, rebase, restore or
-- checkpoint a world only if its role made it (or is a member of that role), or it is an admin or a
-- member of worlds_reviewer.
CREATE FUNCTION worlds._require(action text, w worlds.world DEFAULT NULL) RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    a worlds.agent := worlds._session_agent();
    own boolean;
    ok boolean;
    needs text;
    what text := CASE WHEN w.num IS NULL OR w.num = 0 THEN '' ELSE format(' world "%s"', w.name) END;
BEGIN
    IF a.name IS NOT NULL AND a.disabled THEN
        RAISE EXCEPTION 'permission denied: agent "%" is disabled', a.name USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF worlds._is_admin() THEN
        RETURN;
    END IF;
    IF a.name IS NULL AND action = 'admin' THEN
        RAISE EXCEPTION 'permission denied: only an admin of pg_worlds may do this' USING ERRCODE = 'insufficient_privilege',
            HINT = 'Admins are superusers, members of worlds_admin and agents with the right admin.';
    END IF;
    IF a.name IS NULL THEN
        IF w.num IS NULL OR w.num = 0 OR action NOT IN ('alter', 'drop', 'merge', 'rebase', 'restore', 'checkpoint', 'undo', 'ttl_pin') THEN
            RETURN;
        END IF;
        IF coalesce(pg_has_role(session_user, w.creator, 'MEMBER'), false)
           OR coalesce(to_regrole('worlds_reviewer') IS NOT NULL AND pg_has_role(session_user, 'worlds_reviewer', 'MEMBER'), false) THEN
            RETURN;
        END IF;
        RAISE EXCEPTION 'permission denied to % world "%"', CASE action WHEN 'ttl_pin' THEN 'set the TTL or pin of' WHEN 'undo' THEN 'undo a merge of' ELSE action END, w.name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('World "%s" belongs to %s.', w.name, coalesce(w.owner, (SELECT rolname::text FROM pg_catalog.pg_authid WHERE oid = w.creator), 'no one')),
                  HINT = 'Only the role that made a world (or a member of it), worlds_admin and worlds_reviewer may alter, drop, merge, rebase, restore or checkpoint it.';
    END IF;
    own := w.num IS NOT NULL AND w.num <> 0 AND w.owner IS NOT DISTINCT FROM a.name;
    IF a.policy IS NOT NULL AND action IN ('write_main', 'restore', 'undo') THEN
        RAISE EXCEPTION 'permission denied: agent "%" keeps to merge policy %: it changes main only by merging', a.name, a.policy
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'A direct write, RESTORE, UNDO MERGE or UNDO AGENT would skip the policy''s rules.';
    END IF;
    CASE action
        WHEN 'read' THEN ok := a.can @> '{read}'; needs := 'read';
        WHEN 'fork' THEN ok := a.can @> '{fork}'; needs := 'fork';
        WHEN 'fork_past' THEN ok := false; needs := 'admin (to fork a past moment)';
        WHEN 'write', 'rebase' THEN ok := a.can @> '{write}' OR (own AND a.can @> '{write_own}'); needs := 'write, or write_own for its own worlds';
        WHEN 'merge' THEN ok := a.can @> '{merge}' OR (own AND a.can @> '{merge_own}'); needs := 'merge, or merge_own for its own worlds';
        WHEN 'restore' THEN ok := a.can @> '{restore}'; needs := 'restore';
        WHEN 'undo' THEN ok := a.can @> '{restore,merge}'; needs := 'restore and merge';
        WHEN 'write_main' THEN ok := a.can @> '{write_main}'; needs := 'write_main';
        WHEN 'alter', 'checkpoint', 'drop' THEN ok := own; needs := 'admin, or the world to be its own';
        ELSE ok := false; needs := 'admin';
    END CASE;
    IF NOT ok THEN
        RAISE EXCEPTION 'permission denied: agent "%" may not %', a.name,
                CASE action WHEN 'ttl_pin' THEN 'set the TTL or pin of' WHEN 'fork_past' THEN 'fork a past moment'
                            WHEN 'admin' THEN 'do this: it is for admins' WHEN 'undo' THEN 'undo a merge'
                            WHEN 'write_main' THEN 'write main' ELSE action END || what
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('Agent "%s" has the rights %s.', a.name, array_to_string(a.can, ',')),
                  HINT = format('It needs %s.', needs);
    END IF;
END $$;

-- The acting agent's name, or null for a person.
CREATE FUNCTION worlds._agent_name() RETURNS text
LANGUAGE sql STABLE AS $$ SELECT (worlds._session_agent()).name $$;

-- An audit row for the acting agent (nothing for a person), in the action's own transaction.
CREATE FUNCTION worlds._audit(action text, world_name text, n bigint DEFAULT NULL, deletes bigint DEFAULT NULL, target text DEFAULT NULL,
                              effects bigint DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    who text := worlds._agent_name();
    m jsonb;
BEGIN
    IF who IS NULL THEN RETURN; END IF;
    -- (a merged world is gone by now: its latest row under that name)
    SELECT w.meta INTO m FROM worlds.world w WHERE w.name = world_name ORDER BY w.dropped IS NULL DESC, w.num DESC LIMIT 1;
    INSERT INTO worlds.audit (agent, world, action, rows, deletes, target, effects, run)
    VALUES (who, world_name, action, n, deletes, target, effects,
            (SELECT nullif(jsonb_strip_nulls(jsonb_build_object('run_id', m -> 'run_id', 'prompt_version', m -> 'prompt_version',
                                                               'model', m -> 'model', 'tool_schema', m -> 'tool_schema')), '{}')));
END $$;

-- A count setting: a whole number >= 0 (or one as text); 22023 otherwise.
CREATE FUNCTION worlds._count_setting(key text, v jsonb, upper bigint DEFAULT 2147483647) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    t text := CASE WHEN jsonb_typeof(v) IN ('number', 'string') THEN trim(v #>> '{}') END;
BEGIN
    IF v IS NULL OR jsonb_typeof(v) = 'null' THEN RETURN 0; END IF;
    IF t IS NULL OR t !~ '^[0-9]{1,18}$' OR t::bigint > upper THEN
        RAISE EXCEPTION '% must be a whole number from 0 to %, not %', key, upper, v USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN t::bigint;
END $$;

-- A duration setting in ms: a number of ms, or an interval string ('1 day', '30 minutes'); 22023 otherwise.
CREATE FUNCTION worlds._ms_setting(key text, v jsonb) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    t text := CASE WHEN jsonb_typeof(v) IN ('number', 'string') THEN trim(v #>> '{}') END;
    ms numeric;
BEGIN
    IF v IS NULL OR jsonb_typeof(v) = 'null' THEN RETURN 0; END IF;
    IF t IS NULL THEN
        RAISE EXCEPTION '% must be a number of ms or an interval, not %', key, v USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF t ~ '^[0-9]{1,15}(\.[0-9]*)?$' THEN
        ms := t::numeric;
    ELSE
        BEGIN
            ms := extract(epoch FROM t::interval) * 1000;
        EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow OR syntax_error THEN
            RAISE EXCEPTION '% must be a number of ms or an interval, not %', key, v USING ERRCODE = 'invalid_parameter_value';
        END;
    END IF;
    IF ms < 0 OR ms > 2147483647 THEN
        RAISE EXCEPTION '% must be from 0 to 2147483647 ms (about 24 days), not %', key, v USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN round(ms);
END $$;

-- The agent row with the settings applied (keys named only; others kept). 22P02 for an unknown key.
CREATE FUNCTION worlds._agent_settings(a worlds.agent, settings jsonb) RETURNS worlds.agent
LANGUAGE plpgsql STABLE AS $$
DECLARE
    k text;
    v jsonb;
    r text;
    rights text[];
BEGIN
    IF settings IS NULL THEN RETURN a; END IF;
    FOR k, v IN SELECT * FROM jsonb_each(settings) LOOP
        CASE k
            WHEN 'can' THEN
                IF jsonb_typeof(v) <> 'string' THEN
                    RAISE EXCEPTION 'can must be a list of rights as text, like ''read,fork,write_own''' USING ERRCODE = 'invalid_parameter_value';
                END IF;
                rights := '{}';
                FOREACH r IN ARRAY regexp_split_to_array(v #>> '{}', '\s*,\s*') LOOP
                    r := lower(trim(r));
                    CONTINUE WHEN r = '';
                    IF r NOT IN ('read', 'fork', 'write_own', 'write', 'write_main', 'merge_own', 'merge', 'restore', 'admin') THEN
                        RAISE EXCEPTION 'unknown right "%"', r USING ERRCODE = 'invalid_parameter_value',
                            HINT = 'Rights are read, fork, write_own, write, write_main, merge_own, merge, restore and admin.';
                    END IF;
                    IF NOT rights @> ARRAY[r] THEN rights := rights || r; END IF;
                END LOOP;
                a.can := rights;
            WHEN 'max_worlds' THEN a.max_worlds := worlds._count_setting(k, v);
            WHEN 'writes_per_minute' THEN a.writes_per_minute := worlds._count_setting(k, v);
            WHEN 'max_changes' THEN a.max_changes := worlds._count_setting(k, v, 9223372036854775807);
            WHEN 'max_concurrent' THEN a.max_concurrent := worlds._count_setting(k, v);
            WHEN 'max_memory_mb' THEN a.max_memory_mb := worlds._count_setting(k, v, 2097151);
            WHEN 'world_ttl' THEN a.world_ttl := worlds._ms_setting(k, v);
            WHEN 'max_query_ms' THEN a.max_query_ms := worlds._ms_setting(k, v);
            WHEN 'max_idle_ms' THEN a.max_idle_ms := worlds._ms_setting(k, v);
            WHEN 'disabled' THEN
                IF jsonb_typeof(v) = 'boolean' THEN a.disabled := v::text::boolean;
                ELSIF jsonb_typeof(v) = 'string' AND lower(v #>> '{}') IN ('true', 'false') THEN a.disabled := (v #>> '{}')::boolean;
                ELSE RAISE EXCEPTION 'disabled must be true or false, not %', v USING ERRCODE = 'invalid_parameter_value';
                END IF;
            WHEN 'policy' THEN
                IF jsonb_typeof(v) = 'null' THEN
                    a.policy := NULL;
                ELSIF EXISTS (SELECT 1 FROM worlds.merge_policy p WHERE p.name = v #>> '{}') THEN
                    a.policy := v #>> '{}';
                ELSE
                    RAISE EXCEPTION 'merge policy "%" does not exist', v #>> '{}' USING ERRCODE = 'undefined_object';
                END IF;
            ELSE
                RAISE EXCEPTION 'unknown agent setting "%"', k USING ERRCODE = 'invalid_text_representation',
                    HINT = 'Agent settings are can, max_worlds, writes_per_minute, max_changes, world_ttl, max_query_ms, max_concurrent, max_memory_mb, max_idle_ms, disabled and policy.';
        END CASE;
    END LOOP;
    RETURN a;
END $$;

-- The role follows the agent's row: its limits as the role's own settings, max_concurrent as its
-- CONNECTION LIMIT, disabled as NOLOGIN (its running sessions are ended).
CREATE FUNCTION worlds._sync_agent_role(a worlds.agent) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    role_name text := (SELECT rolname FROM pg_roles WHERE oid = a.role);
BEGIN
    EXECUTE format('ALTER ROLE %I WITH %s CONNECTION LIMIT %s', role_name,
                   CASE WHEN a.disabled THEN 'NOLOGIN' ELSE 'LOGIN' END,
                   CASE WHEN a.max_concurrent = 0 THEN -1 ELSE a.max_concurrent END);
    IF a.max_query_ms = 0 THEN
        EXECUTE format('ALTER ROLE %I RESET statement_timeout', role_name);
    ELSE
        EXECUTE format('ALTER ROLE %I SET statement_timeout = %L', role_name, a.max_query_ms || 'ms');
    END IF;
    IF a.max_idle_ms = 0 THEN
        EXECUTE format('ALTER ROLE %I RESET idle_in_transaction_session_timeout', role_name);
    ELSE
        EXECUTE format('ALTER ROLE %I SET idle_in_transaction_session_timeout = %L', role_name, a.max_idle_ms || 'ms');
    END IF;
    IF a.max_memory_mb = 0 THEN
        EXECUTE format('ALTER ROLE %I RESET work_mem', role_name);
    ELSE
        EXECUTE format('ALTER ROLE %I SET work_mem = %L', role_name, a.max_memory_mb || 'MB');
    END IF;
    IF a.disabled THEN
        PERFORM pg_terminate_backend(s.pid) FROM pg_stat_activity s WHERE s.usesysid = a.role AND s.pid <> pg_backend_pid();
    END IF;
    -- (every session's cached agent rights are dropped: they read the row again)
    PERFORM worlds._tracking_changed('worlds.agent'::regclass);
END $$;

CREATE FUNCTION worlds._agent_row(a worlds.agent) RETURNS worlds.agent_row
LANGUAGE sql STABLE AS $$
    SELECT a.name, a.id, array_to_string(a.can, ','), a.max_worlds, a.writes_per_minute, a.max_changes, a.world_ttl,
           a.created, a.disabled, a.max_query_ms, a.max_concurrent, a.max_memory_mb, a.policy, a.max_idle_ms
$$;

-- CREATE AGENT: the role (LOGIN, its password the token, as SCRAM), the row; returns name, id and the
-- token, shown only now.
CREATE FUNCTION worlds.create_agent(agent_name text, settings jsonb DEFAULT NULL)
RETURNS TABLE (name text, id text, token text)
LANGUAGE plpgsql SET password_encryption = 'scram-sha-256' AS $$
DECLARE
    arg_agent_name ALIAS FOR $1;  -- (not create_agent.agent_name: the body runs as create_agent__body, catalog/definer.rs)
    a worlds.agent;
    secret text := 'wt_' || replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '');
    n bigint;
BEGIN
    PERFORM worlds._refuse_in_transaction('CREATE AGENT');
    PERFORM worlds._require('admin');
    PERFORM worlds._check_agent_name(arg_agent_name);
    IF EXISTS (SELECT 1 FROM worlds.agent x WHERE x.name = arg_agent_name) THEN
        RAISE EXCEPTION 'agent "%" already exists', arg_agent_name USING ERRCODE = 'duplicate_object';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = arg_agent_name) THEN
        RAISE EXCEPTION 'role "%" already exists', arg_agent_name USING ERRCODE = 'duplicate_object',
            HINT = 'An agent is a login role of its name: choose another name.';
    END IF;
    a.name := agent_name;
    a := worlds._agent_settings(a, settings);
    -- (the defaults of the columns a setting didn't name)
    a.can := coalesce(a.can, '{read,fork,write_own}');
    a.max_worlds := coalesce(a.max_worlds, 0); a.writes_per_minute := coalesce(a.writes_per_minute, 0);
    a.max_changes := coalesce(a.max_changes, 0); a.world_ttl := coalesce(a.world_ttl, 0);
    a.disabled := coalesce(a.disabled, false); a.max_query_ms := coalesce(a.max_query_ms, 0);
    a.max_concurrent := coalesce(a.max_concurrent, 0); a.max_memory_mb := coalesce(a.max_memory_mb, 0);
    a.max_idle_ms := coalesce(a.max_idle_ms, 0);
    n := nextval('worlds.agent_num_seq');
    a.id := 'a' || lpad(to_hex(n), 6, '0') || '-' || substr(md5(gen_random_uuid()::text), 1, 10);
    a.created := clock_timestamp();
    -- (the token is ours, hex: a literal of it can't be more than a string)
    EXECUTE format('CREATE ROLE %I LOGIN PASSWORD %L', a.name, secret);
    a.role := (SELECT oid FROM pg_roles WHERE rolname = a.name);
    INSERT INTO worlds.agent SELECT a.*;
    PERFORM worlds._sync_agent_role(a);
    RETURN QUERY SELECT a.name, a.id, secret;
END $$;

-- ALTER AGENT name SET (...): changes the keys named, returns the agent's row.
CREATE FUNCTION worlds.alter_agent(name text, settings jsonb) RETURNS SETOF worlds.agent_row
LANGUAGE plpgsql AS $$
DECLARE
    arg_name ALIAS FOR $1;  -- (not alter_agent.name: the body runs as alter_agent__body, catalog/definer.rs)
    a worlds.agent;
BEGIN
    PERFORM worlds._refuse_in_transaction('ALTER AGENT');
    PERFORM worlds._require('admin');
    SELECT * INTO a FROM worlds.agent x WHERE x.name = arg_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'agent "%" does not exist', arg_name USING ERRCODE = 'undefined_object';
    END IF;
    a := worlds._agent_settings(a, settings);
    UPDATE worlds.agent x SET can = a.can, max_worlds = a.max_worlds, writes_per_minute = a.writes_per_minute,
        max_changes = a.max_changes, world_ttl = a.world_ttl, disabled = a.disabled, max_query_ms = a.max_query_ms,
        max_concurrent = a.max_concurrent, max_memory_mb = a.max_memory_mb, policy = a.policy, max_idle_ms = a.max_idle_ms
    WHERE x.name = a.name;
    PERFORM worlds._sync_agent_role(a);
    RETURN NEXT worlds._agent_row(a);
END $$;

-- DROP AGENT: the role goes (what it owned passes to the database's owner; its grants are revoked); its
-- worlds, history and audit stay.
CREATE FUNCTION worlds.drop_agent(name text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    arg_name ALIAS FOR $1;  -- (not drop_agent.name: the body runs as drop_agent__body, catalog/definer.rs)
    a worlds.agent;
    role_name text;
BEGIN
    PERFORM worlds._refuse_in_transaction('DROP AGENT');
    PERFORM worlds._require('admin');
    SELECT * INTO a FROM worlds.agent x WHERE x.name = arg_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'agent "%" does not exist', arg_name USING ERRCODE = 'undefined_object';
    END IF;
    IF a.role = (SELECT oid FROM pg_roles WHERE rolname = session_user) THEN
        RAISE EXCEPTION 'agent "%" can''t drop itself', a.name USING ERRCODE = 'object_in_use';
    END IF;
    DELETE FROM worlds.agent x WHERE x.name = a.name;
    role_name := (SELECT rolname FROM pg_roles WHERE oid = a.role);
    IF role_name IS NOT NULL THEN
        PERFORM pg_terminate_backend(s.pid) FROM pg_stat_activity s WHERE s.usesysid = a.role;
        EXECUTE format('REASSIGN OWNED BY %I TO %I', role_name,
                       (SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()));
        EXECUTE format('DROP OWNED BY %I', role_name);
        EXECUTE format('DROP ROLE %I', role_name);
    END IF;
    PERFORM worlds._tracking_changed('worlds.agent'::regclass);
    RETURN 'DROP AGENT';
END $$;

CREATE FUNCTION worlds.show_agents() RETURNS SETOF worlds.agent_row
LANGUAGE sql STABLE AS $$
    SELECT (worlds._agent_row(a)).* FROM worlds.agent a ORDER BY a.created, a.name
$$;

-- SHOW AUDIT [FOR [AGENT] name] [LIMIT n]: the latest first.
CREATE FUNCTION worlds.show_audit(agent_name text DEFAULT NULL, "limit" bigint DEFAULT 100)
RETURNS TABLE (at timestamptz, agent text, world text, action text, rows bigint, run jsonb)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    arg_agent_name ALIAS FOR $1;  -- (not show_audit.agent_name: the body runs as show_audit__body, catalog/definer.rs)
BEGIN
    PERFORM worlds._require('read');
    IF "limit" < 0 THEN
        RAISE EXCEPTION 'LIMIT must not be negative' USING ERRCODE = 'invalid_row_count_in_limit_clause';
    END IF;
    RETURN QUERY SELECT x.at, x.agent, x.world, x.action, x.rows, x.run FROM worlds.audit x
    WHERE arg_agent_name IS NULL OR x.agent = arg_agent_name
    ORDER BY x.seq DESC LIMIT "limit";
END $$;
