-- Registered readers and critical marks (spec, "DIFF ... READERS"): they live in a world like a view.
-- Main's entries have world 0; a world's own entries stand over its ancestors' and main's (nearest
-- first), `removed` saying it unregistered or unmarked what one of them has. Forks carry them (a fork
-- sees its chain's), DIFF shows a world's own, MERGE brings them (a schema change under a policy).
CREATE TABLE worlds.reader (
    world    integer NOT NULL,
    kind     text NOT NULL CHECK (kind IN ('registered', 'mark')),
    name     text NOT NULL,
    tbl      regclass NOT NULL DEFAULT 0,       -- registered: the table it reads; a mark: none (0)
    columns  text[],                            -- registered: the columns it reads (null: every column)
    removed  boolean NOT NULL DEFAULT false,
    by_role  text NOT NULL,
    at       timestamptz NOT NULL,
    PRIMARY KEY (world, kind, name, tbl)
);
REVOKE ALL ON worlds.reader FROM PUBLIC;
-- (main's and the worlds' entries are the database's own settings: dumped with it)
SELECT pg_catalog.pg_extension_config_dump('worlds.reader', 'WHERE world = 0');
