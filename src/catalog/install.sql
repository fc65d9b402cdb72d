-- Runs last in CREATE EXTENSION: refuse a server that did not preload the library, track every user
-- table that exists now, and keep tracking tables created later.
SELECT worlds._require_preloaded();

SELECT worlds.track(c.oid::regclass)
FROM pg_class c
WHERE c.relkind = 'r' AND worlds._trackable(c.oid::regclass)
ORDER BY c.oid;

CREATE EVENT TRIGGER worlds_ddl ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO', 'ALTER TABLE')
    EXECUTE FUNCTION worlds._on_ddl();
CREATE EVENT TRIGGER worlds_drop ON sql_drop
    WHEN TAG IN ('DROP TABLE', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION worlds._on_drop();
