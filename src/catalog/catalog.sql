-- pg_worlds catalog: ordinary tables, WAL-logged and dumped with the database.
-- Schema `worlds` (created by CREATE EXTENSION from the control file) holds the catalog and the SQL API;
-- schema `worlds_data` holds the generated storage: per tracked table a history, a delta and an overlay view.

CREATE SCHEMA worlds_data;

-- One row per world ever made; main is world number 0. Dropped worlds keep their row (dropped is set)
-- so SHOW HISTORY and UNDO MERGE can still name them.
CREATE TABLE worlds.world (
    num           integer PRIMARY KEY,                 -- compact number stored in delta rows
    id            text NOT NULL UNIQUE,                -- stable ID; main's is 'main'
    name          text NOT NULL,
    parent        integer REFERENCES worlds.world (num),
    depth         integer NOT NULL,
    created       timestamptz,
    version       bigint NOT NULL DEFAULT 0,           -- moves on with each write statement and partial merge
    meta          jsonb NOT NULL DEFAULT '{}',
    owner         text,                                -- the agent that forked it, or null
    creator       oid,                                 -- the role (session user) that made it
    expires       timestamptz,
    active        timestamptz,
    pinned        boolean NOT NULL DEFAULT false,
    fork_snapshot pg_snapshot,                         -- the parent's snapshot when this world forked
    fork_at       timestamptz,                         -- forked from main as it was at this time ('main@when')
    rebased       timestamptz,                         -- when its fork point last moved (REBASE)
    merged_part   boolean NOT NULL DEFAULT false,      -- merged in part (ONLY TABLES / KEYS) at least once
    dropped       timestamptz                          -- null while live
)
-- a world's row gets a new version at each commit of its writers (version, active): pages kept mostly
-- free, so each read of the row prunes the dead versions ahead of it instead of walking up to a page of them
WITH (fillfactor = 10);
CREATE UNIQUE INDEX world_live_name ON worlds.world (name) WHERE dropped IS NULL;
-- a world's forks (DROP refuses live ones, the expiry skips their parents): found by key, not by a scan of
-- every world ever made. Not a partial index (WHERE dropped IS NULL): every world is made live and then
-- dropped, so such an index holds an entry per world ever made until VACUUM, while its statistics say it
-- is as small as the live worlds; the planner then scanned it whole to find a world by name (measured:
-- SIMULATE's per-world time tripled after a VACUUM ANALYZE; issue 44)
CREATE INDEX world_parent ON worlds.world (parent);
-- the expiry's candidates (catalog/lifecycle.sql, worlds._expire_worlds): worlds with a TTL, and the worlds a
-- SIMULATE forked; both few, so every lifecycle statement's sweep reads a few index entries, not every world
CREATE INDEX world_expires ON worlds.world (expires) WHERE dropped IS NULL AND expires IS NOT NULL;
CREATE INDEX world_simulated ON worlds.world (num) WHERE dropped IS NULL AND meta ? '_worlds_sim';
CREATE SEQUENCE worlds.world_num_seq START 1 OWNED BY worlds.world.num;
INSERT INTO worlds.world (num, id, name, parent, depth) VALUES (0, 'main', 'main', NULL, 0);

-- The namespaces that hold a world's own objects (tables, views, sequences, functions, types it made):
-- one per world and schema, named `pg_w<num>_<schema>` (storage/search_path.rs). A session in the world
-- resolves names in them ahead of the schema; main never sees them on its search_path.
CREATE TABLE worlds.world_schema (
    world   integer NOT NULL REFERENCES worlds.world (num),
    schema  name NOT NULL,                              -- the schema it stands for (main may not have it)
    nsp     name NOT NULL UNIQUE,                       -- the namespace's name
    created timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (world, schema)
);

-- Foreign keys from a world's own table to one of main's: not made in the world (worlds check foreign
-- keys at their merge), added by the merge once the world's rows are in, checked by Postgres then.
CREATE TABLE worlds.world_fk (
    world      integer NOT NULL REFERENCES worlds.world (num),
    relid      oid NOT NULL,                            -- the world's table
    definition text NOT NULL                            -- FOREIGN KEY (...) REFERENCES ..., as ALTER TABLE ADD takes it
);

-- Main's tables a world changed the shape of (ALTER TABLE, an index, a trigger, a comment on one of main's
-- tables from a world): the world works on a copy of the table as it sees it, its twin, made at its first
-- such statement in the world's namespace of the table's schema (storage/world_twins.rs). The twin is
-- found first by the world's names, and main's table is read as the twin by the world's queries that
-- reach it another way (a qualified name, main's views). A merge runs the world's statements on main's
-- table, then brings the rows the world changed (merge/twins.rs).
CREATE TABLE worlds.world_twin (
    world   integer NOT NULL REFERENCES worlds.world (num),
    tabno   integer NOT NULL,                           -- main's tracked table (worlds.tables.tabno)
    relid   oid NOT NULL,                               -- main's table
    twin    oid NOT NULL,                               -- the world's copy
    shape   text NOT NULL,                              -- main's columns and constraints when the copy was made
    made    timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (world, tabno)
);
-- The statements a world ran on its twins, in order, as the merge runs them again on main's tables: the
-- text as written, with the role that ran it and its search_path. `constraint_only`: the statement only
-- adds constraints or indexes (a trailing run of these is run after the world's rows, which may be what
-- makes them hold).
CREATE TABLE worlds.world_twin_ddl (
    seq             bigserial PRIMARY KEY,
    world           integer NOT NULL REFERENCES worlds.world (num),
    tabno           integer NOT NULL,
    role            oid NOT NULL,
    path            text NOT NULL,
    command         text NOT NULL,
    constraint_only boolean NOT NULL
);
-- The keys of the rows a world wrote in a twin (its key's text, as history writes main's), by the twin's
-- own statement triggers; '*' when the twin has no primary key then (every row counts).
CREATE TABLE worlds.world_twin_keys (
    world   integer NOT NULL,
    tabno   integer NOT NULL,
    key     text NOT NULL,
    PRIMARY KEY (world, tabno, key)
);

-- Main's views and functions a world replaced (CREATE OR REPLACE VIEW / FUNCTION of one main has): the
-- world's version is its own object, in its namespace, found first by its names; the merge runs the
-- world's statement on main (merge/twins.rs). `main_def` is main's definition when the world replaced it
-- (main changing it since: 40001).
CREATE TABLE worlds.world_replaced (
    world    integer NOT NULL REFERENCES worlds.world (num),
    kind     text NOT NULL,                             -- view, function
    schema   name NOT NULL,                             -- main's schema
    name     name NOT NULL,
    main_def text NOT NULL,
    role     oid NOT NULL,
    path     text NOT NULL,
    command  text NOT NULL,
    seq      bigserial,
    PRIMARY KEY (world, kind, schema, name)
);

-- Tracked tables and the storage generated for each. Found by regclass (dumped by name), never by an OID
-- baked into a name.
CREATE TABLE worlds.tables (
    relid            regclass PRIMARY KEY,
    tabno            integer NOT NULL UNIQUE,
    key_columns      text[],                 -- primary key columns; empty: the whole row is the key
    key_kind         "char",                 -- 'i' one integer column, 't' anything else, 'r' whole row
                                             -- (both null, like history, until the storage is made)
    -- (history, inserts and the views are made at the table's first captured write, or with the database's
    -- first world, whichever comes first: null until then, the table then has no change to keep; see
    -- worlds._make_history)
    history          regclass,               -- before-images of main's updates and deletes (the overlay reads it)
    inserts          regclass,               -- main's inserts (key and new row only; same columns as history)
    changes          regclass,      -- a view: history and inserts together, in one order
    delta            regclass,               -- worlds' own rows; made once the database has a world (storage/world_storage.rs)
    overlay          regclass,               -- (both set by worlds._build_overlay, which track() runs)
    overlay_nothing  regclass,               -- the overlay as INSERT ... ON CONFLICT DO NOTHING target
    merge_by_columns boolean NOT NULL DEFAULT false,
    columns          text[],                 -- the table's column names by attnum at the last sync (renames)
    unsupported      text,                   -- why the table can't be used inside a world, or null
    tracked_at       timestamptz NOT NULL DEFAULT now(), -- when tracking began (DIFF of moments: create table)
    filenode         oid,                    -- the table's relfilenode history's row positions point into
                                             -- (a rewrite changes it: worlds._after_rewrite follows them)
    shape            text                    -- worlds._shape at the last sync: an ALTER TABLE that leaves it
                                             -- (SET (...), CLUSTER ON, ...) rebuilds nothing
);
CREATE SEQUENCE worlds.tables_tabno_seq START 1 OWNED BY worlds.tables.tabno;

-- Columns added to, dropped from or renamed in tracked tables after tracking began, for AS OF's "schema
-- as it was" (a column with no row here has been there, so named, since tracking began). A rename is a row
-- of its own: the name the column had until `dropped`.
CREATE TABLE worlds.column_log (
    tabno    integer NOT NULL,
    attnum   int2 NOT NULL,
    attname  text NOT NULL,
    typ      text NOT NULL,                  -- format_type of the column
    added    timestamptz,                    -- null: there since tracking began
    dropped  timestamptz,                    -- null: still there
    renamed  boolean NOT NULL DEFAULT false  -- the row is a former name (until `dropped`), not a column
);
CREATE INDEX ON worlds.column_log (tabno, attnum);

-- Tracked tables dropped since: their history stays (every row is captured as deleted at the drop) so AS
-- OF can still read them, until history_retention has passed.
CREATE TABLE worlds.dropped_table (
    schema_name text NOT NULL,
    table_name  text NOT NULL,
    tabno       integer NOT NULL,
    changes     regclass NOT NULL,           -- history and inserts together
    history     regclass NOT NULL,
    inserts     regclass NOT NULL,
    columns     text[] NOT NULL,             -- column names by attnum at the drop (null for dropped ones)
    dropped     timestamptz NOT NULL
);

-- World events for SHOW HISTORY. No index on seq alone: every reader and the one UPDATE (a statement's
-- row count, storage/write_events.rs) name the world, and each index is a leaf insert at every commit of
-- a world's writer (the primary key's was 7 k instructions of a world's one-statement transaction)
CREATE TABLE worlds.event (
    seq    bigserial,
    at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    world  integer NOT NULL,
    event  text NOT NULL,
    rows   bigint,
    xid    xid8 DEFAULT pg_current_xact_id_if_assigned()  -- the transaction (UNDO MERGE finds a merge's writes by it)
);
-- a world's events, found by its number: UNDO MERGE, AT VERSION's repeat, the keyless-table check, SHOW
-- REVIEWS and SHOW HISTORY read one world's, never the table whole (it grows for the life of the database)
CREATE INDEX event_world ON worlds.event (world, seq);

-- pg_dump: the catalog and generated storage are derived state and not dumped. A restore creates the
-- extension, then the tables; the event trigger tracks each table anew as it is created (history, worlds
-- and their rows are bound to this cluster's row positions and transaction ids, and don't travel).
-- worlds.settings is dumped (time.sql).
