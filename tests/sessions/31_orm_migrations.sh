#!/usr/bin/env bash
# An ORM's migrations, unchanged, inside a world (issue 42's yardstick): Alembic (SQLAlchemy, psycopg2, from
# PyPI) runs `alembic upgrade head` with the world chosen only by `options=-c worlds.world=...` in its
# database URL. Its three migrations create a table with a serial key and a foreign key to main's
# existing table, add a column and a unique constraint, create an index and a view, and migrate data.
# Main sees nothing until MERGE; after it, `alembic current` on main is at head, `alembic upgrade head`
# on main finds nothing left to do, and the schema is whole (the foreign key to main's table checked and
# made by the merge). Then a plain SQL migration file run by psql in a world, merged the same way; and a
# world's unmerged table stays out of main's pg_dump and \dn.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s31_orm_migrations
OUT=$RUN_DIR/s31_orm_migrations; rm -rf "$OUT"; mkdir -p "$OUT/proj/versions"
CONN=$(conninfo $CL $DB)
VENV=$RUN_DIR/orm-venv
if [ ! -x "$VENV/bin/alembic" ]; then
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q sqlalchemy alembic psycopg2-binary >"$OUT/pip.log" 2>&1 \
    || fail "could not install alembic from PyPI (log: $OUT/pip.log)"
fi
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table accounts (id int primary key, owner text not null);
insert into accounts values (1, 'ann'), (2, 'bob');
SQL
dir=$(cluster_dir $CL)
url() { # url WORLD: the app's URL, the world in its options (url-encoded "-c worlds.world=WORLD")
  echo "postgresql+psycopg2://postgres@/$DB?host=$dir/sock&port=$(cat "$dir/port")&options=-c%20worlds.world%3D$1"
}

cat > "$OUT/proj/env.py" <<'PY'
import os
from alembic import context
from sqlalchemy import create_engine
engine = create_engine(os.environ["APP_DATABASE_URL"])
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=None)
    with context.begin_transaction():
        context.run_migrations()
PY
cp "$VENV"/lib/python3*/site-packages/alembic/templates/generic/script.py.mako "$OUT/proj/" 2>/dev/null || true
cat > "$OUT/alembic.ini" <<INI
[alembic]
script_location = $OUT/proj
INI
cat > "$OUT/proj/versions/a1_customers.py" <<'PY'
from alembic import op
import sqlalchemy as sa
revision = "a1"
down_revision = None
def upgrade():
    op.create_table(
        "customers",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("account_id", sa.Integer, sa.ForeignKey("accounts.id"), nullable=False),
    )
    op.create_index("customers_name", "customers", ["name"])
def downgrade():
    op.drop_table("customers")
PY
cat > "$OUT/proj/versions/a2_email.py" <<'PY'
from alembic import op
import sqlalchemy as sa
revision = "a2"
down_revision = "a1"
def upgrade():
    op.add_column("customers", sa.Column("email", sa.String(200)))
    op.create_unique_constraint("customers_email", "customers", ["email"])
    op.execute("INSERT INTO customers (name, account_id, email) VALUES ('Ann Co', 1, 'ann@example.com'), ('Bob Ltd', 2, 'bob@example.com')")
def downgrade():
    op.drop_column("customers", "email")
PY
cat > "$OUT/proj/versions/a3_view.py" <<'PY'
from alembic import op
import sqlalchemy as sa
revision = "a3"
down_revision = "a2"
def upgrade():
    op.execute("CREATE VIEW customer_accounts AS SELECT c.name, a.owner FROM customers c JOIN accounts a ON a.id = c.account_id")
    op.execute("UPDATE customers SET name = upper(name)")
def downgrade():
    op.execute("DROP VIEW customer_accounts")
PY
alembic() { (cd "$OUT" && APP_DATABASE_URL=$(url "$1") "$VENV/bin/alembic" -c "$OUT/alembic.ini" "${@:2}"); }
q() { psql_in $CL -d $DB -qAt -c "set worlds.world = $1" -c "$2"; }

q main "select worlds.sql('create world migrate')" >/dev/null
alembic migrate upgrade head >"$OUT/upgrade_world.log" 2>&1 || { cat "$OUT/upgrade_world.log"; bad "alembic upgrade head in the world failed"; }
expect "alembic current, in the world" "$(alembic migrate current 2>/dev/null | awk '{print $1}' | tail -1)" "a3"
expect "the world reads its migrated data" "$(q migrate "select string_agg(name || '/' || owner, ',' order by name) from customer_accounts")" "ANN CO/ann,BOB LTD/bob"
expect "main sees no customers table" "$(q main "select to_regclass('customers') is null")" "t"
expect "main sees no alembic_version" "$(q main "select to_regclass('alembic_version') is null")" "t"
expect "alembic current, on main (nothing yet)" "$(alembic main current 2>/dev/null | awk '{print $1}' | tail -1)" ""
expect "DIFF lists the schema first" "$(q main "select string_agg(r->>'change', ',') from (select r from worlds.sql('diff world migrate') r limit 4) x")" "create table,create table,create view,insert"
expect "merge" "$(q main "select worlds.sql('merge world migrate')")" '{"tag": "MERGE 3"}'
expect "alembic current, on main" "$(alembic main current 2>/dev/null | awk '{print $1}' | tail -1)" "a3"
alembic main upgrade head >"$OUT/upgrade_main.log" 2>&1 || bad "alembic upgrade head on main failed"
expect "alembic upgrade head on main: nothing left to run" "$(grep -c 'Running upgrade' "$OUT/upgrade_main.log")" "0"
expect "main's customers" "$(q main "select string_agg(name || '/' || email, ',' order by id) from customers")" "ANN CO/ann@example.com,BOB LTD/bob@example.com"
expect "main's view" "$(q main "select count(*) from customer_accounts")" "2"
expect "the foreign key to main's accounts, made by the merge" "$(q main "select count(*) from pg_constraint where conrelid = 'customers'::regclass and contype = 'f' and confrelid = 'accounts'::regclass")" "1"
expect "the unique constraint and the index" "$(q main "select count(*) from pg_indexes where tablename = 'customers' and indexname in ('customers_email', 'customers_name')")" "2"
expect "the brought tables are tracked" "$(q main "select count(*) from worlds.tables where relid in ('customers'::regclass, 'alembic_version'::regclass)")" "2"
expect "no world namespace left" "$(q main "select count(*) from pg_namespace where nspname like 'pg\_w%'")" "0"

# the next migration changes a table main has now (from the merge above): in a new world it runs on the
# world's copy of the table; the merge runs its statements on main's table, then brings its rows
cat > "$OUT/proj/versions/a4_tier.py" <<'PY'
from alembic import op
import sqlalchemy as sa
revision = "a4"
down_revision = "a3"
def upgrade():
    op.add_column("customers", sa.Column("tier", sa.Text, server_default="basic"))
    op.execute("UPDATE customers SET tier = 'gold' WHERE email LIKE 'ann%'")
    op.alter_column("customers", "tier", nullable=False)
    op.create_index("customers_tier", "customers", ["tier"])
def downgrade():
    op.drop_column("customers", "tier")
PY
q main "select worlds.sql('create world tiers')" >/dev/null
alembic tiers upgrade head >"$OUT/upgrade_tiers.log" 2>&1 || { cat "$OUT/upgrade_tiers.log"; bad "alembic upgrade head (a4) in the world failed"; }
expect "alembic current, in the world: a4" "$(alembic tiers current 2>/dev/null | awk '{print $1}' | tail -1)" "a4"
expect "the world's customers have tiers" "$(q tiers "select string_agg(name || '/' || tier, ',' order by id) from customers")" "ANN CO/gold,BOB LTD/basic"
expect "main's customers: no tier yet" "$(q main "select count(*) from pg_attribute where attrelid = 'customers'::regclass and attname = 'tier'")" "0"
expect "main: alembic at a3" "$(alembic main current 2>/dev/null | awk '{print $1}' | tail -1)" "a3"
expect "DIFF: the table's change first" "$(q main "select r->>'change' || ' ' || (r->'columns')::text from worlds.sql('diff world tiers') r limit 1")" 'alter table ["+tier text", "+index customers_tier"]'
q main "insert into customers (name, account_id, email) values ('MAIN CO', 2, 'main@example.com')" >/dev/null
# (alembic_version's key changed: one row deleted, one inserted; one customer row)
expect "merge of a4" "$(q main "select worlds.sql('merge world tiers')")" '{"tag": "MERGE 3"}'
expect "main: alembic at a4" "$(alembic main current 2>/dev/null | awk '{print $1}' | tail -1)" "a4"
alembic main upgrade head >"$OUT/upgrade_main4.log" 2>&1 || bad "alembic upgrade head on main (a4) failed"
expect "alembic upgrade head on main after a4: nothing left" "$(grep -c 'Running upgrade' "$OUT/upgrade_main4.log")" "0"
expect "main's customers: tiers, main's own row the default" "$(q main "select string_agg(name || '/' || tier, ',' order by id) from customers")" "ANN CO/gold,BOB LTD/basic,MAIN CO/basic"
expect "main: tier NOT NULL and indexed" "$(q main "select attnotnull from pg_attribute where attrelid = 'customers'::regclass and attname = 'tier'")/$(q main "select count(*) from pg_indexes where indexname = 'customers_tier'")" "t/1"
q main "delete from customers where name = 'MAIN CO'" >/dev/null

# a plain SQL migration file, run by psql in a world, then merged
cat > "$OUT/002_invoices.sql" <<'SQL'
BEGIN;
CREATE TYPE invoice_state AS ENUM ('draft', 'sent', 'paid');
CREATE TABLE invoices (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer_id int NOT NULL REFERENCES customers (id) ON DELETE CASCADE,
    state invoice_state NOT NULL DEFAULT 'draft',
    total numeric(12, 2) NOT NULL CHECK (total >= 0)
);
CREATE INDEX invoices_customer ON invoices (customer_id);
CREATE FUNCTION invoice_total(c int) RETURNS numeric LANGUAGE sql STABLE AS $$ SELECT coalesce(sum(total), 0) FROM invoices WHERE customer_id = c $$;
INSERT INTO invoices (customer_id, total) SELECT id, 10 * id FROM customers;
UPDATE accounts SET owner = owner || ' (billed)' WHERE id = 1;
COMMIT;
SQL
q main "select worlds.sql('create world billing')" >/dev/null
PGOPTIONS='-c worlds.world=billing' $PGBIN/psql "$CONN" -X -q -v ON_ERROR_STOP=1 -f "$OUT/002_invoices.sql" >"$OUT/sql_migration.log" 2>&1 \
  || { cat "$OUT/sql_migration.log"; bad "the SQL migration file failed in the world"; }
expect "the world: invoice_total(1)" "$(q billing "select invoice_total(1)")" "10.00"
expect "main: no invoices yet" "$(q main "select to_regclass('invoices') is null")" "t"
expect "merge of the SQL migration" "$(q main "select worlds.sql('merge world billing')")" '{"tag": "MERGE 3"}'
expect "main: invoice_total(2)" "$(q main "select invoice_total(2)")" "20.00"
expect "main: accounts row the migration changed" "$(q main "select owner from accounts where id = 1")" "ann (billed)"
expect "main: the identity continues" "$(q main "insert into invoices (customer_id, total) values (1, 5) returning id")" "3"

# a world's own objects stay out of main's pg_dump and psql's \dn (their namespaces' pg_ prefix)
q main "select worlds.sql('create world unmerged')" >/dev/null
q unmerged "create table kept_in_world (x int)" >/dev/null
q unmerged "insert into kept_in_world values (1)" >/dev/null
expect "pg_dump of main: no world object" "$($PGBIN/pg_dump "$CONN" 2>&1 | grep -c 'kept_in_world\|pg_w[0-9]')" "0"
expect "\\dn: no world namespace" "$($PGBIN/psql "$CONN" -X -qAt -c '\dn' | grep -c 'pg_w')" "0"
q main "select worlds.sql('drop world unmerged')" >/dev/null

if [ $failures -ne 0 ]; then echo "31_orm_migrations: $failures check(s) failed (logs in $OUT)" >&2; exit 1; fi
psql_in $CL -q -c "drop database $DB"
echo "ok: 31_orm_migrations"
