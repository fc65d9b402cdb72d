-- The world lifecycle: CREATE/FORK, SWITCH, SHOW WORLDS, SHOW BRANCHES, ALTER, DROP.
-- Each statement of the spec is a function here with named arguments; worlds.sql(text) parses the spec's
-- own syntax and calls these. Errors carry the spec's SQLSTATEs.

-- A live world by name or ID, found by the one resolver (src/world.rs: its 3D000 and 0A000), as this
-- statement's snapshot has its row.
CREATE FUNCTION worlds._resolve(name_or_id text) RETURNS worlds.world
LANGUAGE plpgsql STABLE AS $$
DECLARE
    w worlds.world;
BEGIN
    SELECT * INTO w FROM worlds.world WHERE num = worlds._resolve_num(name_or_id) AND dropped IS NULL;
    IF NOT FOUND THEN
        PERFORM worlds._world_missing(name_or_id);
    END IF;
    RETURN w;
END $$;

-- 'name@when': the live world and the moment, checked: a time (22P02), inside the history window and
-- not before the world existed (22023), not before its last rebase (55000: its fork point moved since, and
-- what it stood on before is not kept).
CREATE FUNCTION worlds._moment_of(source text, OUT w worlds.world, OUT at timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    w := worlds._resolve(split_part(source, '@', 1));
    at := worlds.moment(substr(source, position('@' IN source) + 1));
    IF w.num <> 0 AND at < w.created THEN
        RAISE EXCEPTION 'world "%" did not exist yet at %', w.name, at USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF w.num <> 0 AND w.rebased IS NOT NULL AND at < w.rebased THEN
        RAISE EXCEPTION 'world "%" was rebased at %, after %: it can''t be read as it was before its last rebase', w.name, w.rebased, at
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
END $$;

-- Metadata as stored: the database's own keys (_worlds...) are refused, at most 64 KB, and the run
-- keys must be text.
CREATE FUNCTION worlds._checked_meta(meta jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    k text;
BEGIN
    IF meta IS NULL THEN RETURN '{}'; END IF;
    IF jsonb_typeof(meta) <> 'object' THEN
        RAISE EXCEPTION 'world metadata must be a JSON object' USING ERRCODE = 'invalid_text_representation';
    END IF;
    FOR k IN SELECT jsonb_object_keys(meta) LOOP
        IF k LIKE '\_worlds%' OR k LIKE '\_sonos%' THEN
            RAISE EXCEPTION 'metadata key "%" is reserved: keys starting with _worlds or _sonos are the database''s own', k
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF k IN ('run_id', 'prompt_version', 'model', 'tool_schema') AND jsonb_typeof(meta -> k) NOT IN ('string', 'null') THEN
            RAISE EXCEPTION 'metadata key "%" must be text', k USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;
    IF worlds._json_size(meta) > 65536 THEN
        RAISE EXCEPTION 'world metadata is % bytes as JSON; at most 64 KB', worlds._json_size(meta)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN meta;
END $$;

-- What forks a world and what ends one take turns, so "has it live forks?" stays true until the end
-- of the transaction that asked it (a CREATE WORLD from a world being dropped made a live world on a
-- dropped parent). A transaction-level lock: the checks after it read what committed before.
CREATE FUNCTION worlds._lock_worlds() RETURNS void
LANGUAGE sql AS $$ SELECT pg_advisory_xact_lock(hashtext('pg_worlds: create world')) $$;

-- worlds.world_idle_ttl (a server setting, seconds) as an interval; 0: worlds are never discarded for being idle.
CREATE FUNCTION worlds._world_idle_ttl() RETURNS interval
LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('worlds.world_idle_ttl', true), '')::interval, interval '0')
$$;

-- Why world x is to be discarded now, or null (its live forks are asked by the caller):
--   'ttl': its TTL passed (ALTER WORLD ... SET TTL, or its agent's world_ttl, set as `expires` at the fork);
--   'simulate': a world a SIMULATE forked and didn't finish (cancelled, failed, or a crash): its run's lock
--     is free once the SIMULATE's transaction ended (statements/simulate.rs); tried here, and then held to
--     the end of the transaction;
--   'idle': not pinned, and nothing written in it, and no SWITCH WORLD into it for longer
--     than `idle` (its `active` time, moved by each write statement's commit and each SWITCH; reads don't
--     move it). 0: no idle rule. A running SIMULATE's worlds are never idle.
CREATE FUNCTION worlds._due(x worlds.world, idle interval) RETURNS text
LANGUAGE sql VOLATILE AS $$
    SELECT CASE
        WHEN x.dropped IS NOT NULL OR x.num = 0 THEN NULL
        WHEN x.expires IS NOT NULL AND x.expires <= clock_timestamp() THEN 'ttl'
        WHEN x.meta ? '_worlds_sim' THEN
            CASE WHEN pg_try_advisory_xact_lock(2092161, (x.meta -> '_worlds_sim' ->> 'run')::integer) THEN 'simulate' END
        WHEN idle > interval '0' AND NOT x.pinned AND coalesce(x.active, x.created) <= clock_timestamp() - idle THEN 'idle'
    END
$$;

-- Discards the worlds due to go (worlds._due; never one with live forks: its forks go first, and it at a
-- later call), deepest first, at most `max`. Never waits for a world: the lock that ends creates and drops
-- and the world's own write lock are only tried (a world being written, merged, created from or dropped is
-- left to a later call). Returns each world discarded, why, and since when (its TTL's end, or its last
-- activity for 'idle').
-- skip_busy (the expiry worker, which sets lock_timeout): a discard that meets a lock held elsewhere (a
-- table's, one of the world's own objects') for longer than lock_timeout is undone and skipped, instead of
-- failing the caller.
CREATE FUNCTION worlds._expire_worlds(idle interval, max integer, skip_busy boolean,
                                      OUT world text, OUT reason text, OUT since timestamptz) RETURNS SETOF record
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    w worlds.world;
    n integer := 0;
BEGIN
    FOR r IN SELECT x AS w, worlds._due(x, idle) AS why FROM worlds.world x
             WHERE x.dropped IS NULL AND x.num <> 0
               -- (what _due may say yes to, read without locks, so only these are asked: found through the
               -- two small partial indexes of worlds with a TTL and of a SIMULATE's, not by reading every
               -- live world, which every lifecycle statement did (bench P16: a merge among 1,000 live worlds
               -- 1.3x one alone); the idle rule reads them all, and only when it is on: a one-time filter)
               AND x.num IN (SELECT e.num FROM worlds.world e WHERE e.dropped IS NULL AND e.expires IS NOT NULL
                                                               AND e.expires <= clock_timestamp()
                             UNION ALL
                             SELECT s.num FROM worlds.world s WHERE s.dropped IS NULL AND s.meta ? '_worlds_sim'
                             UNION ALL
                             SELECT i.num FROM worlds.world i WHERE idle > interval '0' AND i.dropped IS NULL AND NOT i.pinned
                                                               AND coalesce(i.active, i.created) <= clock_timestamp() - idle)
               AND NOT EXISTS (SELECT 1 FROM worlds.world c WHERE c.parent = x.num AND c.dropped IS NULL)
             ORDER BY x.depth DESC LOOP
        CONTINUE WHEN r.why IS NULL;
        w := r.w;
        -- never waits: this runs inside statements that already hold other locks (a merge holds its
        -- worlds' write locks and main's rows), so a world that is busy, or a create or drop under way,
        -- leaves the expiry to the next statement (docs/architecture.md, "Concurrency": the lock order)
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(hashtext('pg_worlds: create world'));
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(2092147, w.num);
        -- (asked again under the lock)
        CONTINUE WHEN EXISTS (SELECT 1 FROM worlds.world c WHERE c.parent = w.num AND c.dropped IS NULL)
                   OR (SELECT x.dropped IS NOT NULL FROM worlds.world x WHERE x.num = w.num);
        IF skip_busy THEN
            BEGIN
                PERFORM worlds._discard(w);
            EXCEPTION WHEN lock_not_available THEN
                CONTINUE;
            END;
        ELSE
            PERFORM worlds._discard(w);
        END IF;
        -- (SHOW METRICS: worlds expired, by their TTL or idle)
        IF r.why IN ('ttl', 'idle') THEN
            PERFORM worlds._metric_count('worlds expired');
        END IF;
        world := w.name;
        reason := r.why;
        since := CASE r.why WHEN 'ttl' THEN w.expires WHEN 'idle' THEN coalesce(w.active, w.created) END;
        RETURN NEXT;
        n := n + 1;
        EXIT WHEN n >= max;
    END LOOP;
END $$;

-- Discards worlds whose TTL has passed, worlds idle past worlds.world_idle_ttl (unless pinned) and the
-- worlds of a SIMULATE that didn't finish (unless they have live forks). Runs at the start of every
-- lifecycle statement and SHOW WORLDS / SHOW BRANCHES; the expiry worker (time/expiry.rs) does the same
-- in every database every worlds.expiry_interval, with no statement run.
CREATE FUNCTION worlds._expire() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- a standby can't write: the primary discards them, and the standby replays that (nor does a
    -- read-only transaction: the next one that may write does)
    IF pg_is_in_recovery() OR current_setting('transaction_read_only')::boolean THEN
        RETURN;
    END IF;
    -- (at most 100 per statement: each discard holds its world's lock to the end of the transaction, and
    -- a crashed SIMULATE may leave thousands; the next statements go on)
    PERFORM worlds._expire_worlds(worlds._world_idle_ttl(), 100, false);
END $$;

-- Marks a world dropped and frees its delta rows. A session in it moves to its parent.
CREATE FUNCTION worlds._discard(w worlds.world) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t worlds.tables;
BEGIN
    -- the world's write lock (storage/writes.rs): sessions writing it finish first, and their rows are
    -- freed with the rest; a write that comes after finds the world dropped (0A000)
    PERFORM pg_advisory_xact_lock(2092147, w.num);
    -- (a merge that ended it, or a drop, got there first while this waited)
    IF (SELECT x.dropped FROM worlds.world x WHERE x.num = w.num) IS NOT NULL THEN
        RETURN;
    END IF;
    UPDATE worlds.world SET dropped = clock_timestamp() WHERE num = w.num;
    PERFORM worlds._leave_reviews(w.num, 'dropped');
    DELETE FROM worlds.outbox o WHERE o.world = w.num;
    -- its registered readers and marks (governance/readers/registry.sql; a merge brought them first)
    DELETE FROM worlds.reader r WHERE r.world = w.num;
    -- its own objects (what a merge didn't bring to main), with their namespaces
    PERFORM worlds._drop_world_schemas(w.num);
    -- its rows (each table locked first: one main drops meanwhile took its delta with it)
    PERFORM worlds._free_world_rows(w.num);
    INSERT INTO worlds.event (world, event, rows) VALUES (w.num, 'discarded', NULL);
    PERFORM worlds._leave_if_current(w);
END $$;

-- If the session is in w (by name or ID), it carries on from w's live parent.
CREATE FUNCTION worlds._leave_if_current(w worlds.world) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    p worlds.world;
BEGIN
    IF current_setting('worlds.world') IN (w.name, w.id) THEN
        SELECT * INTO p FROM worlds.world WHERE num = w.parent;
        WHILE p.dropped IS NOT NULL LOOP
            SELECT * INTO p FROM worlds.world WHERE num = p.parent;
        END LOOP;
        PERFORM set_config('worlds.world', p.name, false);
    END IF;
END $$;

CREATE FUNCTION worlds.create_world(name text, source text DEFAULT NULL, meta jsonb DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    arg_name ALIAS FOR $1;  -- (not create_world.name: the body runs as create_world__body, catalog/definer.rs)
    src worlds.world;
    at timestamptz;
    past record;
    n integer;
    live bigint;
    cap integer := current_setting('worlds.max_worlds')::integer;
    agent worlds.agent;
    started timestamptz := clock_timestamp();  -- (SHOW METRICS: fork)
BEGIN
    PERFORM worlds._refuse_in_transaction('CREATE WORLD');
    IF name IS NULL THEN
        RAISE EXCEPTION 'a world name can''t be null' USING ERRCODE = 'invalid_name';
    END IF;
    PERFORM worlds._check_world_name(name);
    PERFORM worlds._require(CASE WHEN position('@' IN coalesce(source, '')) > 0 THEN 'fork_past' ELSE 'fork' END);
    -- past worlds.max_disk_bytes: 53100 (storage/disk_limit.rs)
    PERFORM worlds._check_disk_limit(name);
    -- the database's first world, with many tracked tables: a worker gives them their delta ahead, a few
    -- tables a transaction, before this one takes any lock a table's making could wait for
    -- (storage/world_storage.rs)
    PERFORM worlds._prepare_world_storage();
    -- one create at a time (two concurrent ones could both pass the name and max_worlds checks), and none
    -- while its source is being dropped
    PERFORM worlds._lock_worlds();
    -- the database's first world: every tracked table gets the delta worlds write into
    PERFORM worlds._ensure_world_storage();
    meta := worlds._checked_meta(meta);
    -- the declared scope resolved (names as SQL reads them), check_reads as the agent's policy wants it
    -- (governance/scope.rs; 42P01, 42703, 22023, 42501)
    meta := worlds._fork_meta(meta);
    PERFORM worlds._expire();
    source := coalesce(source, current_setting('worlds.world'));
    IF position('@' IN source) > 0 THEN
        -- 'name@when': the new world holds that world as it was then (its parent's layer cut at the time)
        SELECT * INTO past FROM worlds._moment_of(source);
        src := past.w;
        at := past.at;
    ELSE
        src := worlds._resolve(source);
    END IF;
    -- the source's row, key-share locked (as the new row's reference to it locks it): a merge that ends
    -- the source locks it FOR UPDATE first, so either this fork waits and finds the source gone, or the
    -- merge finds this fork and keeps the source open
    IF (SELECT x.dropped FROM worlds.world x WHERE x.num = src.num FOR KEY SHARE) IS NOT NULL THEN
        RAISE EXCEPTION 'world "%" does not exist', src.name USING ERRCODE = 'invalid_catalog_name',
            DETAIL = 'It was merged or dropped while this CREATE WORLD waited.';
    END IF;
    IF EXISTS (SELECT 1 FROM worlds.world w WHERE w.name = arg_name AND w.dropped IS NULL) THEN
        RAISE EXCEPTION 'world "%" already exists', name USING ERRCODE = 'duplicate_object';
    END IF;
    IF src.num <> 0 AND (EXISTS (SELECT 1 FROM worlds.world_schema s WHERE s.world = src.num)
                         OR EXISTS (SELECT 1 FROM worlds.world_twin t WHERE t.world = src.num)) THEN
        RAISE EXCEPTION 'forking world "%" is not supported yet: it has schema changes of its own', src.name
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Merge its schema changes first, or fork its parent.';
    END IF;
    SELECT count(*) INTO live FROM worlds.world WHERE dropped IS NULL AND num <> 0;
    IF cap > 0 AND live >= cap THEN
        RAISE EXCEPTION 'cannot create world "%": the database holds % live worlds, max_worlds is %', name, live, cap
            USING ERRCODE = 'configuration_limit_exceeded',
                  HINT = 'Drop or merge a world, or raise worlds.max_worlds.';
    END IF;
    -- an agent's own quota of live worlds (42501), and its worlds' TTL
    agent := worlds._session_agent();
    IF agent.max_worlds > 0 AND (SELECT count(*) FROM worlds.world w WHERE w.owner = agent.name AND w.dropped IS NULL) >= agent.max_worlds THEN
        RAISE EXCEPTION 'permission denied: agent "%" owns % live worlds, its max_worlds', agent.name, agent.max_worlds
            USING ERRCODE = 'insufficient_privilege', HINT = 'Merge or drop one of its worlds first.';
    END IF;
    n := nextval('worlds.world_num_seq');
    INSERT INTO worlds.world (num, id, name, parent, depth, created, meta, active, fork_snapshot, fork_at, owner, creator, expires)
    VALUES (n, 'w' || lpad(to_hex(n), 6, '0') || '-' || substr(md5(random()::text || clock_timestamp()::text), 1, 10),
            name, src.num, src.depth + 1, clock_timestamp(), meta, clock_timestamp(),
            CASE WHEN at IS NULL THEN pg_current_snapshot() END, at,
            agent.name, worlds._session_user_id(),
            CASE WHEN agent.world_ttl > 0 THEN clock_timestamp() + agent.world_ttl * interval '1 ms' END);
    -- a world that checks its reads keeps them from now (governance/reads: shared memory)
    IF meta -> 'check_reads' = 'true'::jsonb THEN
        PERFORM worlds._reads_begin(n);
    END IF;
    PERFORM worlds._audit('fork', name);
    INSERT INTO worlds.event (world, event) VALUES (n, 'forked from ' || src.name), (src.num, 'forked ' || name);
    PERFORM worlds._metric_time('fork', started);
    RETURN 'CREATE WORLD';
END $$;

CREATE FUNCTION worlds.fork_world(source text, name text, meta jsonb DEFAULT NULL)
RETURNS text
LANGUAGE sql AS $$ SELECT worlds.create_world(name => name, source => source, meta => meta) $$;

CREATE FUNCTION worlds.switch_world(name text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    w worlds.world;
BEGIN
    PERFORM worlds._refuse_in_transaction('SWITCH WORLD');
    -- a world past its TTL is discarded before anyone switches into it
    PERFORM worlds._expire();
    IF position('@' IN name) > 0 THEN
        -- a world as it was: the session reads the past, read only
        PERFORM worlds._require('read');
        PERFORM worlds._moment_of(name);
        PERFORM set_config('worlds.world', name, false);
        RETURN 'SWITCH WORLD';
    END IF;
    w := worlds._resolve(name);
    PERFORM worlds._require('read', w);
    UPDATE worlds.world SET active = clock_timestamp() WHERE num = w.num AND num <> 0;
    PERFORM set_config('worlds.world', w.name, false);
    RETURN 'SWITCH WORLD';
END $$;

-- A row of SHOW WORLDS (also what ALTER WORLD returns).
CREATE TYPE worlds.world_row AS (name text, id text, parent text, depth integer, created timestamptz, version bigint,
                                 meta jsonb, owner text, expires timestamptz, active timestamptz, pinned boolean,
                                 scope jsonb);

CREATE FUNCTION worlds.show_worlds() RETURNS SETOF worlds.world_row
LANGUAGE plpgsql AS $$
BEGIN
    -- worlds a restored dump brought are made by the first SHOW WORLDS (or worlds statement) after it
    PERFORM worlds._restore_pending();
    PERFORM worlds._require('read');
    PERFORM worlds._expire();
    RETURN QUERY
    SELECT w.name, w.id, p.name, w.depth, w.created, w.version,
           (SELECT coalesce(jsonb_object_agg(k, v), '{}') FROM jsonb_each(w.meta) e(k, v) WHERE k NOT LIKE '\_worlds%'),
           w.owner, w.expires, CASE WHEN w.num = 0 THEN NULL ELSE w.active END, w.pinned,
           worlds._scope_shown(w.meta)
    FROM worlds.world w LEFT JOIN worlds.world p ON p.num = w.parent
    WHERE w.dropped IS NULL
    ORDER BY w.num;
END $$;

-- changes: worlds._changes (Rust, src/merge): rows changed since the fork as DIFF counts them.
CREATE FUNCTION worlds.show_branches() RETURNS TABLE (name text, parent text, changes bigint)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM worlds._require('read');
    PERFORM worlds._expire();
    RETURN QUERY
    SELECT w.name, p.name, CASE WHEN w.num = 0 THEN NULL ELSE worlds._changes(w.num) END
    FROM worlds.world w LEFT JOIN worlds.world p ON p.num = w.parent
    WHERE w.dropped IS NULL ORDER BY w.num;
END $$;

-- ALTER WORLD: set_meta sets each key (JSON null removes it); ttl sets expiry that long from now;
-- reset_ttl clears it; pinned sets or resets the pin. Returns the world's SHOW WORLDS row.
CREATE FUNCTION worlds.alter_world(name text, set_meta jsonb DEFAULT NULL, ttl interval DEFAULT NULL,
                                   reset_ttl boolean DEFAULT false, pinned boolean DEFAULT NULL)
RETURNS SETOF worlds.world_row
LANGUAGE plpgsql AS $$
DECLARE
    arg_name ALIAS FOR $1;  -- (not alter_world.name: the body runs as alter_world__body, catalog/definer.rs)
    arg_pinned ALIAS FOR $5;  -- (not alter_world.pinned: the body runs as alter_world__body, catalog/definer.rs)
    w worlds.world;
    m jsonb;
    k text;
    target text := arg_name;
BEGIN
    PERFORM worlds._refuse_in_transaction('ALTER WORLD');
    PERFORM worlds._expire();
    w := worlds._resolve(target);
    PERFORM worlds._require(CASE WHEN ttl IS NOT NULL OR reset_ttl OR arg_pinned IS NOT NULL THEN 'ttl_pin' ELSE 'alter' END, w);
    PERFORM worlds._audit('alter', w.name);
    IF w.num = 0 AND (ttl IS NOT NULL OR reset_ttl OR arg_pinned IS NOT NULL) THEN
        RAISE EXCEPTION 'main cannot expire or be pinned' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF set_meta IS NOT NULL THEN
        PERFORM worlds._checked_meta(set_meta);
        m := w.meta;
        FOR k IN SELECT jsonb_object_keys(set_meta) LOOP
            IF jsonb_typeof(set_meta -> k) = 'null' THEN m := m - k; ELSE m := m || jsonb_build_object(k, set_meta -> k); END IF;
        END LOOP;
        PERFORM worlds._checked_meta(m - '_worlds_scope');
        -- check_reads only turned off, the scope changed by people only, and resolved again (scope.rs)
        m := worlds._alter_meta(w.name, w.meta, m);
        UPDATE worlds.world SET meta = m WHERE num = w.num;
        INSERT INTO worlds.event (world, event) VALUES (w.num, 'metadata changed');
    END IF;
    IF ttl IS NOT NULL AND clock_timestamp() + ttl <= clock_timestamp() THEN
        RAISE EXCEPTION 'TTL must be a positive interval, not %', ttl USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF ttl IS NOT NULL THEN
        UPDATE worlds.world SET expires = clock_timestamp() + ttl WHERE num = w.num;
    ELSIF reset_ttl THEN
        UPDATE worlds.world SET expires = NULL WHERE num = w.num;
    END IF;
    IF arg_pinned IS NOT NULL THEN
        UPDATE worlds.world SET pinned = arg_pinned WHERE num = w.num;
    END IF;
    RETURN QUERY SELECT * FROM worlds.show_worlds() s WHERE s.id = w.id;
END $$;

CREATE FUNCTION worlds.drop_world(name text, if_exists boolean DEFAULT false, cascade boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    arg_name ALIAS FOR $1;  -- (not drop_world.name: the body runs as drop_world__body, catalog/definer.rs)
    w worlds.world;
    d worlds.world;
    forks text;
BEGIN
    PERFORM worlds._refuse_in_transaction('DROP WORLD');
    PERFORM worlds._lock_worlds();  -- (no world forked from it while it goes)
    PERFORM worlds._expire();
    BEGIN
        w := worlds._resolve(arg_name);
    EXCEPTION WHEN invalid_catalog_name THEN
        IF if_exists THEN
            RAISE NOTICE 'world "%" does not exist, skipping', arg_name;
            RETURN 'DROP WORLD';
        END IF;
        RAISE;
    END;
    IF w.num = 0 THEN
        RAISE EXCEPTION 'main cannot be dropped' USING ERRCODE = 'feature_not_supported';
    END IF;
    PERFORM worlds._require('drop', w);
    PERFORM worlds._audit('drop', w.name);
    PERFORM worlds._leave_reviews(w.num, 'dropped');
    SELECT string_agg(c.name, ', ' ORDER BY c.num) INTO forks FROM worlds.world c WHERE c.parent = w.num AND c.dropped IS NULL;
    IF forks IS NOT NULL AND NOT cascade THEN
        RAISE EXCEPTION 'cannot drop world "%" because other worlds were forked from it: %', w.name, forks
            USING ERRCODE = 'dependent_objects_still_exist', HINT = 'Use DROP WORLD ... CASCADE to drop them too.';
    END IF;
    -- the write locks of it and every world forked from it, in world-number order (the order every
    -- statement takes them in), then each is discarded, deepest first
    PERFORM pg_advisory_xact_lock(2092147, s.num) FROM (
        WITH RECURSIVE sub AS (
            SELECT x.num FROM worlds.world x WHERE x.num = w.num
            UNION ALL
            SELECT c.num FROM worlds.world c JOIN sub ON c.parent = sub.num WHERE c.dropped IS NULL)
        SELECT sub.num FROM sub ORDER BY sub.num) s;
    FOR d IN WITH RECURSIVE sub AS (
                 SELECT * FROM worlds.world WHERE num = w.num
                 UNION ALL
                 SELECT c.* FROM worlds.world c JOIN sub ON c.parent = sub.num WHERE c.dropped IS NULL)
             SELECT * FROM sub ORDER BY depth DESC, num DESC LOOP
        PERFORM worlds._discard(d);
    END LOOP;
    RETURN 'DROP WORLD';
END $$;
