-- worlds.sql(text): statements as the spec writes them; malformed ones get 42601 with the position.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE d text;
BEGIN EXECUTE q; RETURN 'ok';
EXCEPTION WHEN OTHERS THEN GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL; RETURN sqlstate || ': ' || sqlerrm || coalesce(' (' || d || ')', ''); END $$;
-- case-insensitive keywords, quoted names, strings, dollar quotes, an optional trailing semicolon
SELECT * FROM worlds.sql('CrEaTe WoRlD Mixed');
SELECT * FROM worlds.sql('create world "Quoted Name";');
SELECT * FROM worlds.sql($$create world $q$dollar$q$ $$);
SELECT count(*) FROM worlds.sql('  show   worlds  ;  ');
SELECT name FROM worlds.show_worlds() ORDER BY name;
SELECT try($$select * from worlds.sql('create wrld x')$$);
SELECT try($$select * from worlds.sql('create world')$$);
SELECT try($$select * from worlds.sql('')$$);
SELECT try($$select * from worlds.sql('merge world x using ours using theirs')$$);
SELECT try($$select * from worlds.sql('drop world x extra')$$);
SELECT try($$select * from worlds.sql('create world ''unterminated')$$);
-- statements outside the grammar: 42601
SELECT try($$select * from worlds.sql('show storagex')$$);
SELECT try($$select * from worlds.sql('show history limit')$$);
