-- Worlds through pg_dump and back (see src/catalog/dump.rs). The two tables are empty in a live
-- database: pg_dump fills its copy of them through the filter it appends to its COPY query (the registered
-- condition), and a restore loads them for worlds.restore_worlds() to make the worlds again.
CREATE TABLE worlds.dumped_world (
    name    text NOT NULL,
    id      text,
    parent  text,                             -- the parent's name ('main' for a world of main)
    depth   integer NOT NULL,
    created timestamptz,
    meta    jsonb,
    owner   text,
    expires timestamptz,
    pinned  boolean
);
CREATE TABLE worlds.dumped_row (
    world      text NOT NULL,
    table_name text NOT NULL,                 -- qualified, as the dump names it
    change     text NOT NULL,                 -- insert, update, delete (as DIFF lists them)
    before     jsonb,
    after      jsonb
);

CREATE FUNCTION worlds._portable_worlds() RETURNS SETOF worlds.dumped_world
LANGUAGE sql STABLE AS $$
    SELECT w.name, w.id, p.name, w.depth, w.created, w.meta, w.owner, w.expires, w.pinned
    FROM worlds.world w JOIN worlds.world p ON p.num = w.parent
    WHERE w.dropped IS NULL AND w.num <> 0
$$;

SELECT pg_catalog.pg_extension_config_dump('worlds.dumped_world', 'UNION ALL SELECT * FROM worlds._portable_worlds()');
SELECT pg_catalog.pg_extension_config_dump('worlds.dumped_row', 'UNION ALL SELECT * FROM worlds._portable_rows()');

-- One world of a restored dump, forked from its parent (made first) with the given snapshot; NULL, with a
-- WARNING, when its name is taken or its parent didn't come back.
CREATE FUNCTION worlds._restore_world(world_name text, world_id text, parent_name text, fork pg_snapshot) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    d worlds.dumped_world;
    p worlds.world;
    n integer;
BEGIN
    SELECT * INTO d FROM worlds.dumped_world x WHERE x.name = world_name ORDER BY x.depth LIMIT 1;
    IF EXISTS (SELECT 1 FROM worlds.world w WHERE w.name = world_name AND w.dropped IS NULL) THEN
        RAISE WARNING 'world "%" from the restored dump was not made: a world of that name exists', world_name;
        RETURN NULL;
    END IF;
    SELECT * INTO p FROM worlds.world w WHERE w.name = coalesce(parent_name, 'main') AND w.dropped IS NULL;
    IF NOT FOUND THEN
        RAISE WARNING 'world "%" from the restored dump was not made: its parent "%" did not come back', world_name, parent_name;
        RETURN NULL;
    END IF;
    PERFORM worlds._ensure_world_storage();
    n := nextval('worlds.world_num_seq');
    INSERT INTO worlds.world (num, id, name, parent, depth, created, meta, owner, expires, pinned, active, fork_snapshot, creator)
    VALUES (n,
            CASE WHEN world_id IS NULL OR EXISTS (SELECT 1 FROM worlds.world w WHERE w.id = world_id)
                 THEN 'w' || lpad(to_hex(n), 6, '0') || '-' || substr(md5(random()::text || clock_timestamp()::text), 1, 10)
                 ELSE world_id END,
            world_name, p.num, p.depth + 1, coalesce(d.created, clock_timestamp()), coalesce(d.meta, '{}'), d.owner, d.expires,
            coalesce(d.pinned, false), clock_timestamp(), fork,
            -- (a restored world is the restoring role's: roles aren't in a database's dump)
            (SELECT r.oid FROM pg_roles r WHERE r.rolname = session_user));
    INSERT INTO worlds.event (world, event) VALUES (n, 'forked from ' || p.name), (p.num, 'forked ' || world_name);
    RETURN n;
END $$;
