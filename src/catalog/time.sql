-- Time: moments, AS OF, history retention, checkpoints, RESTORE and UNDO MERGE.
-- History of main records each change with its statement's time (_w_at); a table as of a moment is its
-- current rows minus those created since, plus the first before-image of each row changed since — what
-- the overlay shows a session in 'main@when'.

CREATE TABLE worlds.settings (name text PRIMARY KEY, value text NOT NULL);
INSERT INTO worlds.settings VALUES ('history_retention', '1 day');
SELECT pg_catalog.pg_extension_config_dump('worlds.settings', '');

CREATE TABLE worlds.checkpoint (
    world integer NOT NULL REFERENCES worlds.world (num),
    label text NOT NULL,
    at    timestamptz NOT NULL,
    PRIMARY KEY (world, label)
);
SELECT pg_catalog.pg_extension_config_dump('worlds.checkpoint', '');

CREATE FUNCTION worlds.history_retention() RETURNS interval
LANGUAGE sql STABLE AS $$ SELECT value::interval FROM worlds.settings WHERE name = 'history_retention' $$;

-- ALTER SYSTEM SET history_retention = '<interval>' (or TO '0'): how far back time travel reaches.
CREATE FUNCTION worlds.set_history_retention(value text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    i interval;
BEGIN
    PERFORM worlds._refuse_in_transaction('ALTER SYSTEM');
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
        ELSIF s ~ '^-' THEN
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

-- AS OF: select * from worlds.as_of(null::orders, '-1 hour') -- the table as it was then.
-- Read through the overlay, as a session in 'main@when' reads: the query runs with the caller's rights
-- (SECURITY INVOKER: a role sees the past of what it may read now, nothing more).
CREATE FUNCTION worlds.as_of(tbl anyelement, moment timestamptz) RETURNS SETOF anyelement
LANGUAGE plpgsql AS $$
DECLARE
    rel regclass := (SELECT typrelid FROM pg_type WHERE oid = pg_typeof(tbl));
    at timestamptz := worlds.moment(moment);
    previous text := current_setting('worlds.world');
BEGIN
    IF NOT EXISTS (SELECT 1 FROM worlds.tables WHERE relid = rel) THEN
        RAISE EXCEPTION 'AS OF reads tracked tables: % isn''t one', pg_typeof(tbl) USING ERRCODE = 'wrong_object_type';
    END IF;
    PERFORM set_config('worlds.world', 'main@' || to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || '+00', true);
    RETURN QUERY EXECUTE format('SELECT * FROM %s', rel);
    PERFORM set_config('worlds.world', previous, true);
END $$;

CREATE FUNCTION worlds.as_of(tbl anyelement, moment text) RETURNS SETOF anyelement
LANGUAGE sql STABLE AS $$ SELECT * FROM worlds.as_of(tbl, worlds.moment(moment)) $$;

-- CHECKPOINT WORLD name AS 'label': names this moment of the world; the same label again moves it.
CREATE FUNCTION worlds.checkpoint_world(name text, label text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    w worlds.world := worlds._resolve(name);
BEGIN
    INSERT INTO worlds.checkpoint AS c (world, label, at) VALUES (w.num, checkpoint_world.label, clock_timestamp())
    ON CONFLICT ON CONSTRAINT checkpoint_pkey DO UPDATE SET at = excluded.at;
    RETURN 'CHECKPOINT';
END $$;

-- SHOW HISTORY [FOR [WORLD] name] [LIMIT n]: what happened to the world, newest first. A dropped
-- world's name still works.
CREATE TYPE worlds.history_row AS (at timestamptz, world text, event text, rows bigint);

CREATE FUNCTION worlds.show_history(world text DEFAULT NULL, "limit" bigint DEFAULT 100)
RETURNS SETOF worlds.history_row
LANGUAGE plpgsql AS $$
DECLARE
    target text := coalesce(show_history.world, current_setting('worlds.world'));
    nums integer[];
BEGIN
    SELECT array_agg(num) INTO nums FROM worlds.world w WHERE w.name = target OR w.id = target;
    IF nums IS NULL THEN
        RAISE EXCEPTION 'world "%" does not exist', target USING ERRCODE = 'invalid_catalog_name';
    END IF;
    RETURN QUERY
    SELECT e.at, w.name, e.event, e.rows
    FROM worlds.event e JOIN worlds.world w ON w.num = e.world
    WHERE e.world = ANY (nums) AND e.at >= now() - worlds.history_retention()
    ORDER BY e.seq DESC
    LIMIT coalesce("limit", 100);
END $$;

-- Deletes history older than history_retention that no live world still needs (entries before every
-- root world's fork point), at most batch_size rows per table and kind, so writers are never held up.
-- The purge worker calls it; it can be called by hand. Returns the rows deleted.
CREATE FUNCTION worlds.purge_history(batch_size integer DEFAULT 1000) RETURNS bigint
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
    -- worlds of main (the roots of every chain) see main through their fork points
    SELECT coalesce(array_agg(fork_snapshot) FILTER (WHERE fork_snapshot IS NOT NULL), '{}'),
           coalesce(array_agg(fork_at) FILTER (WHERE fork_at IS NOT NULL), '{}')
    INTO snaps, fork_ats
    FROM worlds.world WHERE dropped IS NULL AND num <> 0 AND parent = 0;
    FOR t IN SELECT * FROM worlds.tables LOOP
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
    END LOOP;
    RETURN n;
END $$;
