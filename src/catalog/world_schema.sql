-- A world's own objects (schema changes inside worlds: route/world_ddl.rs, merge/schema.rs).
--
-- What a world made in its namespaces (worlds.world_schema), as DIFF shows it and MERGE brings it to main:
-- one row per object a merge moves, in the order it moves them (a schema of its own first, then types,
-- sequences of their own, tables, views, functions). `sql` is the DDL that makes the same object on the
-- other side, with the world's namespace written as the schema it stands for.
CREATE FUNCTION worlds._world_objects(world_num integer)
RETURNS TABLE (schema text, nsp text, kind text, name text, change text, columns jsonb, sql text[],
               classid oid, objid oid, ord integer)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog AS $$
DECLARE
    s record;
    r record;
    q text;
    mq text;
    defs text;
    cons text;
BEGIN
    FOR s IN SELECT ws.schema::text AS sname, ws.nsp::text AS nname, n.oid AS nspoid,
                    NOT EXISTS (SELECT 1 FROM pg_namespace m WHERE m.nspname = ws.schema) AS new_schema
             FROM worlds.world_schema ws JOIN pg_namespace n ON n.nspname = ws.nsp
             WHERE ws.world = world_num ORDER BY ws.schema LOOP
        q := quote_ident(s.nname) || '.';
        mq := quote_ident(s.sname) || '.';
        schema := s.sname;
        nsp := s.nname;
        IF s.new_schema THEN
            kind := 'schema'; name := s.sname; change := 'create schema'; columns := NULL;
            sql := ARRAY[format('CREATE SCHEMA %I;', s.sname)];
            classid := 'pg_namespace'::regclass; objid := s.nspoid; ord := 0;
            RETURN NEXT;
        END IF;
        -- types of their own: enums, domains, ranges, composite types
        FOR r IN SELECT t.oid, t.typname::text AS tname, t.typtype, t.typrelid, t.typbasetype, t.typtypmod
                 FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid
                 WHERE t.typnamespace = s.nspoid AND t.typtype IN ('e', 'd', 'r', 'c') AND (t.typtype <> 'c' OR c.relkind = 'c')
                 ORDER BY t.oid LOOP
            kind := CASE r.typtype WHEN 'd' THEN 'domain' ELSE 'type' END; name := r.tname; change := 'create type'; columns := NULL;
            classid := 'pg_type'::regclass; objid := r.oid; ord := 1;
            IF r.typtype = 'e' THEN
                sql := ARRAY[format('CREATE TYPE %s%I AS ENUM (%s);', mq, r.tname,
                           (SELECT string_agg(quote_literal(e.enumlabel), ', ' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = r.oid))];
            ELSIF r.typtype = 'd' THEN
                sql := ARRAY[format('CREATE DOMAIN %s%I AS %s%s;', mq, r.tname, format_type(r.typbasetype, r.typtypmod),
                           coalesce((SELECT string_agg(' CONSTRAINT ' || quote_ident(k.conname) || ' ' || pg_get_constraintdef(k.oid), '' ORDER BY k.oid)
                                     FROM pg_constraint k WHERE k.contypid = r.oid), ''))];
            ELSIF r.typtype = 'r' THEN
                sql := ARRAY[format('CREATE TYPE %s%I AS RANGE (subtype = %s);', mq, r.tname,
                           (SELECT format_type(g.rngsubtype, NULL) FROM pg_range g WHERE g.rngtypid = r.oid))];
            ELSE
                sql := ARRAY[format('CREATE TYPE %s%I AS (%s);', mq, r.tname,
                           (SELECT string_agg(format('%I %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attnum)
                            FROM pg_attribute a WHERE a.attrelid = r.typrelid AND a.attnum > 0 AND NOT a.attisdropped))];
            END IF;
            sql := ARRAY(SELECT replace(x, q, mq) FROM unnest(sql) x);
            RETURN NEXT;
        END LOOP;
        -- sequences of their own (a column's serial or identity sequence goes with its table)
        FOR r IN SELECT c.oid, c.relname::text AS rname, sq.* FROM pg_class c JOIN pg_sequence sq ON sq.seqrelid = c.oid
                 WHERE c.relnamespace = s.nspoid AND c.relkind = 'S'
                   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                                   AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i'))
                 ORDER BY c.oid LOOP
            kind := 'sequence'; name := r.rname; change := 'create sequence'; columns := NULL;
            classid := 'pg_class'::regclass; objid := r.oid; ord := 2;
            sql := ARRAY[format('CREATE SEQUENCE %s%I AS %s INCREMENT %s MINVALUE %s MAXVALUE %s START %s CACHE %s%s;', mq, r.rname,
                       format_type(r.seqtypid, NULL), r.seqincrement, r.seqmin, r.seqmax, r.seqstart, r.seqcache,
                       CASE WHEN r.seqcycle THEN ' CYCLE' ELSE '' END)];
            RETURN NEXT;
        END LOOP;
        -- tables
        FOR r IN SELECT c.oid, c.relname::text AS rname, c.relkind, c.relispartition FROM pg_class c
                 WHERE c.relnamespace = s.nspoid AND c.relkind IN ('r', 'p')
                   -- (a twin of main's table is no object of the world's own: merge/twins.rs)
                   AND NOT EXISTS (SELECT 1 FROM worlds.world_twin tw WHERE tw.twin = c.oid)
                 ORDER BY c.oid LOOP
            kind := 'table'; name := r.rname; change := 'create table';
            classid := 'pg_class'::regclass; objid := r.oid; ord := 3;
            SELECT jsonb_agg(format('+%s %s', a.attname, replace(format_type(a.atttypid, a.atttypmod), q, '')) ORDER BY a.attnum),
                   string_agg(format('%I %s%s%s', a.attname, format_type(a.atttypid, a.atttypmod),
                       CASE WHEN a.attidentity <> '' THEN ' GENERATED ' || CASE a.attidentity WHEN 'a' THEN 'ALWAYS' ELSE 'BY DEFAULT' END || ' AS IDENTITY'
                            WHEN a.attgenerated = 's' THEN ' GENERATED ALWAYS AS (' || pg_get_expr(d.adbin, d.adrelid) || ') STORED'
                            WHEN d.adbin IS NOT NULL THEN ' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid)
                            ELSE '' END,
                       CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END), ', ' ORDER BY a.attnum)
              INTO columns, defs
              FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
             WHERE a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped;
            SELECT string_agg(format('CONSTRAINT %I %s', k.conname, pg_get_constraintdef(k.oid)), ', ' ORDER BY k.contype = 'f', k.oid)
              INTO cons FROM pg_constraint k WHERE k.conrelid = r.oid AND k.contype IN ('p', 'u', 'c', 'f', 'x') AND k.conislocal;
            sql := ARRAY(
                SELECT format('CREATE SEQUENCE %s%I;', mq, sc.relname) FROM pg_depend d JOIN pg_class sc ON sc.oid = d.objid
                 WHERE d.classid = 'pg_class'::regclass AND d.refobjid = r.oid AND d.deptype = 'a' AND sc.relkind = 'S' ORDER BY sc.oid);
            IF r.relispartition THEN
                sql := sql || format('CREATE TABLE %s%I PARTITION OF %s %s;', mq, r.rname,
                           (SELECT i.inhparent::regclass::text FROM pg_inherits i WHERE i.inhrelid = r.oid),
                           (SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c WHERE c.oid = r.oid));
            ELSE
                sql := sql || format('CREATE TABLE %s%I (%s)%s;', mq, r.rname, concat_ws(', ', nullif(defs, ''), cons),
                           CASE WHEN r.relkind = 'p' THEN ' PARTITION BY ' || pg_get_partkeydef(r.oid) ELSE '' END);
            END IF;
            sql := sql || ARRAY(
                SELECT pg_get_indexdef(i.indexrelid) || ';' FROM pg_index i
                 WHERE i.indrelid = r.oid AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.conrelid = r.oid)
                 ORDER BY i.indexrelid);
            sql := sql || ARRAY(
                SELECT format('ALTER SEQUENCE %s%I OWNED BY %s%I.%I;', mq, sc.relname, mq, r.rname, a.attname)
                  FROM pg_depend d JOIN pg_class sc ON sc.oid = d.objid
                  JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum = d.refobjsubid
                 WHERE d.classid = 'pg_class'::regclass AND d.refobjid = r.oid AND d.deptype = 'a' AND sc.relkind = 'S' ORDER BY sc.oid);
            sql := ARRAY(SELECT replace(x, q, mq) FROM unnest(sql) x);
            RETURN NEXT;
        END LOOP;
        -- views and materialized views
        FOR r IN SELECT c.oid, c.relname::text AS rname, c.relkind FROM pg_class c
                 WHERE c.relnamespace = s.nspoid AND c.relkind IN ('v', 'm')
                   -- (the world's version of main's view: merge/twins.rs)
                   AND NOT EXISTS (SELECT 1 FROM worlds.world_replaced x WHERE x.world = world_num AND x.kind = 'view'
                                   AND x.schema = s.sname AND x.name = c.relname)
                 ORDER BY c.oid LOOP
            kind := CASE r.relkind WHEN 'v' THEN 'view' ELSE 'materialized view' END;
            name := r.rname; change := 'create ' || kind;
            classid := 'pg_class'::regclass; objid := r.oid; ord := 4;
            SELECT jsonb_agg(format('+%s %s', a.attname, replace(format_type(a.atttypid, a.atttypmod), q, '')) ORDER BY a.attnum) INTO columns
              FROM pg_attribute a WHERE a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped;
            sql := ARRAY[replace(format('CREATE %s %s%I AS %s', upper(kind), mq, r.rname, rtrim(pg_get_viewdef(r.oid), ';')) || ';', q, mq)];
            RETURN NEXT;
        END LOOP;
        -- functions and procedures
        FOR r IN SELECT p.oid, p.proname::text AS pname FROM pg_proc p
                 WHERE p.pronamespace = s.nspoid AND p.prokind IN ('f', 'p')
                   AND NOT EXISTS (SELECT 1 FROM worlds.world_replaced x WHERE x.world = world_num AND x.kind = 'function'
                                   AND x.schema = s.sname AND x.name = p.proname)
                 ORDER BY p.oid LOOP
            kind := 'function'; name := format('%s(%s)', r.pname, pg_get_function_identity_arguments(r.oid));
            change := 'create function'; columns := NULL;
            classid := 'pg_proc'::regclass; objid := r.oid; ord := 5;
            sql := ARRAY[replace(rtrim(pg_get_functiondef(r.oid), E'\n') || ';', q, mq)];
            RETURN NEXT;
        END LOOP;
    END LOOP;
END $$;

-- The statement triggers of a twin (storage/world_twins.rs): the keys of the rows each statement wrote,
-- as the key's text (written as history writes main's: with pg_worlds' fixed output settings), or '*'
-- when the twin has no primary key then (a TRUNCATE, or the key dropped: every row counts).
CREATE FUNCTION worlds._twin_log() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog SET DateStyle = 'ISO' SET IntervalStyle = 'postgres' SET extra_float_digits = 1
SET bytea_output = 'hex' SET standard_conforming_strings = on AS $$
DECLARE
    cols text[];
    k text;
    w integer := TG_ARGV[0]::integer;
    t integer := TG_ARGV[1]::integer;
BEGIN
    SELECT array_agg(quote_ident(c) ORDER BY o) INTO cols FROM unnest(worlds._primary_key(TG_RELID)) WITH ORDINALITY AS k(c, o);
    IF cols IS NULL OR TG_OP = 'TRUNCATE' THEN
        INSERT INTO worlds.world_twin_keys (world, tabno, key) VALUES (w, t, '*') ON CONFLICT DO NOTHING;
        RETURN NULL;
    END IF;
    k := CASE WHEN array_length(cols, 1) = 1 THEN 'r.' || cols[1] || '::text'
              ELSE 'ROW(' || (SELECT string_agg('r.' || c, ', ') FROM unnest(cols) c) || ')::text' END;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        EXECUTE format('INSERT INTO worlds.world_twin_keys (world, tabno, key) SELECT $1, $2, %s FROM _w_new r ON CONFLICT DO NOTHING', k)
            USING w, t;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        EXECUTE format('INSERT INTO worlds.world_twin_keys (world, tabno, key) SELECT $1, $2, %s FROM _w_old r ON CONFLICT DO NOTHING', k)
            USING w, t;
    END IF;
    RETURN NULL;
END $$;
REVOKE EXECUTE ON FUNCTION worlds._twin_log() FROM PUBLIC;

-- Before each statement writing a twin: the world's lock, shared (storage/world_locks.rs), as every
-- writer of a world takes it: a merge of the world (which takes it exclusive) waits for the writers it
-- would otherwise lose, or they for it.
CREATE FUNCTION worlds._twin_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(2092147, TG_ARGV[0]::integer);
    RETURN NULL;
END $$;
REVOKE EXECUTE ON FUNCTION worlds._twin_write() FROM PUBLIC;

-- Main's columns and constraints of a table, as one text: a twin remembers them (worlds.world_twin.shape),
-- and a merge compares them with main's now (both sides changed the table's shape: 40001).
CREATE FUNCTION worlds._table_shape(rel oid) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog AS $$
    SELECT coalesce((SELECT string_agg(format('%s %s %s%s%s', a.attnum, quote_ident(a.attname), format_type(a.atttypid, a.atttypmod),
                                    CASE WHEN a.attnotnull THEN ' not null' ELSE '' END,
                                    coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')), '; ' ORDER BY a.attnum)
                     FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                     WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped), '')
        || ' | ' ||
        coalesce((SELECT string_agg(format('%I %s', k.conname, pg_get_constraintdef(k.oid)), '; ' ORDER BY k.conname)
                  FROM pg_constraint k WHERE k.conrelid = rel), '')
$$;

-- Main's definition of a view or of the functions of a name (merge/twins.rs: the world replaced it; main
-- changing it since is a conflict).
CREATE FUNCTION worlds._main_definition(kind text, sch name, nam name) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog AS $$
    SELECT CASE kind
        WHEN 'view' THEN (SELECT pg_get_viewdef(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                          WHERE n.nspname = sch AND c.relname = nam AND c.relkind = 'v')
        ELSE (SELECT string_agg(pg_get_functiondef(p.oid), E'\n' ORDER BY p.oid) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = sch AND p.proname = nam AND p.prokind IN ('f', 'p'))
    END
$$;
