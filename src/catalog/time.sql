-- Time: moments, AS OF, history retention, checkpoints, RESTORE and UNDO MERGE.
-- History of main records each change with its statement's time (_w_at); a table as of a moment is its
-- current rows minus those created since, plus the first before-image of each row changed since — what
-- the overlay shows a session in 'main@when'.

CREATE TABLE worlds.settings (name text PRIMARY KEY, value text NOT NULL);
INSERT INTO worlds.settings VALUES ('history_retention', '1 day');
-- Settings are dumped; a restore's rows replace the defaults CREATE EXTENSION put there.
SELECT pg_catalog.pg_extension_config_dump('worlds.settings', '');
CREATE FUNCTION worlds._settings_upsert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE worlds.settings SET value = NEW.value WHERE name = NEW.name;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER settings_upsert BEFORE INSERT ON worlds.settings FOR EACH ROW EXECUTE FUNCTION worlds._settings_upsert();

CREATE TABLE worlds.checkpoint (
    world integer NOT NULL REFERENCES worlds.world (num),
    label text NOT NULL,
    at    timestamptz NOT NULL,
    PRIMARY KEY (world, label)
);

CREATE FUNCTION worlds.history_retention() RETURNS interval
LANGUAGE sql STABLE AS $$ SELECT value::interval FROM worlds.settings WHERE name = 'history_retention' $$;

-- ALTER SYSTEM SET history_retention = '<interval>' (or TO '0'): how far back time travel reaches.
CREATE FUNCTION worlds.set_history_retention(value text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    i interval;
BEGIN
    PERFORM worlds._refuse_in_transaction('ALTER SYSTEM');
    PERFORM worlds._require('admin');
    IF value IS NULL THEN
        RAISE EXCEPTION 'history_retention must be an interval, not null' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    BEGIN
        i := value::interval;
    EXCEPTION WHEN OTHERS THEN
        RAISE EXCEPTION 'history_retention must be an interval, not "%"', value USING ERRCODE = 'invalid_parameter_value';
    END;
    IF i < interval '0' THEN
        RAISE EXCEPTION 'history_retention can''t be negative' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE worlds.settings SET value = i::text WHERE name = 'history_retention';
    RETURN 'ALTER SYSTEM';
END $$;
-- as Postgres's own ALTER SYSTEM: superusers (and roles they grant it to), since '0' takes everyone's
-- time travel away
REVOKE EXECUTE ON FUNCTION worlds.set_history_retention(text) FROM PUBLIC;

-- A moment: a time (UTC unless it gives an offset), 'now', or a time ago ('-15 minutes', '-1 day').
-- 22P02 when it is none of these; 22023 when it is earlier than the history window or later than now.
-- (Evaluated with TimeZone UTC: a time without an offset or zone is UTC; one with either keeps it.)
CREATE FUNCTION worlds.moment(spec text) RETURNS timestamptz
LANGUAGE plpgsql STABLE SET timezone = 'UTC' AS $$
DECLARE
    s text := btrim(coalesce(spec, ''));
    t timestamptz;
BEGIN
    BEGIN
        IF lower(s) = 'now' THEN
            t := now();
        ELSIF s ~ '^[-+]' THEN  -- a time ago, or (22023) one from now
            t := now() + s::interval;
        ELSE
            t := s::timestamptz;
        END IF;
    EXCEPTION WHEN OTHERS THEN
        RAISE EXCEPTION 'AS OF needs a time: "%" is not a time, now, or a time ago (''-1 hour'')', spec
            USING ERRCODE = 'invalid_text_representation';
    END;
    RETURN worlds._in_window(t);
END $$;

CREATE FUNCTION worlds.moment(t timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE AS $$ SELECT worlds._in_window(t) $$;

-- A timestamp or date value has no offset: it is UTC, as a written time is.
CREATE FUNCTION worlds.moment(t timestamp) RETURNS timestamptz
LANGUAGE sql STABLE AS $$ SELECT worlds._in_window(t AT TIME ZONE 'UTC') $$;

CREATE FUNCTION worlds.moment(d date) RETURNS timestamptz
LANGUAGE sql STABLE AS $$ SELECT worlds._in_window(d::timestamp AT TIME ZONE 'UTC') $$;

-- Any other value is not a time (22P02), whatever its type.
CREATE FUNCTION worlds._not_a_time(v text) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RAISE EXCEPTION 'AS OF needs a time: % is not a time, now, or a time ago (''-1 hour'')', coalesce(v, 'NULL')
        USING ERRCODE = 'invalid_text_representation';
END $$;
CREATE FUNCTION worlds.moment(v smallint) RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT worlds._not_a_time(v::text) $$;
CREATE FUNCTION worlds.moment(v integer) RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT worlds._not_a_time(v::text) $$;
CREATE FUNCTION worlds.moment(v bigint) RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT worlds._not_a_time(v::text) $$;
CREATE FUNCTION worlds.moment(v numeric) RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT worlds._not_a_time(v::text) $$;
CREATE FUNCTION worlds.moment(v double precision) RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT worlds._not_a_time(v::text) $$;
CREATE FUNCTION worlds.moment(v boolean) RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT worlds._not_a_time(v::text) $$;
CREATE FUNCTION worlds.moment(v interval) RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT worlds._not_a_time(v::text) $$;
CREATE FUNCTION worlds.moment(v jsonb) RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT worlds._not_a_time(v::text) $$;

CREATE FUNCTION worlds._in_window(t timestamptz) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF t > now() + interval '1 second' THEN
        RAISE EXCEPTION 'the moment % is later than now', t USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF t < now() - worlds.history_retention() THEN
        RAISE EXCEPTION 'the moment % is earlier than the history window (history_retention is %)', t, worlds.history_retention()
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'ALTER SYSTEM SET history_retention = ''<interval>'' keeps more history.';
    END IF;
    RETURN t;
END $$;

-- AS OF: a query reading a table as it was at `at`, straight from the table and its history (no world
-- needed; the router leaves a table read as `_w_main` unrouted, so inside a world too it reads main): the
-- rows main had not created by then, plus the first before-image after then of every physical row that
-- existed then. O(table) for the scan plus O(changes since) for history, hashed.
--   same_shape: the table's columns as they are now (a column added since reads as NULL) — worlds.as_of
--   otherwise: its columns as they were then (added since: absent; dropped since: present) — AS OF in
--   statements. A tracked table dropped since `at` is read from its history.
-- The name a column had at `at` (its name now, or when it was dropped, unless renamed since `at`).
CREATE FUNCTION worlds._name_at(tabno integer, attnum int2, at timestamptz, later_name text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT l.attname FROM worlds.column_log l
                     WHERE l.tabno = $1 AND l.attnum = $2 AND l.renamed AND l.dropped > $3
                     ORDER BY l.dropped LIMIT 1), $4)
$$;

CREATE FUNCTION worlds._as_of_query(source text, at timestamptz, same_shape boolean) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    rel regclass;
    t worlds.tables;
    gone worlds.dropped_table;
    parts text[] := parse_ident(source);
    a record;
    l worlds.column_log;
    tabno integer;
    changes regclass;
    outs text[] := '{}';
    bcols text[] := '{}';
    hcols text[] := '{}';
    when_lit text := quote_literal(at::text) || '::timestamptz';
    was text;
BEGIN
    rel := to_regclass(source);
    IF rel IS NOT NULL THEN
        SELECT * INTO t FROM worlds.tables WHERE relid = rel;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'AS OF reads tracked tables: % isn''t one', source USING ERRCODE = 'wrong_object_type';
        END IF;
        tabno := t.tabno;
        changes := t.changes;
        FOR a IN SELECT c.attnum, c.attname::text AS name, c.attisdropped, format_type(c.atttypid, c.atttypmod) AS typ
                 FROM pg_attribute c WHERE c.attrelid = rel AND c.attnum > 0 ORDER BY c.attnum LOOP
            IF NOT a.attisdropped THEN
                IF EXISTS (SELECT 1 FROM worlds.column_log x WHERE x.tabno = t.tabno AND x.attnum = a.attnum AND x.added > at) THEN
                    CONTINUE WHEN NOT same_shape;
                    bcols := bcols || format('NULL::%s AS %I', a.typ, a.name);
                    hcols := hcols || format('NULL::%s', a.typ);
                    outs := outs || format('x.%I', a.name);
                ELSE
                    -- read under the name it had then (history's column is renamed with the table's)
                    was := CASE WHEN same_shape THEN a.name ELSE worlds._name_at(t.tabno, a.attnum::int2, at, a.name) END;
                    bcols := bcols || format('_w_main.%I AS %I', a.name, was);
                    hcols := hcols || format('h.%I', a.name);
                    outs := outs || format('x.%I', was);
                END IF;
            ELSIF NOT same_shape THEN
                SELECT * INTO l FROM worlds.column_log x WHERE x.tabno = t.tabno AND x.attnum = a.attnum AND NOT x.renamed
                    AND x.dropped > at AND (x.added IS NULL OR x.added <= at);
                CONTINUE WHEN NOT FOUND;
                was := worlds._name_at(t.tabno, a.attnum::int2, at, l.attname);
                -- rows unchanged since still hold a dropped column's value in the heap
                bcols := bcols || format('worlds._dropped_value(%s::oid, _w_main.ctid, %s::int2, NULL::%s) AS %I', rel::oid, a.attnum, l.typ, was);
                hcols := hcols || format('h.%I', l.attname);
                outs := outs || format('x.%I', was);
            END IF;
        END LOOP;
    ELSE
        SELECT * INTO gone FROM worlds.dropped_table d
        WHERE d.table_name = parts[cardinality(parts)] AND (cardinality(parts) = 1 OR d.schema_name = parts[1]) AND d.dropped > at
        ORDER BY d.dropped LIMIT 1;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'relation "%" does not exist', source USING ERRCODE = 'undefined_table';
        END IF;
        IF same_shape THEN
            RAISE EXCEPTION 'table % was dropped: read it as it was with AS OF in a statement (worlds.sql)', source USING ERRCODE = 'wrong_object_type';
        END IF;
        IF NOT worlds._may_read_history(0) THEN
            RAISE EXCEPTION 'permission denied to read table % as it was: it was dropped, and only superusers read dropped tables', source
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        tabno := gone.tabno;
        changes := gone.changes;
        FOR a IN SELECT n.attnum, n.name FROM unnest(gone.columns) WITH ORDINALITY AS n(name, attnum) WHERE n.name IS NOT NULL ORDER BY n.attnum LOOP
            CONTINUE WHEN EXISTS (SELECT 1 FROM worlds.column_log x WHERE x.tabno = gone.tabno AND x.attnum = a.attnum AND x.added > at);
            was := worlds._name_at(gone.tabno, a.attnum::int2, at, a.name);
            hcols := hcols || format('h.%I AS %I', a.name, was);
            outs := outs || format('x.%I', was);
        END LOOP;
        FOR l IN SELECT * FROM worlds.column_log x WHERE x.tabno = gone.tabno AND NOT x.renamed AND x.dropped > at
                   AND (x.added IS NULL OR x.added <= at) ORDER BY x.attnum LOOP
            was := worlds._name_at(gone.tabno, l.attnum, at, l.attname);
            hcols := hcols || format('h.%I AS %I', l.attname, was);
            outs := outs || format('x.%I', was);
        END LOOP;
    END IF;
    IF cardinality(outs) = 0 THEN
        RAISE EXCEPTION 'table % had no columns at %', source, at USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF rel IS NOT NULL AND changes IS NULL THEN
        -- no storage yet (worlds._make_history): no change kept since it was tracked, it is as it was
        RETURN format('SELECT %s FROM (SELECT %s FROM ONLY %s _w_main) x', array_to_string(outs, ', '), array_to_string(bcols, ', '), rel);
    END IF;
    RETURN format(
        'SELECT %s FROM (%s SELECT %s FROM (SELECT DISTINCT ON (h._w_old_tid) * FROM %s h WHERE h._w_at > %s AND h._w_old_tid IS NOT NULL ORDER BY h._w_old_tid, h._w_hseq) h
           WHERE NOT EXISTS (SELECT 1 FROM %s c WHERE c._w_at > %s AND c._w_new_tid = h._w_old_tid AND c._w_hseq < h._w_hseq)) x',
        array_to_string(outs, ', '),
        CASE WHEN rel IS NULL THEN '' ELSE format(
            'SELECT %s FROM ONLY %s _w_main WHERE NOT worlds._created_since(%s, %s, _w_main.ctid) UNION ALL',
            array_to_string(bcols, ', '), rel, rel::oid, when_lit) END,
        array_to_string(hcols, ', '), changes, when_lit, changes, when_lit);
END $$;

-- AS OF: select * from worlds.as_of(null::orders, '-1 hour') -- the table as it was then, with its columns
-- as they are now (AS OF in a statement run by worlds.sql shows the columns as they were). Runs with the
-- caller's rights (SECURITY INVOKER: a role sees the past of what it may read now, nothing more).
CREATE FUNCTION worlds.as_of(tbl anyelement, moment timestamptz) RETURNS SETOF anyelement
LANGUAGE plpgsql AS $$
DECLARE
    rel regclass := (SELECT typrelid FROM pg_type WHERE oid = pg_typeof(tbl));
BEGIN
    IF rel IS NULL THEN
        RAISE EXCEPTION 'AS OF reads tracked tables: % isn''t one', pg_typeof(tbl) USING ERRCODE = 'wrong_object_type';
    END IF;
    PERFORM worlds._require_select(rel);
    RETURN QUERY EXECUTE worlds._as_of_query(rel::text, worlds.moment(moment), true);
END $$;

CREATE FUNCTION worlds.as_of(tbl anyelement, moment text) RETURNS SETOF anyelement
LANGUAGE sql STABLE AS $$ SELECT * FROM worlds.as_of(tbl, worlds.moment(moment)) $$;

-- CHECKPOINT WORLD name AS 'label': names this moment of the world; the same label again moves it.
CREATE FUNCTION worlds.checkpoint_world(name text, label text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    arg_label ALIAS FOR $2;  -- (not checkpoint_world.label: the body runs as checkpoint_world__body, catalog/definer.rs)
    w worlds.world := worlds._resolve(name);
BEGIN
    PERFORM worlds._require('checkpoint', w);
    IF label IS NULL OR btrim(label) = '' THEN
        RAISE EXCEPTION 'a checkpoint needs a label' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM worlds._audit('checkpoint', w.name);
    INSERT INTO worlds.checkpoint AS c (world, label, at) VALUES (w.num, arg_label, clock_timestamp())
    ON CONFLICT ON CONSTRAINT checkpoint_pkey DO UPDATE SET at = excluded.at;
    RETURN 'CHECKPOINT';
END $$;

-- SHOW CHECKPOINTS [FOR [WORLD] name]: the live worlds' checkpoints (one world's with FOR), by world
-- and time: what RESTORE ... TO CHECKPOINT can name.
CREATE FUNCTION worlds.show_checkpoints(for_world text DEFAULT NULL)
RETURNS TABLE (world text, label text, at timestamptz)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    only_num integer;
BEGIN
    PERFORM worlds._require('read');
    IF for_world IS NOT NULL THEN
        only_num := (worlds._resolve(for_world)).num;
    END IF;
    RETURN QUERY SELECT w.name, c.label, c.at FROM worlds.checkpoint c JOIN worlds.world w ON w.num = c.world
                 WHERE w.dropped IS NULL AND (only_num IS NULL OR c.world = only_num)
                 ORDER BY w.name, c.at, c.label;
END $$;

-- SHOW HISTORY [FOR [WORLD] name] [LIMIT n]: what happened to the world, newest first. A dropped
-- world's name still works.
CREATE TYPE worlds.history_row AS (at timestamptz, world text, event text, rows bigint);

CREATE FUNCTION worlds.show_history(world text DEFAULT NULL, "limit" bigint DEFAULT 100)
RETURNS SETOF worlds.history_row
LANGUAGE plpgsql AS $$
DECLARE
    arg_world ALIAS FOR $1;  -- (not show_history.world: the body runs as show_history__body, catalog/definer.rs)
    target text := coalesce(arg_world, current_setting('worlds.world'));
    nums integer[];
BEGIN
    PERFORM worlds._require('read');
    PERFORM worlds._flush_event_rows();  -- rows this session counted for its latest event
    SELECT array_agg(num) INTO nums FROM worlds.world w WHERE w.name = target OR w.id = target;
    IF nums IS NULL THEN
        RAISE EXCEPTION 'world "%" does not exist', target USING ERRCODE = 'invalid_catalog_name';
    END IF;
    RETURN QUERY
    SELECT x.at, x.name, x.event, x.rows FROM (
        SELECT e.at, w.name, e.event, e.rows, e.seq
        FROM worlds.event e JOIN worlds.world w ON w.num = e.world
        WHERE e.world = ANY (nums) AND e.at >= now() - worlds.history_retention()
        UNION ALL
        -- main's own writes are in its history, not in worlds.event (main pays nothing more for them)
        SELECT m.at, 'main', m.event, m.rows, NULL
        FROM worlds._main_writes(now() - worlds.history_retention()) m WHERE 0 = ANY (nums)
    ) x
    ORDER BY x.at DESC, x.seq DESC NULLS LAST
    LIMIT coalesce("limit", 100);
END $$;

-- Main's writes since a moment, from the history of every tracked table (dropped ones too): one event per
-- transaction, a `write` (one statement) or a `commit` (several), with the rows it changed. Changes a
-- merge brought in are its `merged ...` event, not writes. O(history in the window). It reads history as
-- its owner (any role may see when main was written and how much, as SHOW HISTORY shows for worlds).
CREATE FUNCTION worlds._main_writes(since timestamptz) RETURNS SETOF worlds.history_row
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- (each table read in a subtransaction of its own, its locks released once read: time/main_writes.rs)
    RETURN QUERY
    SELECT max(p.at), 'main'::text, CASE WHEN count(DISTINCT p.at) > 1 THEN 'commit' ELSE 'write' END, sum(p.rows)::bigint
    FROM worlds._main_writes_parts(since) p GROUP BY p.xid;
END $$;

-- Deletes history older than history_retention that no live world still needs (entries before every
-- root world's fork point), at most batch_size rows per table and kind, so writers are never held up.
-- The expiry worker (time/expiry.rs) calls it in every database; it can be called by hand. Returns the rows deleted.
CREATE FUNCTION worlds.purge_history(batch_size integer DEFAULT 1000) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    tab integer;
    n bigint := 0;
BEGIN
    PERFORM worlds._purge_dropped();
    FOR tab IN SELECT tabno FROM worlds.tables WHERE history IS NOT NULL ORDER BY tabno LOOP
        n := n + worlds._purge_table(tab, batch_size);
    END LOOP;
    RETURN n;
END $$;

-- The purge's part that isn't a tracked table's history: the storage of tables dropped longer ago than
-- the window (AS OF can't reach them any more), the column log's old entries, and old AS OF copies.
CREATE FUNCTION worlds._purge_dropped() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    gone worlds.dropped_table;
    cutoff timestamptz := now() - worlds.history_retention();
BEGIN
    FOR gone IN SELECT * FROM worlds.dropped_table WHERE dropped < cutoff LOOP
        PERFORM worlds._drop_relation(gone.changes);
        PERFORM worlds._drop_relation(gone.history);
        PERFORM worlds._drop_relation(gone.inserts);
        DELETE FROM worlds.dropped_table d WHERE d.tabno = gone.tabno;
        DELETE FROM worlds.column_log l WHERE l.tabno = gone.tabno;
    END LOOP;
    DELETE FROM worlds.column_log l WHERE l.dropped < cutoff;
    PERFORM worlds._purge_as_of_cache(cutoff);
END $$;

-- One tracked table's history and inserts older than the window, at most batch_size rows of each, kept
-- where a live world of main still sees main through them (its fork snapshot, or its fork time for a
-- world of the past). 0 for a table that is no longer tracked. With nowait (the expiry worker), their
-- locks are taken NOWAIT first: lock_not_available at once when another session holds them (a DROP,
-- an ALTER), so the worker never waits for a table while it holds another's, and is never one end of a
-- deadlock (a DROP SCHEMA ... CASCADE beside it was once chosen as a deadlock's victim).
CREATE FUNCTION worlds._purge_table(tab integer, batch_size integer, nowait boolean DEFAULT false) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    t worlds.tables;
    rel regclass;
    n bigint := 0;
    c bigint;
    cutoff timestamptz := now() - worlds.history_retention();
    snaps pg_snapshot[];
    fork_ats timestamptz[];
BEGIN
    SELECT * INTO t FROM worlds.tables WHERE tabno = tab AND history IS NOT NULL;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    -- worlds of main (the roots of every chain) see main through their fork points
    SELECT coalesce(array_agg(fork_snapshot) FILTER (WHERE fork_snapshot IS NOT NULL), '{}'),
           coalesce(array_agg(fork_at) FILTER (WHERE fork_at IS NOT NULL), '{}')
    INTO snaps, fork_ats
    FROM worlds.world WHERE dropped IS NULL AND num <> 0 AND parent = 0;
    IF nowait THEN
        FOREACH rel IN ARRAY ARRAY[t.history, t.inserts] LOOP
            EXECUTE format('LOCK TABLE %s IN ROW EXCLUSIVE MODE NOWAIT', rel);
        END LOOP;
    END IF;
    FOREACH rel IN ARRAY ARRAY[t.history, t.inserts] LOOP
        EXECUTE format($q$
            DELETE FROM %1$s WHERE ctid = ANY (ARRAY(
                SELECT h.ctid FROM %1$s h
                WHERE h._w_at < $1
                  AND NOT EXISTS (SELECT 1 FROM unnest($2::pg_snapshot[]) s WHERE NOT pg_visible_in_snapshot(h._w_xid, s))
                  AND NOT EXISTS (SELECT 1 FROM unnest($3::timestamptz[]) a WHERE h._w_at > a)
                LIMIT $4))
            $q$, rel) USING cutoff, snaps, fork_ats, batch_size;
        GET DIAGNOSTICS c = ROW_COUNT;
        n := n + c;
    END LOOP;
    RETURN n;
END $$;

-- The expiry worker's purge (time/expiry.rs), a step per transaction: the dropped tables' part (tabs
-- NULL), or a batch of each of a few tables (the worker passes 32 at a time). A purge of every table in
-- one transaction took four locks a tracked table at once (its history, its inserts and their indexes),
-- and with a few thousand tracked tables filled the shared lock table, so that a migration running beside
-- it failed with "out of shared memory"; a step holds a few tables' locks. A table whose lock another
-- session holds (taken NOWAIT: a table being dropped or altered) keeps its batch for the next round,
-- and the others go on; -1 when the dropped tables' part met a lock held past the worker's lock_timeout.
CREATE FUNCTION worlds._purge_batch(tabs integer[], batch_size integer) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    tab integer;
    n bigint := 0;
BEGIN
    IF tabs IS NULL THEN
        BEGIN
            PERFORM worlds._purge_dropped();
        EXCEPTION WHEN lock_not_available THEN
            RETURN -1;
        END;
        RETURN 0;
    END IF;
    FOREACH tab IN ARRAY tabs LOOP
        BEGIN
            n := n + worlds._purge_table(tab, batch_size, true);
        EXCEPTION WHEN lock_not_available THEN
            NULL;
        END;
    END LOOP;
    RETURN n;
END $$;

-- AS OF a fixed time: "rebuilt from history once, then cached" (the spec). A past moment never changes
-- once no transaction that began before it can still commit, so its rows are kept in an unlogged copy
-- in worlds_data and later statements read that instead of rebuilding them. At most
-- worlds._as_of_cache_per_table() moments per table (the least recently used go); the purge drops copies
-- of moments the history window no longer reaches and of tables no longer tracked.
CREATE TABLE worlds.as_of_cache (
    tabno integer NOT NULL,
    at    timestamptz NOT NULL,
    relation regclass NOT NULL,
    used  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tabno, at)
);

CREATE FUNCTION worlds._as_of_cache_per_table() RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 4 $$;

-- The cached copy of rel as it was at `at` (made now if need be), or NULL when it can't be cached: a
-- transaction that began before `at` is still open (it may yet commit changes dated before it), the table
-- has row-level security (the copy would hold rows the role may not see), or nothing may be written
-- (a read-only transaction, a standby). Runs as the extension's owner; readers are checked by
-- worlds._require_select.
CREATE FUNCTION worlds._as_of_cached(rel regclass, at timestamptz) RETURNS regclass
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET client_min_messages = warning
    SET max_parallel_workers_per_gather = 0 AS $$  -- built once: serially (its helpers read history through SPI)
DECLARE
    arg_at ALIAS FOR $2;  -- (not _as_of_cached.at: the body runs as _as_of_cached__body, catalog/definer.rs)
    t worlds.tables;
    found_copy regclass;
    name text;
    old record;
BEGIN
    IF current_setting('transaction_read_only')::boolean OR pg_is_in_recovery() THEN
        RETURN NULL;
    END IF;
    SELECT * INTO t FROM worlds.tables WHERE relid = rel;
    IF NOT FOUND OR t.history IS NULL OR (SELECT relrowsecurity FROM pg_class WHERE oid = rel) THEN
        RETURN NULL;
    END IF;
    SELECT relation INTO found_copy FROM worlds.as_of_cache c WHERE c.tabno = t.tabno AND c.at = arg_at;
    IF found_copy IS NULL THEN
        IF EXISTS (SELECT 1 FROM pg_stat_activity WHERE xact_start <= arg_at AND pid <> pg_backend_pid()
                   AND backend_type = 'client backend') THEN
            RETURN NULL;
        END IF;
        -- one session builds a moment; the others wait for it and find it made
        PERFORM pg_advisory_xact_lock(hashtext('pg_worlds as_of'), t.tabno);
        SELECT relation INTO found_copy FROM worlds.as_of_cache c WHERE c.tabno = t.tabno AND c.at = arg_at;
    END IF;
    IF found_copy IS NOT NULL THEN
        UPDATE worlds.as_of_cache c SET used = clock_timestamp() WHERE c.tabno = t.tabno AND c.at = arg_at;
        RETURN format('worlds_data.%I', 'v' || (SELECT relname FROM pg_class WHERE oid = found_copy))::regclass;
    END IF;
    name := format('c_%s_%s', t.tabno, to_char(at AT TIME ZONE 'UTC', 'YYYYMMDDHH24MISSUS'));
    EXECUTE format('CREATE UNLOGGED TABLE worlds_data.%I AS %s', name, worlds._as_of_query(rel::text, at, false));
    -- read through a view that asks, as the reader, for SELECT on the table (a one-time filter): the copy
    -- gives no one more than the table does now
    EXECUTE format('CREATE VIEW worlds_data.%I AS SELECT * FROM worlds_data.%I WHERE pg_catalog.has_table_privilege(%s::oid, ''SELECT'')',
                   'v' || name, name, rel::oid);
    EXECUTE format('GRANT SELECT ON worlds_data.%I TO PUBLIC', 'v' || name);
    found_copy := format('worlds_data.%I', name)::regclass;
    PERFORM worlds._own_storage();
    INSERT INTO worlds.as_of_cache (tabno, at, relation) VALUES (t.tabno, at, found_copy);
    FOR old IN SELECT * FROM worlds.as_of_cache c WHERE c.tabno = t.tabno
               ORDER BY c.used DESC OFFSET worlds._as_of_cache_per_table() LOOP
        PERFORM worlds._drop_relation(old.relation);
        DELETE FROM worlds.as_of_cache c WHERE c.tabno = old.tabno AND c.at = old.at;
    END LOOP;
    RETURN format('worlds_data.%I', 'v' || name)::regclass;
END $$;

-- 42501 unless the role may read the table now (a cached moment is read with the rights the table gives),
-- every row of it: AS OF reads history's before-images, which row-level security can't filter.
CREATE FUNCTION worlds._require_select(rel regclass) RETURNS void  -- runs as the caller (install.sql)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF rel IS NULL THEN
        RETURN;  -- (not a table now: AS OF says what it is)
    END IF;
    IF NOT has_table_privilege(rel, 'SELECT') THEN
        RAISE EXCEPTION 'permission denied for table %', (SELECT relname FROM pg_class WHERE oid = rel)
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF row_security_active(rel) THEN
        RAISE EXCEPTION 'permission denied for table %: AS OF reads its past rows whole, and row-level security keeps some of them from this role',
            (SELECT relname FROM pg_class WHERE oid = rel)
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Read the past as the table''s owner or a role that bypasses row-level security.';
    END IF;
END $$;

-- Drops cached moments the history window no longer reaches, and those of tables no longer tracked.
CREATE FUNCTION worlds._purge_as_of_cache(cutoff timestamptz) RETURNS void
LANGUAGE plpgsql SET client_min_messages = warning AS $$
DECLARE
    old record;
BEGIN
    FOR old IN SELECT * FROM worlds.as_of_cache c
               WHERE c.at < cutoff OR NOT EXISTS (SELECT 1 FROM worlds.tables t WHERE t.tabno = c.tabno) LOOP
        PERFORM worlds._drop_relation(old.relation);
        DELETE FROM worlds.as_of_cache c WHERE c.tabno = old.tabno AND c.at = old.at;
    END LOOP;
END $$;

-- A session in 'main@when' reads each table with the columns it had then: temporary views, named as the
-- tracked tables whose columns changed since and the tables dropped since, found before them by name
-- (pg_temp comes first in search_path). Made and dropped by the router (src/time/past_schema.rs) when the
-- session enters or leaves the moment; they run as the session's role. Each reads the table as of the
-- session's moment, taken anew per statement: `_past_session_moment()`, which also ties the views to
-- pg_worlds (they are found by their dependency on it) and refuses to read once the session has left.
CREATE FUNCTION worlds._past_session_moment() RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    s text := current_setting('worlds.world');
BEGIN
    IF lower(split_part(s, '@', 1)) <> 'main' OR position('@' IN s) = 0 THEN
        RAISE EXCEPTION 'this view shows a table as it was in a session in ''main@when'', and the session has left it (it is in %)', s
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'The next statement drops such views; run the query again.';
    END IF;
    RETURN (SELECT m.at FROM worlds._moment_of(s) m);
END $$;

-- The session's views of the past (they depend on `_past_session_moment()`).
CREATE FUNCTION worlds._past_views() RETURNS SETOF regclass
LANGUAGE sql STABLE AS $$
    SELECT DISTINCT r.ev_class::regclass
    FROM pg_rewrite r JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
    JOIN pg_class c ON c.oid = r.ev_class
    WHERE d.refclassid = 'pg_proc'::regclass AND d.refobjid = 'worlds._past_session_moment()'::regprocedure
      AND c.relnamespace = pg_my_temp_schema()
$$;

CREATE FUNCTION worlds._unshadow_past() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v regclass;
    n integer := 0;
BEGIN
    FOR v IN SELECT * FROM worlds._past_views() LOOP
        EXECUTE format('DROP VIEW %s', v);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

CREATE FUNCTION worlds._shadow_past(setting text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    at timestamptz := (SELECT m.at FROM worlds._moment_of(setting) m);
    r record;
    q text;
    n integer := 0;
BEGIN
    PERFORM worlds._unshadow_past();
    FOR r IN SELECT t.relid::regclass::text AS source, c.relname::text AS name
             FROM worlds.tables t JOIN pg_class c ON c.oid = t.relid
             WHERE pg_table_is_visible(t.relid)
               AND EXISTS (SELECT 1 FROM worlds.column_log l WHERE l.tabno = t.tabno AND (l.added > at OR l.dropped > at))
             UNION ALL
             SELECT DISTINCT ON (d.table_name) quote_ident(d.table_name), d.table_name
             FROM worlds.dropped_table d
             WHERE d.dropped > at AND to_regclass(quote_ident(d.table_name)) IS NULL
               AND d.schema_name = ANY (current_schemas(false)) LOOP
        BEGIN
            q := worlds._as_of_query(r.source, at, false);
            -- rows as of the session's moment each statement (the columns are those of `at`)
            q := replace(q, quote_literal(at::text) || '::timestamptz', '(SELECT worlds._past_session_moment())');
            EXECUTE format('CREATE TEMPORARY VIEW %I AS %s', r.name, q);
            n := n + 1;
        EXCEPTION WHEN insufficient_privilege OR wrong_object_type OR undefined_table OR invalid_parameter_value THEN
            -- not readable by this role (a dropped table: superusers only), or no columns then: left out
            NULL;
        END;
    END LOOP;
    RETURN n;
END $$;

-- DIFF of two moments: the tracked tables' schema changes between them, as DIFF rows (change, columns) and
-- statements that make them (AS SQL). From `a` to `b`, either order: a later `b` replays what happened,
-- an earlier one undoes it. Tables created (tracking began), dropped, and columns added, dropped, renamed.
CREATE FUNCTION worlds._schema_changes(a timestamptz, b timestamptz)
RETURNS TABLE ("table" text, change text, columns jsonb, sql text[])
LANGUAGE plpgsql STABLE AS $$
DECLARE
    lo timestamptz := least(a, b);
    hi timestamptz := greatest(a, b);
    forward boolean := a <= b;
    r record;
    l worlds.column_log;
    cols jsonb;
    acts text[];
    later text;
    defs text;
BEGIN
    IF a = b THEN
        RETURN;
    END IF;
    -- tables tracking began for between the two (created then)
    FOR r IN SELECT t.tabno, t.relid, c.relname::text AS name FROM worlds.tables t JOIN pg_class c ON c.oid = t.relid
             WHERE t.tracked_at > lo AND t.tracked_at <= hi ORDER BY t.tabno LOOP
        "table" := r.name;
        IF forward THEN
            SELECT jsonb_agg(format('+%s %s', x.attname, format_type(x.atttypid, x.atttypmod)) ORDER BY x.attnum),
                   string_agg(format('%I %s', x.attname, format_type(x.atttypid, x.atttypmod)), ', ' ORDER BY x.attnum)
              INTO cols, defs
              FROM pg_attribute x WHERE x.attrelid = r.relid AND x.attnum > 0 AND NOT x.attisdropped;
            SELECT defs || coalesce(', ' || pg_get_constraintdef(k.oid), '') INTO defs
              FROM (SELECT 1) one LEFT JOIN pg_constraint k ON k.conrelid = r.relid AND k.contype = 'p';
            change := 'create table';
            columns := cols;
            sql := ARRAY[format('CREATE TABLE %s (%s);', r.relid::regclass, defs)];
        ELSE
            change := 'drop table';
            columns := NULL;
            sql := ARRAY[format('DROP TABLE %s;', r.relid::regclass)];
        END IF;
        RETURN NEXT;
    END LOOP;
    -- tables dropped between the two
    FOR r IN SELECT d.* FROM worlds.dropped_table d WHERE d.dropped > lo AND d.dropped <= hi ORDER BY d.dropped LOOP
        "table" := r.table_name;
        IF forward THEN
            change := 'drop table';
            columns := NULL;
            sql := ARRAY[format('DROP TABLE %I.%I;', r.schema_name, r.table_name)];
        ELSE
            -- its columns as history kept them
            SELECT jsonb_agg(format('+%s %s', x.attname, format_type(x.atttypid, x.atttypmod)) ORDER BY x.attnum),
                   string_agg(format('%I %s', x.attname, format_type(x.atttypid, x.atttypmod)), ', ' ORDER BY x.attnum)
              INTO cols, defs
              FROM pg_attribute x WHERE x.attrelid = r.history AND x.attnum > 0 AND NOT x.attisdropped
               AND x.attname = ANY (r.columns);
            change := 'create table';
            columns := cols;
            sql := ARRAY[format('CREATE TABLE %I.%I (%s);', r.schema_name, r.table_name, defs)];
        END IF;
        RETURN NEXT;
    END LOOP;
    -- columns of tables there at both moments
    FOR r IN SELECT t.tabno, t.relid, c.relname::text AS name FROM worlds.tables t JOIN pg_class c ON c.oid = t.relid
             WHERE t.tracked_at <= lo ORDER BY t.tabno LOOP
        cols := '[]';
        acts := '{}';
        FOR l IN SELECT * FROM worlds.column_log x WHERE x.tabno = r.tabno
                   AND ((x.added > lo AND x.added <= hi) OR (x.dropped > lo AND x.dropped <= hi))
                 ORDER BY CASE WHEN x.added > lo AND x.added <= hi AND NOT x.renamed THEN x.added ELSE x.dropped END, x.attnum LOOP
            IF l.renamed THEN
                IF l.dropped > lo AND l.dropped <= hi THEN
                    -- renamed at l.dropped: from l.attname to the name it had next
                    later := worlds._name_at(r.tabno, l.attnum, l.dropped,
                                 coalesce((SELECT x.attname::text FROM pg_attribute x WHERE x.attrelid = r.relid AND x.attnum = l.attnum AND NOT x.attisdropped),
                                          (SELECT y.attname FROM worlds.column_log y WHERE y.tabno = r.tabno AND y.attnum = l.attnum AND NOT y.renamed LIMIT 1)));
                    IF forward THEN
                        cols := cols || to_jsonb(format('%s -> %s', l.attname, later));
                        acts := acts || format('RENAME COLUMN %I TO %I', l.attname, later);
                    ELSE
                        cols := cols || to_jsonb(format('%s -> %s', later, l.attname));
                        acts := acts || format('RENAME COLUMN %I TO %I', later, l.attname);
                    END IF;
                END IF;
            ELSIF l.added > lo AND l.added <= hi AND (l.dropped IS NULL OR l.dropped > hi) THEN
                IF forward THEN
                    cols := cols || to_jsonb(format('+%s %s', l.attname, l.typ));
                    acts := acts || format('ADD COLUMN %I %s', l.attname, l.typ);
                ELSE
                    cols := cols || to_jsonb(format('-%s', l.attname));
                    acts := acts || format('DROP COLUMN %I', l.attname);
                END IF;
            ELSIF l.dropped > lo AND l.dropped <= hi AND (l.added IS NULL OR l.added <= lo) THEN
                IF forward THEN
                    cols := cols || to_jsonb(format('-%s', l.attname));
                    acts := acts || format('DROP COLUMN %I', l.attname);
                ELSE
                    cols := cols || to_jsonb(format('+%s %s', l.attname, l.typ));
                    acts := acts || format('ADD COLUMN %I %s', l.attname, l.typ);
                END IF;
            END IF;
        END LOOP;
        IF cardinality(acts) > 0 THEN
            IF NOT forward THEN
                -- undone latest first
                acts := ARRAY(SELECT u.x FROM unnest(acts) WITH ORDINALITY u(x, o) ORDER BY u.o DESC);
                cols := (SELECT jsonb_agg(u.x ORDER BY u.o DESC) FROM jsonb_array_elements(cols) WITH ORDINALITY u(x, o));
            END IF;
            "table" := r.name;
            change := 'alter table';
            columns := cols;
            -- one statement each (RENAME can't share an ALTER TABLE with other actions)
            sql := ARRAY(SELECT format('ALTER TABLE %s %s;', r.relid::regclass, x) FROM unnest(acts) WITH ORDINALITY u(x, o) ORDER BY o);
            RETURN NEXT;
        END IF;
    END LOOP;
END $$;
