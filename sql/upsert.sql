-- INSERT ... ON CONFLICT DO UPDATE inside a world: Postgres's semantics, only the world changes.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE inv (id int PRIMARY KEY, name text NOT NULL UNIQUE, qty int DEFAULT 0 CHECK (qty >= 0), note text);
INSERT INTO inv VALUES (1, 'apple', 5, NULL), (2, 'pear', 3, 'x');
SELECT * FROM worlds.sql('create world w');
SET worlds.world = 'w';

-- an existing key is updated from the row the world sees and the proposed row (EXCLUDED)
INSERT INTO inv VALUES (1, 'apple', 10) ON CONFLICT (id) DO UPDATE SET qty = inv.qty + excluded.qty RETURNING *;
-- a new key is inserted (defaults applied); an alias; several rows; the WHERE of DO UPDATE
INSERT INTO inv AS i (id, name) VALUES (3, 'plum'), (2, 'pear') ON CONFLICT (id)
  DO UPDATE SET qty = i.qty + 1, note = 'again' WHERE i.qty < 100 RETURNING *;
-- WHERE false: nothing written, nothing returned (INSERT 0 0)
INSERT INTO inv VALUES (2, 'pear', 4) ON CONFLICT (id) DO UPDATE SET qty = 0 WHERE inv.qty > 100 RETURNING *;
-- ON CONFLICT ON CONSTRAINT naming the primary key
INSERT INTO inv VALUES (2, 'pear', 4) ON CONFLICT ON CONSTRAINT inv_pkey DO UPDATE SET note = excluded.name || '!';
-- from a query, and through a prepared statement (parameters in VALUES)
INSERT INTO inv SELECT g, 'n' || g, g FROM generate_series(3, 4) g ON CONFLICT (id) DO UPDATE SET qty = excluded.qty * 10;
PREPARE put(int, text, int) AS INSERT INTO inv VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET qty = excluded.qty;
EXECUTE put(1, 'apple', 42);
EXECUTE put(9, 'nine', 9);
-- DO UPDATE may change the key
INSERT INTO inv VALUES (9, 'nine') ON CONFLICT (id) DO UPDATE SET id = 10 RETURNING id, name;
SELECT * FROM inv ORDER BY id;

-- constraints hold on the updated row, with Postgres's errors; a failed statement changes nothing
SELECT try($$insert into inv values (1, 'apple') on conflict (id) do update set qty = -1$$);
SELECT try($$insert into inv values (1, 'apple') on conflict (id) do update set name = null$$);
SELECT try($$insert into inv values (1, 'apple') on conflict (id) do update set id = 2$$);
SELECT try($$insert into inv values (1, 'apple') on conflict (id) do update set name = 'pear'$$);
SELECT try($$insert into inv values (5, 'e', 1), (5, 'e', 2) on conflict (id) do update set qty = excluded.qty$$);
-- the statement's parameters in SET and WHERE, as drivers send them (NULL and text too)
PREPARE bump(int, text, int) AS INSERT INTO inv AS i VALUES ($1, 'p', 0) ON CONFLICT (id)
  DO UPDATE SET qty = i.qty + $3, note = $2 WHERE i.qty < $3 * 100 RETURNING id, qty, note;
EXECUTE bump(1, 'bumped', 5);
EXECUTE bump(1, NULL, 1);
EXECUTE bump(3, 'it''s {a,"b"}', 2);
PREPARE bump8(int, text, int8) AS INSERT INTO inv AS i VALUES ($1, 'p', 0) ON CONFLICT (id)
  DO UPDATE SET qty = i.qty + $3, note = $2 WHERE i.qty < $3 * 100 RETURNING id, qty, note;
EXECUTE bump8(1, 'eight', 8);
-- a unique index other than the primary key as the conflict target (as ORMs upsert by a unique field):
-- the row the world has is updated, its key kept; DO NOTHING skips on any unique conflict
RESET worlds.world;
CREATE TABLE users (id serial PRIMARY KEY, email text NOT NULL UNIQUE, visits int NOT NULL DEFAULT 0);
INSERT INTO users (email) VALUES ('ada@x'), ('bob@x');
SELECT * FROM worlds.sql('create world u');
SET worlds.world = u;
INSERT INTO users (email, visits) VALUES ('ada@x', 1) ON CONFLICT (email) DO UPDATE SET visits = users.visits + excluded.visits RETURNING id, email, visits;
INSERT INTO users (email, visits) VALUES ('cy@x', 1) ON CONFLICT ON CONSTRAINT users_email_key DO UPDATE SET visits = users.visits + 1 RETURNING email, visits;
INSERT INTO users (email) VALUES ('bob@x') ON CONFLICT DO NOTHING RETURNING id;
INSERT INTO users (email) VALUES ('bob@x') ON CONFLICT (email) DO NOTHING RETURNING id;
SELECT try($$insert into users (email) values ('ada@x'), ('ada@x') on conflict (email) do update set visits = 9$$);
SELECT email, visits FROM users ORDER BY email;
SET worlds.world = w;
-- the same key in two statements of one transaction (or of one function) is no "second time"
BEGIN;
INSERT INTO inv VALUES (6, 'six', 1) ON CONFLICT (id) DO UPDATE SET qty = inv.qty + 1;
INSERT INTO inv VALUES (6, 'six', 1) ON CONFLICT (id) DO UPDATE SET qty = inv.qty + 1 RETURNING id, qty;
COMMIT;
DO $$ DECLARE step int := 1; BEGIN
  INSERT INTO inv VALUES (6, 'six', 1) ON CONFLICT (id) DO UPDATE SET qty = inv.qty + 1;
  INSERT INTO inv VALUES (6, 'six', 1) ON CONFLICT (id) DO UPDATE SET qty = inv.qty + step WHERE step > 0;
END $$;
SELECT id, qty FROM inv WHERE id = 6;
-- what the world can't do yet is refused clearly (0A000), never done wrong
SELECT try($$insert into inv values (1, 'apple') on conflict (note) do update set qty = 1$$);
SELECT try($$insert into inv values (1, 'apple') on conflict (id) do update set (qty, note) = (select 1, 'x')$$);
SELECT * FROM inv ORDER BY id;

-- main never saw any of it; DIFF shows the world's changes
SET worlds.world = 'main';
SELECT * FROM inv ORDER BY id;
SELECT d->>'id' AS id, d->>'change' AS change, d->'after' AS after FROM worlds.sql('diff world w') d ORDER BY (d->>'id')::int;
-- in main, ON CONFLICT DO UPDATE is Postgres's own
INSERT INTO inv VALUES (1, 'apple', 1) ON CONFLICT (id) DO UPDATE SET qty = inv.qty + excluded.qty RETURNING *;
-- DO NOTHING skips a row whose key the same statement inserted before, as Postgres does
RESET worlds.world;
CREATE TABLE dn (id int PRIMARY KEY, body text);
SELECT * FROM worlds.sql('create world dn_w');
SET worlds.world = dn_w;
INSERT INTO dn VALUES (7, 'a'), (7, 'b') ON CONFLICT (id) DO NOTHING;
INSERT INTO dn VALUES (8, 'a'), (8, 'b') ON CONFLICT DO NOTHING RETURNING *;
SELECT * FROM dn ORDER BY id;
RESET worlds.world;
-- ON CONSTRAINT of a constraint without an index: Postgres's 42809, in main and in a world (it crashed
-- the server in a world: found by sqlsmith)
INSERT INTO inv VALUES (1, 'x') ON CONFLICT ON CONSTRAINT inv_qty_check DO NOTHING;
SET worlds.world = w;
INSERT INTO inv VALUES (1, 'x') ON CONFLICT ON CONSTRAINT inv_qty_check DO NOTHING;
INSERT INTO inv VALUES (1, 'x') ON CONFLICT ON CONSTRAINT inv_qty_check DO UPDATE SET note = 'n';
RESET worlds.world;
