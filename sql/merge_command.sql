-- The SQL MERGE command inside a world: Postgres's semantics, only the world changes. Every MERGE runs
-- twice: into the tracked table `stock` (in the world) and into `ref`, a temporary table with the same
-- rows (temporary tables are the session's own, so Postgres runs that MERGE itself); the two must agree.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
-- the row count a statement reports (MERGE n)
CREATE FUNCTION rows(q text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint; BEGIN EXECUTE q; GET DIAGNOSTICS n = ROW_COUNT; RETURN n; END $$;
CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL DEFAULT 1 CHECK (qty >= 0), note text,
                    code text UNIQUE, total int GENERATED ALWAYS AS (qty * 10) STORED);
INSERT INTO stock (sku, qty, note, code) VALUES ('apple', 5, NULL, 'A'), ('pear', 3, 'x', 'P'), ('plum', 1, NULL, 'L');
CREATE TABLE moves (sku text, delta int);
INSERT INTO moves VALUES ('apple', -5), ('pear', 2), ('kiwi', 7), ('fig', NULL);
CREATE TABLE log (line text);   -- no primary key
SELECT * FROM worlds.sql('create world w');
SET worlds.world = 'w';
CREATE TEMP TABLE ref (LIKE stock INCLUDING ALL);
INSERT INTO ref (sku, qty, note, code) SELECT sku, qty, note, code FROM stock;
CREATE TEMP VIEW differ AS
  SELECT 'world' AS side, * FROM (SELECT * FROM stock EXCEPT SELECT * FROM ref) a
  UNION ALL SELECT 'ref', * FROM (SELECT * FROM ref EXCEPT SELECT * FROM stock) b;

-- the three kinds of action, conditions, first match wins, DEFAULT in INSERT
SELECT rows(format($$MERGE INTO %I s USING moves m ON s.sku = m.sku
  WHEN MATCHED AND s.qty + m.delta <= 0 THEN DELETE
  WHEN MATCHED THEN UPDATE SET qty = s.qty + m.delta, note = 'moved'
  WHEN NOT MATCHED AND m.delta IS NOT NULL THEN INSERT (sku, qty) VALUES (m.sku, m.delta)
  WHEN NOT MATCHED THEN INSERT VALUES (m.sku, DEFAULT, 'no delta')$$, t)) FROM unnest(array['stock', 'ref']) t;
SELECT * FROM stock ORDER BY sku;
SELECT * FROM differ;

-- a sub-query source, DO NOTHING, UPDATE SET DEFAULT, only-MATCHED (an inner join): MERGE 0 when no
-- action applies
SELECT rows(format($$MERGE INTO %I AS stock USING (SELECT 'kiwi' AS sku, 1 AS n UNION ALL SELECT 'plum', 2) src
  ON stock.sku = src.sku
  WHEN MATCHED AND src.n = 1 THEN DO NOTHING
  WHEN MATCHED THEN UPDATE SET qty = DEFAULT, note = src.sku || '/' || src.n$$, t)) FROM unnest(array['stock', 'ref']) t;
SELECT rows(format($$MERGE INTO %I USING moves ON false WHEN MATCHED THEN DELETE$$, t)) FROM unnest(array['stock', 'ref']) t;
-- two source rows for one target row are fine while the first does nothing
INSERT INTO moves VALUES ('kiwi', 0);
SELECT rows(format($$MERGE INTO %I s USING moves m ON s.sku = m.sku
  WHEN MATCHED AND m.sku = 'kiwi' THEN DO NOTHING WHEN MATCHED THEN DELETE$$, t)) FROM unnest(array['stock', 'ref']) t;
SELECT * FROM stock ORDER BY sku;
SELECT * FROM differ;

-- parameters: a prepared statement, plpgsql variables, a SQL function's named parameters
PREPARE put(text, int) AS MERGE INTO stock s USING (VALUES ($1, $2)) v(sku, qty) ON s.sku = v.sku
  WHEN MATCHED THEN UPDATE SET qty = v.qty WHEN NOT MATCHED THEN INSERT (sku, qty) VALUES (v.sku, v.qty);
EXECUTE put('pear', 40);
EXECUTE put('lime', 4);
DO $$ DECLARE k text := 'lime'; n int := 9;
BEGIN
  MERGE INTO stock s USING (SELECT k AS sku) v ON s.sku = v.sku WHEN MATCHED THEN UPDATE SET qty = qty + n;
END $$;
SELECT * FROM worlds.sql('switch world main');
CREATE FUNCTION restock(item text, amount int) RETURNS void LANGUAGE sql AS $$
  MERGE INTO stock s USING (SELECT item AS sku) v ON s.sku = v.sku
    WHEN MATCHED THEN UPDATE SET qty = qty + amount WHEN NOT MATCHED THEN INSERT (sku, qty) VALUES (item, amount) $$;
SELECT * FROM worlds.sql('switch world w');
SELECT restock('lime', 100), restock('date', 2);
SELECT sku, qty FROM stock WHERE sku IN ('pear', 'lime', 'date') ORDER BY sku;

-- errors are Postgres's, and a failed MERGE changes nothing
INSERT INTO moves VALUES ('pear', 1);
SELECT try($$merge into stock s using moves m on s.sku = m.sku when matched then update set qty = s.qty + 1$$);
SELECT try($$merge into ref s using moves m on s.sku = m.sku when matched then update set qty = s.qty + 1$$);
SELECT count(*), sum(qty) FROM stock;
SELECT try($$merge into stock s using (select 'pear' as sku) m on s.sku = m.sku when matched then update set qty = -1$$);
SELECT try($$merge into stock s using (select 'new' as sku) m on s.sku = m.sku when not matched then insert (sku, qty) values (m.sku, null)$$);
SELECT try($$merge into stock s using (select 'x1' as sku union all select 'x2') m on s.sku = m.sku when not matched then insert (sku, code) values (m.sku, 'A')$$);
SELECT try($$merge into stock s using (select 'pear' as sku) m on s.sku = m.sku when matched then update set total = 1$$);
SELECT count(*), sum(qty) FROM stock;
-- a table without a primary key: refused with the reason (0A000)
SELECT try($$merge into log using (select 'a' as line) s on log.line = s.line when not matched then insert values (s.line)$$);

-- rights: the role needs what MERGE needs in main
SELECT * FROM worlds.sql('switch world main');
CREATE ROLE merge_clerk;
GRANT SELECT, INSERT ON stock TO merge_clerk;
GRANT SELECT ON moves TO merge_clerk;
SELECT * FROM worlds.sql('switch world w');
SET ROLE merge_clerk;
SELECT try($$merge into stock s using moves m on s.sku = m.sku when not matched then insert (sku, qty) values (m.sku || '2', 1)$$);
SELECT try($$merge into stock s using moves m on s.sku = m.sku when matched then update set qty = 1$$);
RESET ROLE;

-- main saw none of it; the world's version moved with each write
SELECT * FROM worlds.sql('switch world main');
SELECT * FROM stock ORDER BY sku;
SELECT name, version > 0 AS moved FROM worlds.show_worlds() WHERE name = 'w';
-- and a world's past is read-only (25006)
SELECT * FROM worlds.sql('switch world w');
SELECT * FROM worlds.sql('switch world main');
SET worlds.world = 'main@now';
SELECT try($$merge into stock s using moves m on s.sku = m.sku when matched then delete$$);
RESET worlds.world;
DROP OWNED BY merge_clerk;
DROP ROLE merge_clerk;
