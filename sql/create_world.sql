-- CREATE WORLD / CREATE BRANCH / FORK WORLD, from the spec's examples, and every SQLSTATE it lists.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE VIEW w AS SELECT name, parent, depth, version, meta, owner, pinned, expires IS NOT NULL AS expires FROM worlds.show_worlds();
CREATE TABLE orders (id int PRIMARY KEY, status text);
INSERT INTO orders VALUES (7, 'new');

SELECT * FROM worlds.sql('create world agent_7 with (task = 42)');
SELECT * FROM worlds.sql('create world agent_8 from main with (owner = ''claude'', task = 42)');
SELECT * FROM worlds.sql('create world run_r42 with (run_id = ''r42'', prompt_version = ''triage-v9'', model = ''claude-opus-5-5'', tool_schema = ''crm-tools-3'')');
SELECT * FROM worlds.sql('CREATE BRANCH b1 FROM agent_7;');
SELECT * FROM worlds.sql('create world "agent-7"');
SELECT * FROM worlds.sql('create world ''quoted name''');
SELECT * FROM worlds.sql('create world m1 meta ''{"tags": ["retry"], "n": 1}''');
SELECT * FROM worlds.sql('fork world agent_7 as agent_7b meta ''{"tags": ["retry"]}''');
SELECT * FROM worlds.sql('fork world agent_7 agent_7c');
SELECT worlds.create_world(name => 'by_function', source => 'main', meta => '{"k": true}');
SELECT worlds.fork_world(source => 'agent_7', name => 'fork_by_function');
-- a world ID works wherever a name does
SELECT try(format('select * from worlds.sql(%L)', format('fork world %L as by_id', (SELECT id FROM worlds.show_worlds() WHERE name = 'agent_7'))));
SELECT * FROM w ORDER BY name;

-- errors: 42710 exists; 3D000 no such source; 22P02 META isn't JSON; 22023 reserved keys, run keys, size
SELECT try($$select * from worlds.sql('create world agent_7')$$);
-- names only of spaces, of the form of a world ID, too long, or null: 42602 / 42622
SELECT try($$select * from worlds.sql('create world " "')$$);
SELECT try($$select * from worlds.sql('create world "w000021-b61d96dab5"')$$);
SELECT try(format('select * from worlds.sql(%L)', format('create world %s', repeat('n', 1025))));
SELECT try($$select worlds.create_world(NULL)$$);
SELECT try($$select * from worlds.sql('create world x from nope')$$);
SELECT try($$select * from worlds.sql('create world x meta ''not json''')$$);
SELECT try($$select * from worlds.sql('create world x with (_worlds_secret = 1)')$$);
SELECT try($$select * from worlds.sql('create world x with (_sonos_x = 1)')$$);
SELECT try($$select * from worlds.sql('create world x meta ''{"_sonos": 1}''')$$);
SELECT try($$select * from worlds.sql('create world x with (run_id = 5)')$$);
SELECT try(format('select worlds.create_world(%L, meta => %L)', 'big', jsonb_build_object('pad', repeat('x', 70000))));
-- the limit counts the JSON as written (compact): 6000 keys in 60001 bytes pass, though jsonb prints them
-- in 72000
SELECT try(format('select * from worlds.sql(%L)', format('create world many_keys meta %L',
       '{' || (SELECT string_agg(format('"%s":1', lpad(g::text, 4, '0')), ',') FROM generate_series(1, 6000) g) || '}')));
SELECT count(*) AS keys FROM worlds.show_worlds() s, jsonb_object_keys(s.meta) WHERE s.name = 'many_keys';
SELECT worlds.drop_world('many_keys');
-- names: a dash needs quotes (42601); empty or @ (42602); _tx_ and MERGE's own words (42939)
SELECT try($$select * from worlds.sql('create world task-1')$$);
SELECT try($$select * from worlds.sql('create world ""')$$);
SELECT try($$select * from worlds.sql('create world ''a@b''')$$);
SELECT try($$select * from worlds.sql('create world _tx_1')$$);
SELECT try($$select * from worlds.sql('create world OURS')$$);
SELECT try($$select * from worlds.sql('create world "Using"')$$);
SELECT try($$select worlds.create_world('only')$$);
-- 53400 past max_worlds
SET worlds.max_worlds = 11;
SELECT try($$select * from worlds.sql('create world one_too_many')$$);
RESET worlds.max_worlds;
-- 25001 inside a transaction block
BEGIN;
SELECT try($$select * from worlds.sql('create world in_tx')$$);
ROLLBACK;
-- the session stays on its world
SHOW worlds.world;
