-- ALTER WORLD: SET keys (null removes one), SET/RESET TTL, SET/RESET PINNED; returns the world's row.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
SELECT * FROM worlds.sql('create world agent_7 with (task = 42, owner_note = ''x'')');
SELECT j ->> 'name' AS name, j -> 'meta' AS meta FROM worlds.sql('alter world agent_7 set (task = null, reviewer = ''ada'')') j;
SELECT j ->> 'name' AS name, (j ->> 'expires')::timestamptz BETWEEN now() + interval '23 hours' AND now() + interval '25 hours' AS in_a_day
FROM worlds.sql('alter world agent_7 set ttl ''1 day''') j;
SELECT j ->> 'expires' AS expires FROM worlds.sql('alter world agent_7 reset ttl') j;
SELECT j ->> 'pinned' AS pinned FROM worlds.sql('alter world agent_7 set pinned') j;
SELECT j ->> 'pinned' AS pinned FROM worlds.sql('alter world agent_7 reset pinned') j;
SELECT name, meta FROM worlds.alter_world('agent_7', set_meta => '{"stage": 2}');
-- main: TTL and pin forms fail with 22023; SET TTL with = is a syntax error
SELECT try($$select * from worlds.sql('alter world main set pinned')$$);
SELECT try($$select * from worlds.sql('alter world main set ttl ''1 hour''')$$);
SELECT try($$select * from worlds.sql('alter world agent_7 set ttl = ''1 hour''')$$);
SELECT try($$select * from worlds.sql('alter world nope set pinned')$$);
SELECT try($$select * from worlds.sql('alter world agent_7 set (_worlds_x = 1)')$$);
-- an expired TTL discards the world (unless it has forks)
SELECT * FROM worlds.sql('create world short_lived');
SELECT * FROM worlds.sql('create world has_forks');
SELECT * FROM worlds.sql('fork world has_forks as child');
SELECT count(*) FROM worlds.alter_world('short_lived', ttl => '1 millisecond');
SELECT count(*) FROM worlds.alter_world('has_forks', ttl => '1 millisecond');
SELECT pg_sleep(0.01);
SELECT name FROM worlds.show_worlds() ORDER BY name;
-- a world past its TTL can't be switched to, altered or merged: it is discarded first
SELECT * FROM worlds.sql('create world ttl_sw');
SELECT * FROM worlds.sql('create world ttl_alt');
SELECT * FROM worlds.sql('create world ttl_mg');
SELECT count(*) FROM worlds.alter_world('ttl_sw', ttl => '500 milliseconds');
SELECT count(*) FROM worlds.alter_world('ttl_alt', ttl => '500 milliseconds');
SELECT count(*) FROM worlds.alter_world('ttl_mg', ttl => '500 milliseconds');
SELECT pg_sleep(0.6);
SELECT try($$select * from worlds.sql('switch world ttl_sw')$$);
SELECT try($$select * from worlds.sql('alter world ttl_alt set ttl ''1 day''')$$);
SELECT try($$select * from worlds.sql('merge world ttl_mg')$$);
-- a TTL that has already passed is refused (22023), nothing changed
SELECT try($$select * from worlds.sql('alter world agent_7 set ttl ''-1 second''')$$);
SELECT try($$select * from worlds.sql('alter world agent_7 set ttl ''0''')$$);
SELECT name FROM worlds.show_worlds() WHERE name = 'agent_7';
