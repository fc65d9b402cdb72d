-- Merge checks (spec, merge-checks.txt): queries that must find nothing in what a merge would make. Every
-- merge runs the checks of the tables it changes on its result, inside its transaction and under its
-- locks, after applying and before commit (governance/checks.rs).
CREATE TABLE worlds.merge_check (
    name       text PRIMARY KEY,
    tables     regclass[],                               -- null: every merge runs it
    timeout_ms integer NOT NULL DEFAULT 1000,
    query      text NOT NULL,
    created    timestamptz NOT NULL DEFAULT clock_timestamp()
);
GRANT SELECT ON worlds.merge_check TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('worlds.merge_check', '');

CREATE FUNCTION worlds.show_merge_checks()
RETURNS TABLE (name text, tables text, timeout_ms integer, query text, created timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT c.name, (SELECT string_agg(t::text, ',' ORDER BY o) FROM unnest(c.tables) WITH ORDINALITY u(t, o)), c.timeout_ms, c.query, c.created
    FROM worlds.merge_check c ORDER BY c.created, c.name
$$;

CREATE FUNCTION worlds.drop_merge_check(check_name text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM worlds._refuse_in_transaction('DROP MERGE CHECK');
    PERFORM worlds._require('admin');
    DELETE FROM worlds.merge_check c WHERE c.name = check_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'merge check "%" does not exist', check_name USING ERRCODE = 'invalid_catalog_name';
    END IF;
    RETURN 'DROP MERGE CHECK';
END $$;

-- (called by CREATE MERGE CHECK once the query is validated and ran: the row, as pg_worlds)
CREATE FUNCTION worlds._store_merge_check(check_name text, replace boolean, rels regclass[], timeout integer, q text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT replace AND EXISTS (SELECT 1 FROM worlds.merge_check c WHERE c.name = check_name) THEN
        RAISE EXCEPTION 'merge check "%" already exists', check_name USING ERRCODE = 'duplicate_object';
    END IF;
    INSERT INTO worlds.merge_check (name, tables, timeout_ms, query) VALUES (check_name, rels, timeout, q)
    ON CONFLICT (name) DO UPDATE SET tables = excluded.tables, timeout_ms = excluded.timeout_ms, query = excluded.query, created = clock_timestamp();
END $$;
