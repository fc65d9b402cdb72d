-- Tracking: every user table gets a history (before-images of main's changes), a delta (every world's
-- changed rows) and an overlay view (what a world sees), all in worlds_data. Identifiers are quoted with
-- format('%I'); nothing is spliced unquoted.

-- The columns of a table as a column-definition list, in attnum order, without constraints.
-- Dropped columns are left out; the overlay view fills their attnums with placeholders instead.
CREATE FUNCTION worlds._column_defs(rel regclass) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce(string_agg(format('%I %s', a.attname, format_type(a.atttypid, a.atttypmod)) || worlds._collate_clause(a.attcollation, a.atttypid),
                               ', ' ORDER BY a.attnum), '')
    FROM pg_attribute a WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped
$$;

-- ' COLLATE x' when a column's collation isn't its type's (a domain's column declared COLLATE "C"): the
-- overlay's branches (the table's column, history's, the delta's) must agree on it.
CREATE FUNCTION worlds._collate_clause(coll oid, typ oid) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN coll <> 0 AND coll IS DISTINCT FROM (SELECT typcollation FROM pg_type WHERE oid = typ)
                THEN ' COLLATE ' || coll::regcollation::text ELSE '' END
$$;

-- The same for a delta: generated columns stay generated, so a world's rows compute them as the table does.
CREATE FUNCTION worlds._delta_column_defs(rel regclass) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce(string_agg(format('%I %s', a.attname, format_type(a.atttypid, a.atttypmod)) || worlds._collate_clause(a.attcollation, a.atttypid)
                               || CASE WHEN a.attgenerated = 's' THEN format(' GENERATED ALWAYS AS (%s) STORED', pg_get_expr(d.adbin, d.adrelid)) ELSE '' END,
                               ', ' ORDER BY a.attnum), '')
    FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped
$$;

-- A relation's name, schema-qualified and quoted whatever the search_path (for SQL text built in Rust).
CREATE FUNCTION worlds._qualified(rel regclass) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = rel
$$;

-- The primary key's columns, in key order ('{}' when there is none).
CREATE FUNCTION worlds._primary_key(rel regclass) RETURNS text[]
LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(a.attname::text ORDER BY k.ord), '{}')
    FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
    WHERE i.indrelid = rel AND i.indisprimary AND k.ord <= i.indnkeyatts  -- (not its INCLUDE columns)
$$;

-- What the storage and overlay views of a tracked table are built from: its columns, constraints, unique
-- indexes, owner and row security. An ALTER TABLE that changes none of it needs no sync.
CREATE FUNCTION worlds._shape(rel regclass) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT md5(concat_ws('|',
        (SELECT string_agg(concat_ws(',', attnum, attname, atttypid, atttypmod, attnotnull, attisdropped, attgenerated, atthasdef), ';' ORDER BY attnum)
           FROM pg_attribute WHERE attrelid = rel AND attnum > 0),
        (SELECT string_agg(concat_ws(',', conname, contype, pg_get_constraintdef(oid)), ';' ORDER BY conname)
           FROM pg_constraint WHERE conrelid = rel),
        (SELECT string_agg(concat_ws(',', indexrelid, indisunique, indisprimary), ';' ORDER BY indexrelid)
           FROM pg_index WHERE indrelid = rel),
        (SELECT concat_ws(',', relowner, relrowsecurity, relforcerowsecurity, relkind, relpersistence) FROM pg_class WHERE oid = rel)))
$$;

-- 'i' one integer column, 't' any other key, 'r' no key (the whole row)
CREATE FUNCTION worlds._key_kind(rel regclass, pk text[]) RETURNS "char"
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN cardinality(pk) = 0 THEN 'r'
        WHEN cardinality(pk) = 1 AND (SELECT format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = rel AND attname = pk[1])
                                     IN ('smallint', 'integer', 'bigint') THEN 'i'
        ELSE 't' END::"char"
$$;

-- Does a table's delta need its (key, _w_world, _w_dseq) index? Not when its writes look their keys up by
-- index probes (storage/key_probe.rs: one int2/int4/int8 key column of a plain table, which its primary key
-- indexes); other keys are looked up by queries that need it.
CREATE FUNCTION worlds._needs_world_key_index(t worlds.tables) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT NOT (t.key_kind = 'i' AND cardinality(t.key_columns) = 1
                AND (SELECT relkind FROM pg_class WHERE oid = t.relid) = 'r')
$$;

-- Why a table can't be compared inside a world (a column type without an equality operator), or null.
CREATE FUNCTION worlds._unsupported_reason(rel regclass) RETURNS text
LANGUAGE plpgsql STABLE AS $$  -- plpgsql: worlds._has_equality (Rust) is made after this file
BEGIN
    RETURN (
    SELECT format('table %s has column %I of type %s, which has no equality operator; untrack it with SELECT worlds.untrack(%L) or change the column type',
                  rel, a.attname, format_type(a.atttypid, a.atttypmod), rel::text)
    FROM pg_attribute a
    WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped
      AND NOT worlds._has_equality(a.atttypid)
      AND NOT EXISTS (SELECT 1 FROM pg_type t WHERE t.oid = a.atttypid AND (t.typtype IN ('e', 'c', 'r', 'm') OR t.typcategory = 'A'))
    ORDER BY a.attnum LIMIT 1);
END $$;

-- The SQL expression of a row's key over a table alias: one integer column as int8, anything else as
-- text in the spec's form (1, or (1,abc) for several columns), the whole row when there is no key.
CREATE FUNCTION worlds._key_expr(t worlds.tables, alias text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN t.key_kind = 'i' THEN format('%I.%I::int8', alias, t.key_columns[1])
        WHEN t.key_kind = 't' AND cardinality(t.key_columns) = 1 THEN format('%I.%I::text', alias, t.key_columns[1])
        WHEN t.key_kind = 't' THEN format('ROW(%s)::text', (SELECT string_agg(format('%I.%I', alias, c), ', ') FROM unnest(t.key_columns) c))
        ELSE format('ROW(%s)::text', worlds._alias_columns(t.relid, alias))
    END
$$;

-- The key the overlay's visibility functions take: none for a table without a primary key (its rows
-- are told apart by ctid on main and by delta sequence in worlds).
-- An integer key is passed as it is (smallint, integer or bigint overloads): no cast per row.
CREATE FUNCTION worlds._view_key(t worlds.tables, alias text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN t.key_kind = 'r' AND alias = 'h' THEN 'h._w_old_tid::text'  -- the physical row it was
                WHEN t.key_kind = 'r' THEN 'NULL::text'
                WHEN t.key_kind = 'i' THEN format('%I.%I', alias, t.key_columns[1])
                ELSE worlds._key_expr(t, alias) END
$$;

CREATE FUNCTION worlds._alias_columns(rel regclass, alias text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce(string_agg(format('%I.%I', alias, attname), ', ' ORDER BY attnum), '')
    FROM pg_attribute WHERE attrelid = rel AND attnum > 0 AND NOT attisdropped
$$;

-- (Re)creates the overlay view of a tracked table: main as of the world's fork, minus what the world
-- shadows, plus the world's own rows. Qual-free UNION ALL branches tagged by a constant `_w_src`, every
-- condition in the outer WHERE, so Postgres flattens it into an append relation and joins keep
-- parameterized index paths into every branch (see DESIGN.md, "Shape of the view").
-- The view's attnums equal the table's: a dropped column of the table becomes a NULL placeholder column,
-- so the Vars of an analyzed query stay valid when its range-table entry is swapped for the view.
CREATE FUNCTION worlds._build_overlay(t worlds.tables) RETURNS void
LANGUAGE plpgsql SET client_min_messages = warning AS $$
DECLARE
    outer_cols text := '';
    base_cols text := '';
    delta_cols text := '';
    hist_cols text := '';
    a record;
    vname text := 'v' || substr((SELECT relname FROM pg_class WHERE oid = t.history), 2);
    twin text;
    table_cols text := '';
    keyfn text := CASE WHEN t.key_kind = 'i' THEN 'int8' ELSE 'text' END;
BEGIN
    FOR a IN SELECT attnum, attname, attisdropped, format_type(atttypid, atttypmod) AS typ
             FROM pg_attribute WHERE attrelid = t.relid AND attnum > 0 ORDER BY attnum LOOP
        IF outer_cols <> '' THEN outer_cols := outer_cols || ', '; table_cols := table_cols || ', '; END IF;
        IF a.attisdropped THEN
            -- placeholder keeping the view's attnums equal to the table's
            outer_cols := outer_cols || format('NULL::int4 AS %I', '........pg.dropped.' || a.attnum || '........');
            table_cols := table_cols || format('NULL::int4 AS %I', '........pg.dropped.' || a.attnum || '........');
        ELSE
            table_cols := table_cols || format('b.%I', a.attname);
            IF base_cols <> '' THEN
                base_cols := base_cols || ', '; delta_cols := delta_cols || ', '; hist_cols := hist_cols || ', ';
            END IF;
            outer_cols := outer_cols || format('u.%I', a.attname);
            base_cols := base_cols || format('b.%I', a.attname);
            delta_cols := delta_cols || format('d.%I', a.attname);
            hist_cols := hist_cols || format('h.%I', a.attname);
        END IF;
    END LOOP;

    IF base_cols = '' THEN
        -- every column dropped: the branches still need one column in common
        base_cols := 'NULL::int4 AS _w_none'; delta_cols := 'NULL::int4'; hist_cols := 'NULL::int4';
    END IF;
    PERFORM worlds._drop_generated_view('n' || substr(vname, 2));
    PERFORM worlds._drop_rows_twin(t);
    PERFORM worlds._drop_generated_view(vname);
    -- the overlay; for a table without a key also its rows twin `k_`, the target of its UPDATE and DELETE in
    -- a world, whose last columns say which physical row each row is (the trigger needs them)
    FOREACH twin IN ARRAY CASE WHEN t.key_kind = 'r' THEN ARRAY[vname, 'k' || substr(vname, 2)] ELSE ARRAY[vname] END LOOP
        EXECUTE format($v$
            CREATE VIEW worlds_data.%I AS
            SELECT %s%s FROM (
                SELECT %s, 0 AS _w_src, b.ctid AS _w_tid, 0::int8 AS _w_seq, 0 AS _w_world, %s AS _w_k, NULL::tid AS _w_row FROM %s b
                UNION ALL
                %s
                SELECT %s, 2, %s, h._w_hseq, 0, %s, h.ctid FROM worlds_data.%I h
            ) u
            WHERE (u._w_src = 0 AND worlds._base_visible(%s, u._w_tid, u._w_k))
               OR (u._w_src = 1 AND worlds._delta_visible(%s, u._w_world, u._w_seq))
               -- history has no index on the key: its rows are found by the tids the overlay cache holds (once
               -- per scan: an InitPlan)
               OR (u._w_src = 2 AND u._w_row = ANY ((SELECT worlds._history_tids(%s))::tid[]) AND worlds._history_visible(%s, u._w_seq, u._w_k))
            $v$,
            twin, outer_cols, CASE WHEN twin = vname THEN '' WHEN outer_cols = '' THEN 'u._w_src, u._w_tid, u._w_seq' ELSE ', u._w_src, u._w_tid, u._w_seq' END,
            base_cols, worlds._view_key(t, 'b'), t.relid::text,
            -- (no delta yet, no world: a past moment of main reads main and its history only)
            CASE WHEN t.delta IS NULL THEN '' ELSE
                format('SELECT %s, 1, NULL::tid, d._w_dseq, d._w_world, %s, NULL::tid FROM %s d UNION ALL', delta_cols, worlds._view_key(t, 'd'), t.delta) END,
            hist_cols, CASE WHEN t.key_kind = 'r' THEN 'h._w_old_tid' ELSE 'NULL::tid' END, worlds._view_key(t, 'h'),
            (SELECT relname FROM pg_class WHERE oid = t.history),
            t.tabno, t.tabno, t.tabno, t.tabno);
    END LOOP;
    -- a table with one integer key: its write twin `k_`, the target of its UPDATE and DELETE in a world
    -- where the world scan reads the rows in place (route/hooks/planner.rs turns the body, the bare table,
    -- into the table read by the world scan; the rewriter then copies a one-table body, not the overlay's
    -- three branches). Same columns as the overlay, attnum for attnum, and the same trigger.
    IF t.key_kind = 'i' THEN
        EXECUTE format('CREATE VIEW worlds_data.%I AS SELECT %s FROM %s b', 'k' || substr(vname, 2), table_cols, t.relid::text);
    END IF;
    -- the same rows as the target of INSERT ... ON CONFLICT (its trigger skips or updates a row whose key
    -- the world has); the last column carries DO UPDATE's action from the router to the trigger
    EXECUTE format('CREATE VIEW worlds_data.%I AS SELECT *, NULL::text AS _w_upsert FROM worlds_data.%I', 'n' || substr(vname, 2), vname);
    -- history and inserts in one relation, for readers that want every change (its columns follow theirs)
    PERFORM worlds._drop_changes_view(t);
    -- readable by roles that may read the table (AS OF runs as the caller); the gate is evaluated once per
    -- query, before any row is read
    EXECUTE format('CREATE VIEW worlds_data.%I AS SELECT * FROM %s WHERE worlds._may_read_history(%s) UNION ALL SELECT * FROM %s WHERE worlds._may_read_history(%s)',
                   'a' || substr(vname, 2), t.history, t.relid::oid, t.inserts, t.relid::oid);
    EXECUTE format('GRANT SELECT ON worlds_data.%I TO PUBLIC', 'a' || substr(vname, 2));
    -- new views are new relations: keep the catalog pointing at them
    UPDATE worlds.tables SET overlay = format('worlds_data.%I', vname)::regclass,
                             overlay_nothing = format('worlds_data.%I', 'n' || substr(vname, 2))::regclass,
                             changes = format('worlds_data.%I', 'a' || substr(vname, 2))::regclass
    WHERE tabno = t.tabno RETURNING * INTO t;
    PERFORM worlds._overlay_finish(t, t.overlay, '');
    PERFORM worlds._overlay_finish(t, t.overlay_nothing, ', ''nothing''');
    IF t.key_kind = 'r' THEN
        PERFORM worlds._overlay_finish(t, format('worlds_data.%I', 'k' || substr(vname, 2))::regclass, ', ''rows''');
    ELSIF t.key_kind = 'i' THEN
        PERFORM worlds._overlay_finish(t, format('worlds_data.%I', 'k' || substr(vname, 2))::regclass, '');
    END IF;
    -- the views read the table, but the table doesn't know it (catalog/members.rs): DROP TABLE, a drop
    -- cascading to it (its schema, its partitioned parent, DROP OWNED) and ALTER TABLE on it run as in stock
    -- Postgres; the DDL's end rebuilds the views, or forgets them with the table
    PERFORM worlds._forget_reads_of(v.oid, t.relid) FROM pg_class v
     WHERE v.relnamespace = 'worlds_data'::regnamespace AND v.relkind = 'v'
       AND v.relname IN (vname, 'n' || substr(vname, 2), 'k' || substr(vname, 2));
    -- (every relation of the table's storage: history's and the delta's columns may have changed too)
    PERFORM worlds._own_storage(ARRAY[t.history, t.inserts, t.delta, t.overlay, t.overlay_nothing, t.changes,
                                      to_regclass(format('worlds_data.%I', 'k' || substr(vname, 2)))]);
END $$;

-- Drops a view of worlds_data by name, if it exists.
CREATE FUNCTION worlds._drop_generated_view(name text) RETURNS void
LANGUAGE sql AS $$
    SELECT worlds._drop_relation(to_regclass(format('worlds_data.%I', name)))
$$;

-- Drops the twin `k_` of the overlay (the rows twin of a table without a key, the write twin of one with an
-- integer key: see _build_overlay), if it has one.
CREATE FUNCTION worlds._drop_rows_twin(t worlds.tables) RETURNS void
LANGUAGE sql AS $$
    SELECT worlds._drop_generated_view('k' || substr((SELECT relname FROM pg_class WHERE oid = t.history), 2)) WHERE t.history IS NOT NULL
$$;

-- Defaults (serial, identity, expressions) and the write trigger of an overlay view.
CREATE FUNCTION worlds._overlay_finish(t worlds.tables, view regclass, trigger_args text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    a record;
    v text := view::text;
BEGIN
    FOR a IN SELECT at.attname, pg_get_expr(d.adbin, d.adrelid) AS def, at.attidentity,
                    pg_get_serial_sequence(t.relid::text, at.attname) AS seq
             FROM pg_attribute at LEFT JOIN pg_attrdef d ON d.adrelid = at.attrelid AND d.adnum = at.attnum
             WHERE at.attrelid = t.relid AND at.attnum > 0 AND NOT at.attisdropped AND at.attgenerated = '' LOOP
        IF a.attidentity IN ('a', 'd') AND a.seq IS NOT NULL THEN
            EXECUTE format('ALTER VIEW %s ALTER COLUMN %I SET DEFAULT nextval(%L::regclass)', v, a.attname, a.seq);
        ELSIF a.def IS NOT NULL THEN
            EXECUTE format('ALTER VIEW %s ALTER COLUMN %I SET DEFAULT %s', v, a.attname, a.def);
        END IF;
    END LOOP;
    EXECUTE format('CREATE TRIGGER worlds_write INSTEAD OF INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION worlds._overlay_write(%s%s)', v, t.tabno, trigger_args);
    -- no grants: only the router reaches the view, after checking the role's rights on the real table
END $$;

-- The table's column names by attnum (null for dropped ones).
CREATE FUNCTION worlds._column_names(rel regclass) RETURNS text[]
LANGUAGE sql STABLE AS $$
    SELECT array_agg(CASE WHEN attisdropped THEN NULL ELSE attname::text END ORDER BY attnum)
    FROM pg_attribute WHERE attrelid = rel AND attnum > 0
$$;

-- CHECK constraints of the table hold inside worlds: the delta carries copies (23514 at write time).
CREATE FUNCTION worlds._sync_checks(t worlds.tables) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    IF t.delta IS NULL THEN
        RETURN;
    END IF;
    FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = t.delta AND contype = 'c' LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', t.delta, c.conname);
    END LOOP;
    -- NOT VALID: the worlds' rows already there aren't checked again here, where the check would run with
    -- pg_worlds' rights (rows written later are checked as the table's owner; a merge checks as the merger)
    FOR c IN SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = t.relid AND contype = 'c' LOOP
        BEGIN
            EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I %s NOT VALID', t.delta, c.conname, regexp_replace(c.def, ' NOT VALID$', ''));
        EXCEPTION WHEN OTHERS THEN
            -- one the delta can't hold (it reads the whole row as the table's type): a world's writes
            -- don't check it, its merge does (main's own constraint); never the user's DDL failing
            RAISE LOG 'pg_worlds: worlds will not check constraint % of table % before merging: %', c.conname, t.relid, sqlerrm;
        END;
    END LOOP;
    -- (the copies hold no dependency on the user's types either: catalog/members.rs)
    PERFORM worlds._forget_user_types(ARRAY[t.delta::oid]);
END $$;

-- The table's owner may read and add the delta's rows and read the overlay view: pg_worlds writes a
-- world's rows as the owner (storage::as_table_owner), so the table's own code on them (CHECK constraints,
-- generated columns, its types' casts and operators) runs with the owner's rights, not pg_worlds'. After
-- tracking, any ALTER TABLE (OWNER TO among them) and REASSIGN OWNED.
CREATE FUNCTION worlds._sync_owner(t worlds.tables) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    owner oid := (SELECT relowner FROM pg_class WHERE oid = t.relid);
    r record;
BEGIN
    FOR r IN SELECT DISTINCT c.oid::regclass AS rel, a.grantee::regrole AS grantee
             FROM pg_class c, aclexplode(c.relacl) a
             WHERE c.oid IN (t.delta, t.overlay) AND a.grantee <> c.relowner AND a.grantee <> 0 AND a.grantee <> owner LOOP
        EXECUTE format('REVOKE ALL ON %s FROM %s', r.rel, r.grantee);
    END LOOP;
    IF owner IS NOT NULL AND NOT (SELECT rolsuper FROM pg_roles WHERE oid = owner) THEN
        IF t.delta IS NOT NULL THEN
            EXECUTE format('GRANT SELECT, INSERT ON %s TO %s', t.delta, owner::regrole);
        END IF;
        EXECUTE format('GRANT SELECT ON %s TO %s', t.overlay, owner::regrole);
    END IF;
END $$;

-- Before DROP ROLE: what pg_worlds granted the role on its storage (a tracked table's owner may read and
-- write the table's delta) is revoked, so the role drops as it would without pg_worlds.
CREATE FUNCTION worlds._forget_role(role oid) RETURNS void
LANGUAGE plpgsql SET client_min_messages = warning AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT DISTINCT c.oid::regclass AS rel FROM pg_class c, aclexplode(c.relacl) a
             WHERE c.relnamespace = 'worlds_data'::regnamespace AND a.grantee = role LOOP
        EXECUTE format('REVOKE ALL ON %s FROM %s', r.rel, role::regrole);
    END LOOP;
END $$;

-- The delta of a tracked table: the rows worlds write, each version numbered (_w_dseq) within its world.
-- Made once the database has a world (storage/world_storage.rs); returns the table's row naming it.
CREATE FUNCTION worlds._add_delta(t worlds.tables) RETURNS worlds.tables
LANGUAGE plpgsql
    SET worlds.internal_ddl = on AS $$
DECLARE
    dname text := 'd' || substr((SELECT relname FROM pg_class WHERE oid = t.history), 2);
BEGIN
    IF t.delta IS NOT NULL THEN
        RETURN t;
    END IF;
    IF t.history IS NULL THEN
        -- (its history first, without the views: they are built below, once, with the delta)
        t := worlds._make_history(t, false);
        dname := 'd' || substr((SELECT relname FROM pg_class WHERE oid = t.history), 2);
    END IF;
    EXECUTE format('CREATE TABLE worlds_data.%I (_w_world int4 NOT NULL, _w_dseq int8 NOT NULL, _w_xid xid8 NOT NULL DEFAULT pg_current_xact_id(), _w_at timestamptz NOT NULL DEFAULT clock_timestamp(), _w_del bool NOT NULL DEFAULT false, _w_base_tid tid, _w_of int8%s)',
                   dname, CASE WHEN worlds._delta_column_defs(t.relid) = '' THEN '' ELSE ', ' || worlds._delta_column_defs(t.relid) END);
    EXECUTE format('CREATE INDEX ON worlds_data.%I (_w_world, _w_xid)', dname);
    -- history and inserts have no index on the key: each index main's capture fills costs its writes
    -- (measured: the key index was half of capture's cost under TPC-B). A world finds main's before-images
    -- through its cache, which holds each one's position (see storage/overlay.rs); merges join by key.
    IF t.key_kind <> 'r' THEN
        -- by key, then version: a key's latest version (or the one the cache names) without reading its others
        EXECUTE format('CREATE INDEX ON worlds_data.%I (%s, _w_dseq)', dname, (SELECT string_agg(format('%I', c), ', ') FROM unnest(t.key_columns) c));
        -- by key, world, version: a world write's lookup of its own latest version of a key (storage/writes.rs)
        -- is one index probe, whatever the statistics say (with the two indexes above alone the planner
        -- took a BitmapAnd and sorted every version of a hot key: a third of a world's TPC-B). Not for a
        -- plain table with one integer key: its writes look the key up with index probes of the index
        -- above (storage/key_probe.rs), and this one was a fifth of a world's UPDATE (a leaf insert a version)
        IF worlds._needs_world_key_index(t) THEN
            EXECUTE format('CREATE INDEX ON worlds_data.%I (%s, _w_world, _w_dseq)', dname, (SELECT string_agg(format('%I', c), ', ') FROM unnest(t.key_columns) c));
        END IF;
    END IF;
    UPDATE worlds.tables SET delta = format('worlds_data.%I', dname)::regclass WHERE tabno = t.tabno RETURNING * INTO t;
    PERFORM worlds._build_overlay(t);
    SELECT * INTO t FROM worlds.tables WHERE tabno = t.tabno;
    PERFORM worlds._sync_checks(t);
    PERFORM worlds._sync_owner(t);
    PERFORM worlds._tracking_changed(t.relid);
    -- (no lock of this transaction's is needed on what it made: catalog/members.rs)
    PERFORM worlds._release_made_now(ARRAY[t.history, t.inserts, t.delta, t.changes, t.overlay, t.overlay_nothing,
                                           to_regclass(format('worlds_data.%I', 'k' || substr((SELECT relname FROM pg_class WHERE oid = t.overlay), 2)))]::oid[]);
    RETURN t;
END $$;

-- Before the database's first world: every tracked table gets its delta (see storage/world_storage.rs).
-- (With many tables, storage/world_storage.rs's worker has made most of them ahead, a few tables a
-- transaction: here, in the first world's own transaction, are made only those it left.)
CREATE FUNCTION worlds._ensure_world_storage() RETURNS void
LANGUAGE plpgsql SET client_min_messages = warning AS $$
BEGIN
    IF worlds._world_storage_on() THEN
        RETURN;
    END IF;
    PERFORM worlds._make_world_storage(0, NULL);
END $$;

-- Gives tracked tables without a delta theirs, in tabno order from after `after`, at most `most` of them,
-- and returns the last tabno it went through (NULL: none was left).
--   most NULL: every one, under the tracking lock (EXCLUSIVE until the transaction ends: it waits for the
--     tables being created to be committed, or not, so they are listed here): the first world's own pass.
--   most n: a worker's batch ahead of the first world (storage/maker.rs), without the tracking lock (the
--     first world's pass lists what it missed); a table busy past lock_timeout is left to that pass.
CREATE FUNCTION worlds._make_world_storage(after integer, most integer) RETURNS integer
LANGUAGE plpgsql SET client_min_messages = warning AS $$
DECLARE
    n integer;
    last integer;
    done integer := 0;
BEGIN
    IF most IS NULL THEN
        PERFORM worlds._lock_tracking(true);
    END IF;
    FOREACH n IN ARRAY worlds._tables_without_delta() LOOP
        CONTINUE WHEN n <= after;
        EXIT WHEN most IS NOT NULL AND done >= most;
        done := done + 1;
        last := n;
        IF most IS NULL THEN
            PERFORM worlds._make_table_world_storage(n);
        ELSE
            BEGIN
                PERFORM worlds._make_table_world_storage(n);
            EXCEPTION WHEN lock_not_available THEN
                NULL;
            END;
        END IF;
    END LOOP;
    RETURN last;
END $$;

-- One tracked table's delta (and its history first, for a table never written), unless it has one. A
-- table whose storage can't be made is left without (logged, its reason in unsupported), as a table that
-- can't be tracked is: the world is made without it.
CREATE FUNCTION worlds._make_table_world_storage(n integer) RETURNS void
LANGUAGE plpgsql SET client_min_messages = warning AS $$
DECLARE
    t worlds.tables;
BEGIN
    SELECT * INTO t FROM worlds.tables WHERE tabno = n;
    IF FOUND THEN
        -- the table locked before its row here: DDL in main locks the table, then writes the row
        -- (tracking's event trigger); the other order deadlocked with it
        BEGIN
            EXECUTE format('LOCK TABLE ONLY %s IN ACCESS SHARE MODE', t.relid);
        EXCEPTION WHEN undefined_table OR syntax_error THEN
            RETURN;  -- (dropped meanwhile: its row went with it)
        END;
        -- then its row, as every maker of a table's storage locks it (two first worlds' workers, a
        -- first writer's maker): the delta is made once
        SELECT * INTO t FROM worlds.tables WHERE tabno = n FOR UPDATE;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'could not serialize access due to a table tracked concurrently'
            USING ERRCODE = 'serialization_failure';
    END IF;
    IF t.delta IS NOT NULL THEN
        RETURN;
    END IF;
    IF t.history IS NULL THEN
        -- a table never written: its whole storage now
        BEGIN
            PERFORM worlds._add_delta(t);
        EXCEPTION WHEN lock_not_available OR query_canceled THEN
            RAISE;
        WHEN OTHERS THEN
            RAISE LOG 'pg_worlds could not make the storage of table %: %', t.relid, sqlerrm;
            UPDATE worlds.tables SET unsupported = 'its storage could not be made: ' || sqlerrm WHERE tabno = t.tabno;
        END;
        RETURN;
    END IF;
    PERFORM worlds._add_delta(t);
END $$;

-- Starts tracking a table: its row in worlds.tables and the capture triggers; its storage (history and
-- the views; the delta too once the database has a world) comes with its first captured write
-- (worlds._make_history), or now when the database has a world. CREATE TABLE tracks this way: a table
-- costs its catalog row and two internal triggers until it is written (a migration that creates 1,000
-- tables takes no lock of pg_worlds' per table, and runs at close to stock speed). Idempotent.
CREATE FUNCTION worlds._track_lazy(rel regclass) RETURNS worlds.tables
LANGUAGE plpgsql
    -- (its DDL on storage is pg_worlds' own: a subcommand, which event triggers don't see; route/hooks.rs)
    SET worlds.internal_ddl = on AS $$
DECLARE
    t worlds.tables;
    n integer;
BEGIN
    SELECT * INTO t FROM worlds.tables WHERE relid = rel;
    IF FOUND THEN RETURN t; END IF;
    IF NOT EXISTS (SELECT FROM pg_class WHERE oid = rel) THEN
        RAISE EXCEPTION 'relation with OID % does not exist', rel::oid USING ERRCODE = 'undefined_table';
    END IF;
    IF (SELECT relnamespace FROM pg_class WHERE oid = rel) IN ('worlds'::regnamespace, 'worlds_data'::regnamespace) THEN
        RAISE EXCEPTION 'pg_worlds'' own tables are not tracked: % is one', rel
            USING ERRCODE = 'wrong_object_type';
    END IF;
    IF (SELECT relkind FROM pg_class WHERE oid = rel) NOT IN ('r') THEN
        RAISE EXCEPTION 'only ordinary tables can be tracked: % is not one', rel
            USING ERRCODE = 'wrong_object_type';
    END IF;
    n := nextval('worlds.tables_tabno_seq');
    -- (its key, columns and shape are read when its storage is made)
    INSERT INTO worlds.tables (relid, tabno) VALUES (rel, n) RETURNING * INTO t;
    -- internal triggers (catalog/members.rs): not the user's, so \d, pg_dump and DISABLE TRIGGER USER don't see them
    PERFORM worlds._create_capture_triggers(rel, n, 'worlds._capture()'::regprocedure, 'worlds._capture_truncate()'::regprocedure);
    PERFORM worlds._tracking_changed(rel);
    -- a database that has had a world: the storage now (the lock orders this with the first CREATE WORLD)
    PERFORM worlds._lock_tracking(false);
    IF worlds._world_storage_on() THEN
        t := worlds._make_history(t);
    END IF;
    RETURN t;
END $$;

-- A tracked table's history, inserts and views (and its delta, once the database has a world), made once:
-- at its first captured write (storage/capture.rs), by TRUNCATE or DROP TABLE of rows never captured, by
-- the database's first world, or by track(). Two first writers of the table queue on an object lock
-- before this (storage::ensure_history); the row lock orders the other makers. Columns, key
-- and shape are read now: the table may have changed since it was tracked (pgbench -i adds its keys after
-- loading). views = false: history and inserts only (worlds._add_delta builds the views once, with the
-- delta). Returns the table's row.
CREATE FUNCTION worlds._make_history(t worlds.tables, views boolean DEFAULT true) RETURNS worlds.tables
LANGUAGE plpgsql SET client_min_messages = warning
    SET worlds.internal_ddl = on AS $$
DECLARE
    base text;
    pk text[];
    rel regclass;
BEGIN
    SELECT * INTO t FROM worlds.tables WHERE tabno = t.tabno FOR UPDATE;
    IF NOT FOUND OR t.history IS NOT NULL THEN
        RETURN t;
    END IF;
    rel := t.relid;
    base := left((SELECT relname FROM pg_class WHERE oid = rel), 40) || '_' || t.tabno;
    EXECUTE format('CREATE TABLE worlds_data.%I (_w_hseq int8 NOT NULL, _w_xid xid8 NOT NULL, _w_at timestamptz NOT NULL, _w_op "char" NOT NULL, _w_old_tid tid, _w_new_tid tid, _w_src text%s)',
                   'h_' || base, CASE WHEN worlds._column_defs(rel) = '' THEN '' ELSE ', ' || worlds._column_defs(rel) END);
    EXECUTE format('CREATE INDEX ON worlds_data.%I (_w_xid)', 'h_' || base);
    -- inserts apart: a world's scans read before-images only, not every row ever inserted
    EXECUTE format('CREATE TABLE worlds_data.%I (LIKE worlds_data.%I INCLUDING INDEXES)', 'i_' || base, 'h_' || base);
    -- (the delta, where worlds keep their rows, comes with the database's first world: worlds._add_delta)
    -- (the views, v_ and the others, are made by _build_overlay below)
    pk := worlds._primary_key(rel);
    UPDATE worlds.tables SET history = format('worlds_data.%I', 'h_' || base)::regclass, inserts = format('worlds_data.%I', 'i_' || base)::regclass,
                             key_columns = pk, key_kind = worlds._key_kind(rel, pk), unsupported = worlds._unsupported_reason(rel),
                             columns = coalesce(worlds._column_names(rel), '{}'), filenode = (SELECT c.relfilenode FROM pg_class c WHERE c.oid = rel)
    WHERE tabno = t.tabno RETURNING * INTO t;
    IF NOT views THEN
        UPDATE worlds.tables SET shape = worlds._shape(relid) WHERE tabno = t.tabno RETURNING * INTO t;
        PERFORM worlds._release_made_now(ARRAY[t.history, t.inserts]::oid[]);
        RETURN t;
    ELSIF worlds._world_storage_on() THEN
        t := worlds._add_delta(t);
    ELSE
        PERFORM worlds._build_overlay(t);
        SELECT * INTO t FROM worlds.tables WHERE tabno = t.tabno;
        PERFORM worlds._sync_owner(t);
    END IF;
    UPDATE worlds.tables SET shape = worlds._shape(relid) WHERE tabno = t.tabno RETURNING * INTO t;
    PERFORM worlds._tracking_changed(rel);
    -- (no lock of this transaction's is needed on what it made: catalog/members.rs)
    PERFORM worlds._release_made_now(ARRAY[t.history, t.inserts, t.changes, t.overlay, t.overlay_nothing,
                                           to_regclass(format('worlds_data.%I', 'k' || substr((SELECT relname FROM pg_class WHERE oid = t.overlay), 2)))]::oid[]);
    RETURN t;
END $$;

-- Starts tracking a table, its storage made now (the API; CREATE EXTENSION for the tables it finds, CREATE
-- TABLE AS / SELECT INTO, whose rows are kept as inserted). Idempotent.
CREATE FUNCTION worlds.track(rel regclass) RETURNS worlds.tables
LANGUAGE plpgsql AS $$
DECLARE
    t worlds.tables;
BEGIN
    t := worlds._track_lazy(rel);
    IF t.history IS NULL THEN
        t := worlds._make_history(t);
    END IF;
    RETURN t;
END $$;

-- Stops tracking a table: its storage goes, worlds stop seeing their changes to it. Refused while a
-- live world has changed it, unless force.
CREATE FUNCTION worlds.untrack(rel regclass) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    t worlds.tables;
BEGIN
    SELECT * INTO t FROM worlds.tables WHERE relid = rel;
    IF NOT FOUND THEN RETURN false; END IF;
    PERFORM worlds._drop_storage(t, true);
    RETURN true;
END $$;

-- CREATE RULE "_RETURN" ... AS ON SELECT makes a table a view (PostgreSQL 15 still allows it for an empty
-- table without triggers): the table stops being tracked first, and, with no trigger of the user's left,
-- its relhastriggers goes back to false (Postgres never clears it), so the conversion runs as stock.
CREATE FUNCTION worlds._before_view_conversion(rel regclass) RETURNS void
LANGUAGE plpgsql SET client_min_messages = warning
    SET worlds.internal_ddl = on AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM worlds.tables WHERE relid = rel) THEN
        RETURN;
    END IF;
    PERFORM worlds.untrack(rel);
    UPDATE pg_catalog.pg_class SET relhastriggers = false
     WHERE oid = rel AND relhastriggers AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger WHERE tgrelid = rel);
END $$;

-- The view of every change (history and inserts), dropped by name: columns of its tables are about to change.
-- A dropped table's history as one table: the inserts twin's rows moved into the history table, the twin
-- dropped, the changes view made again over the history alone. Returns the row with inserts = history.
CREATE FUNCTION worlds._fold_history(t worlds.tables) RETURNS worlds.tables
LANGUAGE plpgsql SET client_min_messages = warning AS $$
DECLARE
    cname text := 'a' || substr((SELECT relname FROM pg_class WHERE oid = t.history), 2);
BEGIN
    IF t.inserts IS NULL OR t.inserts = t.history THEN
        RETURN t;
    END IF;
    EXECUTE format('INSERT INTO %s SELECT * FROM %s', t.history, t.inserts);
    PERFORM worlds._drop_changes_view(t);
    PERFORM worlds._drop_relation(t.inserts);
    EXECUTE format('CREATE VIEW worlds_data.%I AS SELECT * FROM %s WHERE worlds._may_read_history(%s)', cname, t.history, t.relid::oid);
    EXECUTE format('GRANT SELECT ON worlds_data.%I TO PUBLIC', cname);
    PERFORM worlds._own_storage(ARRAY[format('worlds_data.%I', cname)::regclass, t.history]);
    t.changes := format('worlds_data.%I', cname)::regclass;
    t.inserts := t.history;
    RETURN t;
END $$;

CREATE FUNCTION worlds._drop_changes_view(t worlds.tables) RETURNS void
LANGUAGE sql AS $$
    SELECT worlds._drop_generated_view('a' || substr((SELECT relname FROM pg_class WHERE oid = t.history), 2)) WHERE t.history IS NOT NULL
$$;

-- Storage made while CREATE EXTENSION ran is an extension member: release it before dropping it.
-- Generated storage belongs to the extension, so pg_dump leaves it out (it is derived state: a restore
-- tracks the restored tables anew). Before pg_worlds drops one of its relations it releases it, and the
-- views built on it that the drop cascades to.
CREATE FUNCTION worlds._disown(rel regclass) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    dependent regclass;
BEGIN
    IF rel IS NULL THEN
        RETURN;
    END IF;
    FOR dependent IN SELECT DISTINCT r.ev_class::regclass FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
                     WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass
                       AND d.refobjid = rel AND r.ev_class <> rel LOOP
        PERFORM worlds._disown(dependent);
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_depend WHERE classid = 'pg_class'::regclass AND objid = rel AND deptype = 'e') THEN
        PERFORM worlds._drop_member(rel);
    END IF;
END $$;

-- The capture triggers on a table (internal ones, and the plain ones older versions made).
CREATE FUNCTION worlds._drop_capture_triggers(rel regclass) RETURNS void
LANGUAGE plpgsql SET client_min_messages = warning AS $$
DECLARE
    tg name;
BEGIN
    FOR tg IN SELECT t.tgname FROM pg_trigger t
              WHERE t.tgrelid = rel AND t.tgfoid IN ('worlds._capture()'::regprocedure, 'worlds._capture_truncate()'::regprocedure) LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', tg, rel);
    END LOOP;
END $$;

-- Drops one of pg_worlds' relations, if it is still there, with the views built on it (all released from
-- the extension first).
CREATE FUNCTION worlds._drop_relation(rel regclass) RETURNS void
LANGUAGE plpgsql SET client_min_messages = warning AS $$
DECLARE
    kind "char";
BEGIN
    SELECT relkind INTO kind FROM pg_class WHERE oid = rel;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM worlds._disown(rel);
    EXECUTE format('DROP %s %s CASCADE', CASE kind WHEN 'v' THEN 'VIEW' WHEN 'S' THEN 'SEQUENCE' WHEN 'i' THEN 'INDEX' ELSE 'TABLE' END, rel);
END $$;

-- Makes every relation of worlds_data the extension's (those made during CREATE EXTENSION already are).
-- rels: just these (the relations the caller made or changed, each found by its oid: O(1) in the size of
-- the database); NULL: every one this transaction made (a pass over pg_class and pg_depend).
CREATE FUNCTION worlds._own_storage(rels regclass[] DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT c.oid::regclass AS rel, c.relkind FROM pg_class c
             WHERE c.relnamespace = 'worlds_data'::regnamespace AND c.relkind IN ('r', 'v', 'S')
               AND (c.oid = ANY (rels::oid[])
                    -- (made by this transaction: every one before was made a member by the transaction that made it)
                    OR (rels IS NULL AND worlds._made_now(c.xmin::text::int8)))
               AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e') LOOP
        PERFORM worlds._add_member(r.rel);
    END LOOP;
    -- and holds none of the user's types or collations (catalog/members.rs)
    PERFORM worlds._forget_user_types(array_remove(rels::oid[], NULL));
END $$;

-- Everything pg_worlds added to user tables, removed before DROP EXTENSION (the router calls this).
CREATE FUNCTION worlds._uninstall() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t worlds.tables;
    r record;
BEGIN
    FOR t IN SELECT * FROM worlds.tables LOOP
        PERFORM worlds._drop_storage(t, true);
    END LOOP;
    -- history kept for tables dropped since
    FOR r IN SELECT c.oid::regclass AS rel FROM pg_class c
             WHERE c.relnamespace = 'worlds_data'::regnamespace AND c.relkind IN ('r', 'S') LOOP
        PERFORM worlds._drop_relation(r.rel);
    END LOOP;
END $$;

CREATE FUNCTION worlds._drop_storage(t worlds.tables, drop_triggers boolean) RETURNS void
LANGUAGE plpgsql SET client_min_messages = warning AS $$
BEGIN
    IF drop_triggers THEN
        PERFORM worlds._drop_capture_triggers(t.relid);
    END IF;
    PERFORM worlds._drop_rows_twin(t);
    PERFORM worlds._drop_relation(t.overlay_nothing);
    PERFORM worlds._drop_relation(t.overlay);
    PERFORM worlds._drop_relation(t.delta);
    PERFORM worlds._drop_changes_view(t);
    PERFORM worlds._drop_relation(t.inserts);
    PERFORM worlds._drop_relation(t.history);
    DELETE FROM worlds.tables WHERE tabno = t.tabno;
    PERFORM worlds._tracking_changed(t.relid);
END $$;

-- Is this table one pg_worlds should track automatically? User tables only: not system, extension-owned,
-- temporary or unlogged-into-worlds_data tables.
CREATE FUNCTION worlds._trackable(rel regclass) RETURNS boolean
-- (plpgsql, not sql: its plan is kept for the session; CREATE TABLE asks it once per table)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce((
    SELECT c.relkind = 'r' AND c.relpersistence = 'p' AND NOT c.relispartition
       AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'worlds', 'worlds_data', 'pg_toast')
       AND n.nspname NOT LIKE 'pg_temp%' AND n.nspname NOT LIKE 'pg_toast%'
       -- (a world's own tables, in its namespaces: tracked when a merge brings them to main)
       AND NOT EXISTS (SELECT 1 FROM worlds.world_schema s WHERE s.nsp = n.nspname)
       AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
       AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_namespace'::regclass AND d.objid = n.oid AND d.deptype = 'e')
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = rel
    ), false);
END $$;

-- A tracked table's rows moved to new positions: VACUUM FULL, CLUSTER, an ALTER TABLE that rewrites it,
-- TRUNCATE, or pg_repack's swap of files. History and worlds' rows point at main's rows by position, so
-- at the end of the transaction that moved them (storage/rewrite.rs finds it by the table's relfilenode)
-- every position they hold is followed to where the row is now:
--   * a key's current row (its last change made or kept it) -> that key's row's position now;
--   * every other position (a version gone since) -> a position of its own that no row of main has
--     (pages from 4,000,000,000 up), the same one wherever it appears, so history's chains stay whole.
-- O(history of the table). A table without a key has no identity to follow its rows by: refused while
-- a world lives (0A000), naming the table and the fix.
CREATE FUNCTION worlds._after_rewrite(rel regclass) RETURNS void
LANGUAGE plpgsql
    -- (its DDL on storage is pg_worlds' own: a subcommand, which event triggers don't see; route/hooks.rs)
    SET worlds.internal_ddl = on AS $$
DECLARE
    t worlds.tables;
    k text;
    km text;
    live bigint;
BEGIN
    SELECT * INTO t FROM worlds.tables WHERE relid = rel;
    IF NOT FOUND OR t.history IS NULL THEN
        -- (no storage yet: no position kept anywhere)
        RETURN;
    END IF;
    IF t.key_kind = 'r' THEN
        SELECT count(*) INTO live FROM worlds.world WHERE dropped IS NULL AND num <> 0;
        IF live > 0 THEN
            RAISE EXCEPTION 'table % was rewritten (its rows moved), and it has no primary key by which the % live world(s) of this database can follow its rows; nothing was changed', rel, live
                USING ERRCODE = 'feature_not_supported',
                      HINT = 'Add a primary key to the table, or merge or drop the worlds first.';
        END IF;
    ELSE
        SELECT string_agg(format('%I', c), ', '),
               string_agg(format('m.%I = l.%I', c, c), ' AND ')
          INTO k, km FROM unnest(t.key_columns) c;
        -- one statement, so one snapshot: the map is made once and every position is updated through it
        -- (no temporary table: the session would gain a temp schema, and PREPARE TRANSACTION would refuse)
        EXECUTE format(
            'WITH cur AS (
                 SELECT l._w_new_tid AS old, m.ctid AS new
                   FROM (SELECT DISTINCT ON (%1$s) %1$s, _w_new_tid FROM %2$s ORDER BY %1$s, _w_hseq DESC) l
                   JOIN ONLY %3$s m ON %4$s
                  WHERE l._w_new_tid IS NOT NULL),
             held AS (
                 SELECT _w_old_tid AS tid FROM %5$s UNION SELECT _w_new_tid FROM %5$s
                 UNION SELECT _w_old_tid FROM %6$s UNION SELECT _w_new_tid FROM %6$s
                 %7$s),
             map AS MATERIALIZED (
                 SELECT old, new FROM cur
                 UNION ALL
                 SELECT tid, format(''(%%s,%%s)'', 4000000000 + (n - 1) / 60000, (n - 1) %% 60000 + 1)::tid
                   FROM (SELECT tid, row_number() OVER () AS n FROM held
                          WHERE tid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM cur WHERE cur.old = held.tid)) o),
             h AS (UPDATE %5$s x SET _w_old_tid = coalesce(s.o, x._w_old_tid), _w_new_tid = coalesce(s.n, x._w_new_tid)
                     FROM (SELECT y.ctid AS c, mo.new AS o, mn.new AS n FROM %5$s y
                             LEFT JOIN map mo ON mo.old = y._w_old_tid LEFT JOIN map mn ON mn.old = y._w_new_tid
                            WHERE y._w_old_tid IS NOT NULL OR y._w_new_tid IS NOT NULL) s
                    WHERE x.ctid = s.c RETURNING 1),
             i AS (UPDATE %6$s x SET _w_old_tid = coalesce(s.o, x._w_old_tid), _w_new_tid = coalesce(s.n, x._w_new_tid)
                     FROM (SELECT y.ctid AS c, mo.new AS o, mn.new AS n FROM %6$s y
                             LEFT JOIN map mo ON mo.old = y._w_old_tid LEFT JOIN map mn ON mn.old = y._w_new_tid
                            WHERE y._w_old_tid IS NOT NULL OR y._w_new_tid IS NOT NULL) s
                    WHERE x.ctid = s.c RETURNING 1),
             d AS (%8$s)
             SELECT (SELECT count(*) FROM h) + (SELECT count(*) FROM i) + (SELECT count(*) FROM d)',
            k, t.changes, t.relid, km, t.history, t.inserts,
            -- (no delta before the database's first world)
            CASE WHEN t.delta IS NULL THEN '' ELSE format('UNION SELECT _w_base_tid FROM %s', t.delta) END,
            CASE WHEN t.delta IS NULL THEN 'SELECT 1 WHERE false'
                 ELSE format('UPDATE %s x SET _w_base_tid = m.new FROM map m WHERE m.old = x._w_base_tid RETURNING 1', t.delta) END);
    END IF;
    UPDATE worlds.tables SET filenode = (SELECT c.relfilenode FROM pg_class c WHERE c.oid = rel) WHERE relid = rel;
END $$;

-- Storage follows the table's shape after ALTER TABLE (or a drop that cascaded to its columns): renamed,
-- added and retyped columns, its key, then its overlay views again.
CREATE FUNCTION worlds._sync_table(t worlds.tables) RETURNS void
LANGUAGE plpgsql SET client_min_messages = warning
    SET worlds.internal_ddl = on AS $$
DECLARE
    a record;
    storage regclass;
    pair oid[];
    part int;
    released boolean := false;
    pk text[];
BEGIN
    -- no storage yet: it is made from the table as it is then
    IF t.history IS NULL THEN
        RETURN;
    END IF;
    -- nothing the storage is built from changed, and the overlay views are in place: nothing to do
    IF t.shape IS NOT DISTINCT FROM worlds._shape(t.relid)
       AND NOT EXISTS (SELECT 1 FROM pg_attribute x WHERE x.attrelid = t.overlay AND x.attname = 'placeholder') THEN
        RETURN;
    END IF;
    -- renamed columns: rename them in history and delta too, so rows written before keep their values
    FOR a IN SELECT c.attname::text AS new_name, t.columns[c.attnum] AS old_name FROM pg_attribute c
             WHERE c.attrelid = t.relid AND c.attnum > 0 AND NOT c.attisdropped
               AND t.columns[c.attnum] IS NOT NULL AND t.columns[c.attnum] <> c.attname LOOP
        IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = t.delta AND attname = a.old_name AND NOT attisdropped) THEN
            EXECUTE format('ALTER TABLE %s RENAME COLUMN %I TO %I', t.delta, a.old_name, a.new_name);
        END IF;
        IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = t.history AND attname = a.old_name AND NOT attisdropped) THEN
            PERFORM worlds._drop_changes_view(t);
            EXECUTE format('ALTER TABLE %s RENAME COLUMN %I TO %I', t.history, a.old_name, a.new_name);
            EXECUTE format('ALTER TABLE %s RENAME COLUMN %I TO %I', t.inserts, a.old_name, a.new_name);
        END IF;
    END LOOP;
    -- columns the table has that its history and delta lack (added). The rows they already hold get
    -- the value main's existing rows got (a constant default, kept as the column's missing value;
    -- a volatile one rewrote main's rows one by one, and leaves them NULL)
    FOR a IN SELECT c.attname, format_type(c.atttypid, c.atttypmod) AS typ,
                    CASE WHEN c.attgenerated = 's' THEN format(' GENERATED ALWAYS AS (%s) STORED', pg_get_expr(d.adbin, d.adrelid)) ELSE '' END AS gen,
                    CASE WHEN c.atthasmissing THEN format(' DEFAULT %L::%s', (c.attmissingval::text::text[])[1], format_type(c.atttypid, c.atttypmod)) ELSE '' END AS missing
             FROM pg_attribute c LEFT JOIN pg_attrdef d ON d.adrelid = c.attrelid AND d.adnum = c.attnum
             WHERE c.attrelid = t.relid AND c.attnum > 0 AND NOT c.attisdropped
               AND c.attname NOT IN (SELECT attname FROM pg_attribute WHERE attrelid = t.history AND attnum > 0 AND NOT attisdropped) LOOP
        PERFORM worlds._drop_changes_view(t);
        EXECUTE format('ALTER TABLE %s ADD COLUMN %I %s%s', t.history, a.attname, a.typ, a.missing);
        EXECUTE format('ALTER TABLE %s ADD COLUMN %I %s%s', t.inserts, a.attname, a.typ, a.missing);
        IF t.delta IS NOT NULL THEN
            EXECUTE format('ALTER TABLE %s ADD COLUMN %I %s%s', t.delta, a.attname, a.typ, CASE WHEN a.gen <> '' THEN a.gen ELSE a.missing END);
        END IF;
        IF a.missing <> '' THEN
            -- later rows are written whole: the default served only the rows already there
            EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', t.history, a.attname);
            EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', t.inserts, a.attname);
            IF a.gen = '' AND t.delta IS NOT NULL THEN
                EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', t.delta, a.attname);
            END IF;
        END IF;
    END LOOP;
    -- a changed column type follows on the delta and in history (capture writes the table's values
    -- into them), their values converted as a cast does; when the cast refuses one, the old column
    -- stays under another name and a new one starts
    -- (history and its inserts twin change together: the changes view reads them as one)
    FOR a IN SELECT ta.attname, format_type(ta.atttypid, ta.atttypmod) AS typ FROM pg_attribute ta
             WHERE ta.attrelid = t.relid AND ta.attnum > 0 AND NOT ta.attisdropped LOOP
        FOR part IN 1..2 LOOP
            pair := CASE part WHEN 1 THEN ARRAY[t.delta::oid] ELSE ARRAY[t.history::oid, t.inserts::oid] END;
            CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_attribute x WHERE x.attrelid = ANY (pair) AND x.attname = a.attname
                                      AND NOT x.attisdropped AND format_type(x.atttypid, x.atttypmod) <> a.typ);
            PERFORM worlds._drop_changes_view(t);
            IF pair[1] = t.delta AND NOT released THEN
                -- a type changed by recursion from a parent table: its overlay views were not released first
                PERFORM worlds._release_overlay(t.relid);
                released := true;
            END IF;
            BEGIN
                FOREACH storage IN ARRAY pair LOOP
                    EXECUTE format('ALTER TABLE %s ALTER COLUMN %I TYPE %s USING %I::%s', storage, a.attname, a.typ, a.attname, a.typ);
                END LOOP;
            EXCEPTION WHEN OTHERS THEN
                FOREACH storage IN ARRAY pair LOOP
                    EXECUTE format('ALTER TABLE %s RENAME COLUMN %I TO %I', storage, a.attname,
                                   a.attname || ' (until ' || to_char(statement_timestamp(), 'YYYY-MM-DD HH24:MI:SS.US') || ')');
                    EXECUTE format('ALTER TABLE %s ADD COLUMN %I %s', storage, a.attname, a.typ);
                END LOOP;
            END;
        END LOOP;
    END LOOP;
    PERFORM worlds._log_columns(t);
    UPDATE worlds.tables SET unsupported = worlds._unsupported_reason(relid), columns = worlds._column_names(relid)
    WHERE tabno = t.tabno RETURNING * INTO t;
    -- a primary key added (pgbench -i adds them after loading) or changed: the same storage, read by the new key
    pk := worlds._primary_key(t.relid);
    IF pk IS DISTINCT FROM t.key_columns THEN
        UPDATE worlds.tables SET key_columns = pk, key_kind = worlds._key_kind(t.relid, pk)
        WHERE tabno = t.tabno RETURNING * INTO t;
        IF cardinality(pk) > 0 AND t.delta IS NOT NULL THEN
            EXECUTE format('CREATE INDEX ON %s (%s, _w_dseq)', t.delta, (SELECT string_agg(format('%I', c), ', ') FROM unnest(pk) c));
            IF worlds._needs_world_key_index(t) THEN
                EXECUTE format('CREATE INDEX ON %s (%s, _w_world, _w_dseq)', t.delta, (SELECT string_agg(format('%I', c), ', ') FROM unnest(pk) c));
            END IF;
        END IF;
    END IF;
    PERFORM worlds._build_overlay(t);
    SELECT * INTO t FROM worlds.tables WHERE tabno = t.tabno;
    PERFORM worlds._sync_checks(t);
    PERFORM worlds._sync_owner(t);
    UPDATE worlds.tables SET shape = worlds._shape(relid) WHERE tabno = t.tabno;
    PERFORM worlds._tracking_changed(t.relid);
END $$;

-- The tables inheriting from a table, at any depth (partitions among them).
CREATE FUNCTION worlds._inheritors(rel oid) RETURNS TABLE (relid oid)
LANGUAGE sql STABLE AS $$
    WITH RECURSIVE tree(relid) AS (
        SELECT inhrelid FROM pg_catalog.pg_inherits WHERE inhparent = rel
        UNION
        SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN tree ON i.inhparent = tree.relid)
    SELECT relid FROM tree
$$;

CREATE FUNCTION worlds._on_ddl() RETURNS event_trigger
LANGUAGE plpgsql
    -- (its DDL on storage is pg_worlds' own: a subcommand, which event triggers don't see; route/hooks.rs)
    SET worlds.internal_ddl = on AS $$
DECLARE
    cmd record;
    t worlds.tables;
    a record;
    storage regclass;
    pk text[];
BEGIN
    -- (DDL inside a world is refused by the router before it runs)
    FOR cmd IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
        CONTINUE WHEN cmd.classid <> 'pg_class'::regclass;
        CONTINUE WHEN cmd.schema_name IN ('worlds', 'worlds_data');
        -- (CREATE TABLE is tracked by the utility hook: route/hooks/utility.rs, track_created)
        IF cmd.command_tag IN ('CREATE TABLE AS', 'SELECT INTO') THEN
            IF worlds._trackable(cmd.objid::regclass) THEN
                -- tracking must never fail the user's own DDL
                BEGIN
                    PERFORM worlds.track(cmd.objid::regclass);
                    PERFORM worlds._capture_all_rows(wt, 'I') FROM worlds.tables wt WHERE wt.relid = cmd.objid;
                EXCEPTION WHEN OTHERS THEN
                    -- (in the server log: main's DDL answers as stock Postgres's does)
                    RAISE LOG 'pg_worlds could not track table %: %', cmd.objid::regclass, sqlerrm
                        USING HINT = 'Worlds will not see this table; fix the cause and run SELECT worlds.track(...).';
                END;
            END IF;
        ELSIF cmd.command_tag = 'ALTER TABLE' THEN
            -- the table, and the tables that inherit from it (an ALTER TABLE of a parent, partitioned or
            -- not, recurses to them, and lists only the parent)
            FOR t IN SELECT wt.* FROM worlds.tables wt
                     WHERE wt.relid = cmd.objid
                        OR wt.relid IN (SELECT relid FROM worlds._inheritors(cmd.objid))
                     ORDER BY wt.tabno LOOP
                PERFORM worlds._sync_table(t);
            END LOOP;
        END IF;
    END LOOP;
END $$;

-- Before DDL that would trip over the overlay views (DROP COLUMN, ALTER COLUMN TYPE, DROP TABLE), the
-- router drops them; the DDL's end rebuilds them (or DROP TABLE's cleanup forgets the table).
CREATE FUNCTION worlds._release_overlay(rel regclass) RETURNS void
LANGUAGE plpgsql SET client_min_messages = warning
    -- (its DDL on storage is pg_worlds' own: a subcommand, which event triggers don't see; route/hooks.rs)
    SET worlds.internal_ddl = on AS $$
DECLARE
    t worlds.tables;
    v text;
    n text;
BEGIN
    SELECT * INTO t FROM worlds.tables WHERE relid = rel;
    IF FOUND AND t.overlay IS NOT NULL THEN
        v := t.overlay::text;
        n := t.overlay_nothing::text;
        PERFORM worlds._drop_rows_twin(t);
        PERFORM worlds._drop_relation(t.overlay_nothing);
        PERFORM worlds._drop_relation(t.overlay);
        -- placeholders keep the catalog pointing at real relations until the rebuild
        EXECUTE format('CREATE VIEW %s AS SELECT 1 AS placeholder', v);
        EXECUTE format('CREATE VIEW %s AS SELECT 1 AS placeholder', n);
        UPDATE worlds.tables SET overlay = v::regclass, overlay_nothing = n::regclass WHERE tabno = t.tabno;
        PERFORM worlds._own_storage(ARRAY[v::regclass, n::regclass]);
    END IF;
END $$;

-- The history of a dropped table keeps its values, but not the user's types: a column of a type, domain or
-- array of one the database defined becomes text (its values as text), so DROP TYPE / DOMAIN / SCHEMA work
-- after the table is gone as they do without pg_worlds. Returns the table's row with its changes view
-- (made again when a column changed).
CREATE FUNCTION worlds._unpin_types(t worlds.tables) RETURNS worlds.tables
LANGUAGE plpgsql SET client_min_messages = warning AS $$
DECLARE
    storage regclass;
    a record;
    changed boolean := false;
    cname text := 'a' || substr((SELECT relname FROM pg_class WHERE oid = t.history), 2);
BEGIN
    -- (a drop of a type it used, in the same statement, converted its columns already and dropped the view)
    changed := to_regclass(format('worlds_data.%I', cname)) IS NULL;
    FOREACH storage IN ARRAY ARRAY[t.history, t.inserts] LOOP
        FOR a IN SELECT x.attname FROM pg_attribute x JOIN pg_type ty ON ty.oid = x.atttypid
                 WHERE x.attrelid = storage AND x.attnum > 0 AND NOT x.attisdropped
                   AND (ty.oid >= 16384 OR (ty.typelem <> 0 AND ty.typelem >= 16384) OR x.attcollation >= 16384) LOOP
            IF NOT changed THEN
                PERFORM worlds._drop_changes_view(t);
                changed := true;
            END IF;
            -- (a collation the database defined goes too: DROP COLLATION works after the table is gone)
            EXECUTE format('ALTER TABLE %s ALTER COLUMN %I TYPE text COLLATE "default" USING %I::text', storage, a.attname, a.attname);
        END LOOP;
    END LOOP;
    IF changed THEN
        EXECUTE format('CREATE VIEW worlds_data.%I AS SELECT * FROM %s WHERE worlds._may_read_history(%s) UNION ALL SELECT * FROM %s WHERE worlds._may_read_history(%s)',
                       cname, t.history, t.relid::oid, t.inserts, t.relid::oid);
        EXECUTE format('GRANT SELECT ON worlds_data.%I TO PUBLIC', cname);
        PERFORM worlds._own_storage(ARRAY[format('worlds_data.%I', cname)::regclass, t.history, t.inserts]);
        t.changes := format('worlds_data.%I', cname)::regclass;
    END IF;
    RETURN t;
END $$;

-- Before DROP TYPE / DOMAIN / COLLATION / FUNCTION / SCHEMA / EXTENSION: the storage holds no dependency
-- on the user's types (catalog/members.rs), so the columns of a tracked table's history and delta of a type
-- or collation the drop removes become text here first (their values as text), as a dropped table's do. A
-- column the table itself still has of that type stays when the drop can't succeed without CASCADE
-- (Postgres refuses it, as stock). Types the drop takes with it: the named ones, those of the schemas and
-- extensions, their array types, and with CASCADE every type built on them (domains, ranges, composites).
-- The delta's copies of CHECK constraints and generated expressions that call a function the drop removes
-- go too (the table's own go with the drop, or the drop fails and this is undone with it), so Postgres
-- names only the user's objects in its notices and errors. Returns the tracked tables whose storage
-- changed: the router syncs them after the drop (worlds._after_drop).
CREATE FUNCTION worlds._before_drop(types oid[], schemas oid[], collations oid[], functions oid[],
                                    extensions oid[], tables oid[], cascade boolean) RETURNS int4[]
LANGUAGE plpgsql SET client_min_messages = warning
    SET worlds.internal_ddl = on AS $$
DECLARE
    t worlds.tables;
    c record;
    touched int4[] := '{}';
    doomed oid[];
    colls oid[];
    procs oid[];
    members oid[];
    k name;
BEGIN
    SELECT array_agg(d.objid) INTO members FROM pg_depend d
     WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ANY (extensions) AND d.deptype = 'e';
    members := coalesce(members, '{}');
    WITH RECURSIVE doomed_types(oid) AS (
        SELECT unnest(types)
        UNION SELECT ty.oid FROM pg_type ty WHERE ty.typnamespace = ANY (schemas) OR ty.oid = ANY (members)
        UNION
        SELECT ty.oid FROM pg_type ty JOIN doomed_types d
            ON ty.typelem = d.oid AND ty.typlen = -1 AND ty.typcategory = 'A'
            OR (cascade AND (ty.typbasetype = d.oid
                 OR ty.oid IN (SELECT r.rngtypid FROM pg_range r WHERE r.rngsubtype = d.oid)
                 OR ty.oid IN (SELECT r.rngmultitypid FROM pg_range r WHERE r.rngsubtype = d.oid)
                 OR (ty.typtype = 'c' AND EXISTS (SELECT 1 FROM pg_class k JOIN pg_attribute x ON x.attrelid = k.oid
                                                 WHERE k.oid = ty.typrelid AND k.relkind = 'c' AND x.atttypid = d.oid))))
    )
    SELECT array_agg(oid) INTO doomed FROM doomed_types WHERE oid >= 16384;
    doomed := coalesce(doomed, '{}');
    SELECT array_agg(cl.oid) INTO colls FROM pg_collation cl
     WHERE cl.oid >= 16384 AND (cl.oid = ANY (collations) OR cl.collnamespace = ANY (schemas) OR cl.oid = ANY (members));
    colls := coalesce(colls, '{}');
    -- functions: the named ones, those of the schemas and extensions, and with CASCADE those taking or
    -- returning a type that goes
    SELECT array_agg(p.oid) INTO procs FROM pg_proc p
     WHERE p.oid >= 16384 AND (p.oid = ANY (functions) OR p.pronamespace = ANY (schemas) OR p.oid = ANY (members)
            OR (cascade AND (p.prorettype = ANY (doomed) OR p.proargtypes::oid[] && doomed)));
    procs := coalesce(procs, '{}');
    IF cardinality(doomed) = 0 AND cardinality(colls) = 0 AND cardinality(procs) = 0 THEN
        RETURN touched;
    END IF;
    -- the delta's CHECK copies and generated expressions calling a function that goes, and the overlay
    -- views' copies of the table's column defaults (they go with the views, made again after)
    IF cardinality(procs) > 0 THEN
        FOR c IN SELECT DISTINCT wt.tabno, ad.adrelid = wt.delta AS in_delta, k.conname, a.attname, a.attgenerated <> '' AS generated
                 FROM worlds.tables wt JOIN pg_depend d ON d.refclassid = 'pg_proc'::regclass AND d.refobjid = ANY (procs)
                 LEFT JOIN pg_constraint k ON d.classid = 'pg_constraint'::regclass AND k.oid = d.objid AND k.conrelid = wt.delta
                 LEFT JOIN pg_attrdef ad ON d.classid = 'pg_attrdef'::regclass AND ad.oid = d.objid
                                        AND ad.adrelid IN (wt.delta, wt.overlay, wt.overlay_nothing)
                 LEFT JOIN pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum
                 WHERE k.oid IS NOT NULL OR ad.oid IS NOT NULL
                 ORDER BY wt.tabno LOOP
            IF NOT c.tabno = ANY (touched) THEN
                touched := touched || c.tabno;
                PERFORM worlds._release_overlay(relid) FROM worlds.tables WHERE tabno = c.tabno;
            END IF;
            SELECT * INTO t FROM worlds.tables WHERE tabno = c.tabno;
            IF c.conname IS NOT NULL THEN
                EXECUTE format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS %I', t.delta, c.conname);
            ELSIF c.in_delta AND c.generated THEN
                EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP EXPRESSION', t.delta, c.attname);
            ELSIF c.in_delta THEN
                EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', t.delta, c.attname);
            END IF;
        END LOOP;
    END IF;
    IF cardinality(doomed) = 0 AND cardinality(colls) = 0 THEN
        RETURN touched;
    END IF;
    -- one query over every tracked table's storage: the columns of a type or collation that goes
    FOR c IN SELECT wt.tabno, s.rel, x.attname, s.rel = wt.delta AS in_delta, x.attgenerated <> '' AS generated,
                    u.attname IS NOT NULL AS live
             FROM worlds.tables wt CROSS JOIN LATERAL unnest(ARRAY[wt.history, wt.inserts, wt.delta]) AS s(rel)
             JOIN pg_attribute x ON x.attrelid = s.rel AND x.attnum > 0 AND NOT x.attisdropped
             -- the table's own column of that name, unless the table goes too
             LEFT JOIN pg_attribute u ON u.attrelid = wt.relid AND u.attname = x.attname AND NOT u.attisdropped
                                      AND NOT wt.relid = ANY (tables)
             WHERE (x.atttypid = ANY (doomed) OR x.attcollation = ANY (colls))
               -- the table's own column of the type: without CASCADE the drop fails (as stock)
               AND (cascade OR u.attname IS NULL OR NOT (u.atttypid = ANY (doomed) OR u.attcollation = ANY (colls)))
             ORDER BY wt.tabno, in_delta DESC LOOP
        SELECT * INTO t FROM worlds.tables WHERE tabno = c.tabno;
        IF NOT t.tabno = ANY (touched) THEN
            touched := touched || t.tabno;
            PERFORM worlds._release_overlay(t.relid);
        END IF;
        IF c.in_delta THEN
            -- the delta's CHECK copies may read the column as its type: they go, and the sync after the
            -- drop copies the table's own again (worlds._sync_checks)
            FOR k IN SELECT conname FROM pg_constraint WHERE conrelid = t.delta AND contype = 'c' LOOP
                EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', t.delta, k);
            END LOOP;
        END IF;
        PERFORM worlds._drop_changes_view(t);
        IF c.in_delta AND c.generated THEN
            EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP EXPRESSION', t.delta, c.attname);
        END IF;
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I TYPE text COLLATE "default" USING %I::text', c.rel, c.attname, c.attname);
        IF c.live THEN
            -- the table's column goes with the drop (CASCADE), its rows keep values of the old type: the
            -- history's column stays under another name, as a column whose type changed does
            EXECUTE format('ALTER TABLE %s RENAME COLUMN %I TO %I', c.rel, c.attname,
                           c.attname || ' (until ' || to_char(statement_timestamp(), 'YYYY-MM-DD HH24:MI:SS.US') || ')');
        END IF;
    END LOOP;
    RETURN touched;
END $$;

-- After such a drop: the tables whose storage changed, still tracked, follow their shape again.
CREATE FUNCTION worlds._after_drop(touched int4[]) RETURNS void
LANGUAGE plpgsql SET client_min_messages = warning
    SET worlds.internal_ddl = on AS $$
DECLARE
    t worlds.tables;
BEGIN
    FOR t IN SELECT * FROM worlds.tables WHERE tabno = ANY (touched) ORDER BY tabno LOOP
        UPDATE worlds.tables SET shape = NULL WHERE tabno = t.tabno RETURNING * INTO t;
        PERFORM worlds._sync_table(t);
    END LOOP;
END $$;

-- DROP TABLE of a tracked table: its delta and view go; its history stays readable until retention
-- purges it (time travel reads dropped tables).
CREATE FUNCTION worlds._on_drop() RETURNS event_trigger
LANGUAGE plpgsql SET client_min_messages = warning
    -- (its DDL on storage is pg_worlds' own: a subcommand, which event triggers don't see; route/hooks.rs)
    SET worlds.internal_ddl = on AS $$
DECLARE
    obj record;
    t worlds.tables;
BEGIN
    FOR obj IN SELECT * FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table' AND objsubid = 0 LOOP
        SELECT * INTO t FROM worlds.tables WHERE relid = obj.objid;
        CONTINUE WHEN NOT FOUND;
        IF t.history IS NULL THEN
            -- never written (nor had rows when dropped: _capture_drop): no change to keep
            DELETE FROM worlds.tables WHERE tabno = t.tabno;
            CONTINUE;
        END IF;
        PERFORM worlds._drop_rows_twin(t);
        PERFORM worlds._drop_relation(t.overlay_nothing);
        PERFORM worlds._drop_relation(t.overlay);
        PERFORM worlds._drop_relation(t.delta);
        -- its history stays for AS OF (the router captured every row as deleted before the drop), in
        -- built-in types only: the user's types, domains and schemas drop as they would without pg_worlds
        t := worlds._unpin_types(t);
        -- a dropped table's history is read by time, never by transaction: its xid indexes go (two
        -- relations fewer in pg_class for each table a migration or a test suite creates and drops)
        PERFORM worlds._drop_relation(i.indexrelid::regclass) FROM pg_index i WHERE i.indrelid IN (t.history, t.inserts);
        -- ... and one table of it: its inserts move in with its before-images (O(rows inserted), once),
        -- and the changes view reads that table alone
        t := worlds._fold_history(t);
        INSERT INTO worlds.dropped_table (schema_name, table_name, tabno, changes, history, inserts, columns, dropped)
        VALUES (obj.schema_name, obj.object_name, t.tabno, t.changes, t.history, t.inserts, coalesce(t.columns, '{}'), clock_timestamp());
        -- (no invalidation of every relation: the table's own drop invalidates it, and that drops its
        -- layout and the tracked-table maps in every backend)
        DELETE FROM worlds.tables WHERE tabno = t.tabno;
    END LOOP;
END $$;

-- May the current role read the history of the table with this OID? SELECT on the table, or superuser (a
-- table dropped since has no privileges left to check).
CREATE FUNCTION worlds._may_read_history(rel oid) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    -- (row-level security that applies to the role: history's before-images would show rows it hides)
    SELECT CASE WHEN rel = 0 THEN false
                ELSE coalesce(has_table_privilege(rel, 'SELECT') AND NOT row_security_active(rel), false) END
        OR coalesce((SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user), false)
$$;

-- Columns added and dropped since the last sync of t, into worlds.column_log (called before the sync).
CREATE FUNCTION worlds._log_columns(t worlds.tables) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    a record;
BEGIN
    FOR a IN SELECT c.attnum, c.attname::text AS name, c.attisdropped,
                    t.columns[c.attnum] AS was, t.columns IS NOT NULL AND c.attnum > cardinality(t.columns) AS new,
                    format_type(c.atttypid, c.atttypmod) AS typ
             FROM pg_attribute c WHERE c.attrelid = t.relid AND c.attnum > 0 ORDER BY c.attnum LOOP
        IF a.new AND NOT a.attisdropped THEN
            INSERT INTO worlds.column_log (tabno, attnum, attname, typ, added) VALUES (t.tabno, a.attnum, a.name, a.typ, clock_timestamp());
        ELSIF NOT a.attisdropped AND a.was IS NOT NULL AND a.was <> a.name THEN
            INSERT INTO worlds.column_log (tabno, attnum, attname, typ, dropped, renamed)
            VALUES (t.tabno, a.attnum, a.was, a.typ, clock_timestamp(), true);
        ELSIF a.attisdropped AND a.was IS NOT NULL THEN
            -- the type as history keeps it (a dropped column's type is gone from pg_attribute)
            UPDATE worlds.column_log SET dropped = clock_timestamp() WHERE tabno = t.tabno AND attnum = a.attnum AND dropped IS NULL AND NOT renamed;
            IF NOT FOUND THEN
                INSERT INTO worlds.column_log (tabno, attnum, attname, typ, dropped)
                SELECT t.tabno, a.attnum, a.was, format_type(h.atttypid, h.atttypmod), clock_timestamp()
                FROM pg_attribute h WHERE h.attrelid = t.history AND h.attname = a.was AND NOT h.attisdropped;
            END IF;
        END IF;
    END LOOP;
END $$;

-- Every row of a tracked table into its history as deleted, in history's order (storage/capture.rs,
-- _capture_rows), after every change captured before: TRUNCATE and DROP TABLE are captured, not lost.
-- With op 'I', as inserted instead: the rows a CREATE TABLE AS / SELECT INTO wrote before tracking began
-- (it begins when the command ends), so the past doesn't hold them (AS OF, a world forked before); kept as
-- capture keeps an insert, the key only (a table without a key by its tid alone).
CREATE FUNCTION worlds._capture_all_rows(t worlds.tables, op "char" DEFAULT 'D') RETURNS void
LANGUAGE sql AS $$ SELECT worlds._capture_rows(t.tabno, op) $$;

-- DROP TABLE of a tracked table (called by the router before the drop runs)
CREATE FUNCTION worlds._capture_drop(rel regclass) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t worlds.tables;
BEGIN
    SELECT * INTO t FROM worlds.tables WHERE relid = rel;
    IF FOUND THEN
        PERFORM worlds._capture_all_rows(t);
    END IF;
END $$;

-- TRUNCATE of a tracked table is captured, not lost: every row goes to history as a delete first, so
-- worlds forked before it keep seeing them. (O(rows); TRUNCATE of a large tracked table pays for it.)
CREATE FUNCTION worlds._capture_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM worlds._capture_all_rows(t) FROM worlds.tables t WHERE t.tabno = TG_ARGV[0]::integer;
    RETURN NULL;
END $$;
