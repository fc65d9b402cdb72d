-- Ordinary statements on main. 02_ordinary_statements.sh runs this file on a cluster without pg_worlds
-- and in a database with the extension created; the two outputs must be byte-identical.
-- Everything printed is deterministic: ORDER BY everywhere, no OIDs, times or random values.

-- schema: PK, FK, defaults, serial, identity, CHECK, UNIQUE, a composite key, a table without a key
create table customers (
  id serial primary key,
  name text not null unique,
  tier text not null default 'basic' check (tier in ('basic', 'gold')),
  created_on date not null default date '2024-01-01'
);
create table products (
  sku text primary key,
  price numeric(10, 2) not null check (price >= 0),
  stock int not null default 0
);
create table orders (
  id bigint generated always as identity primary key,
  customer_id int not null references customers (id) on delete cascade,
  status text not null default 'new',
  note text
);
create table order_items (
  order_id bigint references orders (id) on delete cascade,
  sku text references products (sku),
  qty int not null check (qty > 0),
  primary key (order_id, sku)
);
create table audit_log (at_seq bigserial, what text, detail jsonb);   -- no primary key
create schema app;
create table app.settings (k text primary key, v text);
create table categories (id int primary key, parent int references categories (id), name text);
-- column names a generated storage might also use for itself
create table readings (src text, seq int, op text, world text, del boolean default false, val numeric,
  primary key (src, seq));

-- INSERT ... RETURNING, multi-row, defaults
insert into customers (name) values ('ada'), ('bob'), ('cy') returning id, name, tier, created_on;
insert into customers (name, tier) values ('dee', 'gold') returning *;
insert into products values ('apple', 1.25, 100), ('pear', 2.00, 50), ('fig', 3.10, 0), ('kiwi', 0.75, 10)
  returning sku, price;
insert into orders (customer_id) values (1), (1), (2), (4) returning id, customer_id, status;
insert into orders (customer_id, status, note) values (3, 'paid', 'by phone') returning *;
insert into order_items values (1, 'apple', 3), (1, 'pear', 1), (2, 'fig', 2), (3, 'apple', 10),
  (4, 'kiwi', 4), (4, 'pear', 2), (5, 'apple', 1) returning *;
insert into app.settings values ('currency', 'EUR'), ('vat', '0.2');
insert into readings (src, seq, op, world, val) values ('s1', 1, 'add', 'earth', 1.5), ('s1', 2, 'sub', 'mars', 2.5),
  ('s2', 1, 'add', 'earth', 7) returning *;
update readings set val = val * 2, op = op || '!' where src = 's1' returning src, seq, op, val;
delete from readings where world = 'mars' returning src, seq;
select * from readings order by src, seq;
insert into categories values (1, null, 'food'), (2, 1, 'fruit'), (3, 2, 'pome'), (4, 2, 'citrus'),
  (5, 1, 'drinks'), (6, 3, 'apples');

-- UPDATE / DELETE, with FROM / USING and RETURNING
update products set price = price * 1.10 where sku in ('apple', 'pear') returning sku, price;
update orders o set status = 'paid' from customers c
  where c.id = o.customer_id and c.tier = 'gold' returning o.id, o.status, c.name;
update customers set tier = 'gold' where name = 'bob';
delete from order_items oi using products p where p.sku = oi.sku and p.stock = 0 returning oi.*;
delete from products where stock = 0 returning sku;
select id, name, tier from customers order by id;
select * from products order by sku;

-- INSERT ... ON CONFLICT, in main
insert into products values ('apple', 9.99, 1) on conflict (sku) do update set stock = products.stock + excluded.stock
  returning sku, price, stock;
insert into products values ('pear', 9.99, 1) on conflict do nothing returning sku;
insert into app.settings values ('vat', '0.21') on conflict (k) do update set v = excluded.v;
select * from app.settings order by k;

-- SQL MERGE (PG15)
create table stock_moves (sku text primary key, delta int);
insert into products values ('date', 4.00, 2);
insert into stock_moves values ('apple', -5), ('plum', 20), ('kiwi', -3), ('date', -2);
merge into products p using stock_moves m on p.sku = m.sku
  when matched and p.stock + m.delta <= 0 then delete
  when matched then update set stock = p.stock + m.delta
  when not matched then insert (sku, price, stock) values (m.sku, 1.50, m.delta);
select * from products order by sku;

-- joins
select c.name, o.id, o.status from customers c join orders o on o.customer_id = c.id order by c.name, o.id;
select c.name, count(o.id) as orders from customers c left join orders o on o.customer_id = c.id
  group by c.name order by c.name;
select p.sku, oi.order_id from products p full join order_items oi on oi.sku = p.sku
  order by p.sku nulls last, oi.order_id nulls last;
select o.id, sum(oi.qty * p.price) as total
  from orders o join order_items oi on oi.order_id = o.id join products p on p.sku = oi.sku
  group by o.id order by o.id;
select c.name from customers c where exists (select 1 from orders o where o.customer_id = c.id and o.status = 'paid')
  order by c.name;
select sku from products where sku not in (select sku from order_items) order by sku;
select c.name, last_o.id from customers c
  cross join lateral (select o.id from orders o where o.customer_id = c.id order by o.id desc limit 1) last_o
  order by c.name;

-- CTEs: plain, recursive, data-modifying
with big as (select order_id, sum(qty) as n from order_items group by order_id)
select order_id, n from big where n >= 3 order by order_id;
with recursive tree as (
  select id, name, 1 as depth, name::text as path from categories where parent is null
  union all
  select c.id, c.name, t.depth + 1, t.path || '/' || c.name from categories c join tree t on c.parent = t.id
)
select id, depth, path from tree order by path;
with moved as (
  update products set stock = stock - 1 where sku = 'apple' returning sku, stock
), logged as (
  insert into audit_log (what, detail) select 'stock', jsonb_build_object('sku', sku, 'stock', stock) from moved
  returning at_seq, what
)
select * from logged order by at_seq;

-- window functions
select id, customer_id, row_number() over (partition by customer_id order by id) as rn,
       count(*) over (partition by customer_id) as n_for_customer,
       lag(id) over (order by id) as prev
  from orders order by id;
select sku, price, rank() over (order by price desc) as r,
       sum(price) over (order by sku rows between unbounded preceding and current row) as running
  from products order by sku;

-- aggregates
select count(*), sum(qty), min(qty), max(qty), round(avg(qty), 3) from order_items;
select status, count(*) filter (where note is null) as without_note, string_agg(id::text, ',' order by id)
  from orders group by status having count(*) >= 1 order by status;
select tier, name is not null as named, count(*) from customers group by grouping sets ((tier), ()) , name is not null
  order by tier nulls last;
select array_agg(sku order by sku), jsonb_object_agg(sku, stock order by sku) from products;

-- PREPARE / EXECUTE / DEALLOCATE
prepare orders_of(int) as select id, status from orders where customer_id = $1 order by id;
execute orders_of(1);
prepare add_product(text, numeric) as insert into products (sku, price) values ($1, $2) returning sku, price, stock;
execute add_product('lime', 0.40);
execute orders_of(4);
update orders set status = 'shipped' where customer_id = 1;
execute orders_of(1);
deallocate orders_of;
deallocate all;

-- plpgsql: a function that reads and writes tables
create function place_order(cust int, item text, n int) returns bigint language plpgsql as $$
declare
  oid_ bigint;
  left_ int;
begin
  select stock into left_ from products where sku = item for update;
  if left_ is null then
    raise exception 'no such product %', item;
  end if;
  if left_ < n then
    raise notice 'only % of % left', left_, item;
    return null;
  end if;
  insert into orders (customer_id) values (cust) returning id into oid_;
  insert into order_items values (oid_, item, n);
  update products set stock = stock - n where sku = item;
  insert into audit_log (what, detail) values ('order', jsonb_build_object('order', oid_, 'sku', item, 'n', n));
  return oid_;
end $$;
select place_order(2, 'pear', 5);
select place_order(3, 'kiwi', 1000);
select place_order(1, 'apple', 2);
select o.id, o.customer_id, oi.sku, oi.qty from orders o join order_items oi on oi.order_id = o.id
  where o.id > 5 order by o.id;
select sku, stock from products order by sku;

-- a user trigger
create function touch_note() returns trigger language plpgsql as $$
begin
  new.note := coalesce(new.note, '') || '[' || tg_op || ']';
  return new;
end $$;
create trigger orders_touch before insert or update on orders for each row execute function touch_note();
insert into orders (customer_id) values (2) returning id, note;
update orders set status = 'paid' where id = 3 returning id, status, note;
drop trigger orders_touch on orders;

-- views
create view order_totals as
  select o.id, c.name, sum(oi.qty * p.price) as total
    from orders o join customers c on c.id = o.customer_id
    join order_items oi on oi.order_id = o.id join products p on p.sku = oi.sku
   group by o.id, c.name;
select * from order_totals order by id;
create materialized view per_customer as select name, count(*) as n, sum(total) as total from order_totals group by name;
select * from per_customer order by name;
insert into order_items values (2, 'apple', 1);
refresh materialized view per_customer;
select * from per_customer order by name;

-- transactions, savepoints, cursors, FOR UPDATE
begin;
update products set stock = 0 where sku = 'lime';
savepoint s1;
delete from products where sku = 'lime';
rollback to savepoint s1;
select sku, stock from products where sku = 'lime';
commit;
begin;
delete from audit_log;
rollback;
select count(*) from audit_log;
begin;
declare c cursor for select sku, price from products order by sku;
fetch 2 from c;
fetch next from c;
close c;
select id from orders where customer_id = 1 order by id for update;
commit;

-- COPY, in main
copy products (sku, price, stock) from stdin;
mango	2.50	7
plum2	1.00	3
\.
copy (select sku, price, stock from products order by sku) to stdout;
copy app.settings to stdout;

-- schema changes in main
alter table products add column origin text default 'local';
alter table customers drop column created_on;
alter table customers add column email text;
update customers set email = name || '@example.com' where id <= 2;
select * from customers order by id;
select sku, origin from products order by sku;
create index on orders (status);
select status, count(*) from orders group by status order by status;

-- CREATE TABLE AS, SELECT INTO, a temp table, a partitioned table
create table order_summary as select customer_id, count(*) as n from orders group by customer_id;
select * from order_summary order by customer_id;
select sku, price into cheap from products where price < 1.5;
select * from cheap order by sku;
create temp table scratch (id int primary key, v text);
insert into scratch values (1, 'a'), (2, 'b');
update scratch set v = v || v;
select * from scratch order by id;
create table events (id int, at date, what text, primary key (id, at)) partition by range (at);
create table events_2024 partition of events for values from ('2024-01-01') to ('2025-01-01');
create table events_2025 partition of events for values from ('2025-01-01') to ('2026-01-01');
insert into events values (1, '2024-03-01', 'a'), (2, '2025-03-01', 'b'), (3, '2024-12-31', 'c');
update events set what = what || '!' where id = 3;
delete from events where id = 2;
select tableoid::regclass as part, * from events order by id;

-- sequences
select currval('customers_id_seq'), nextval('customers_id_seq');
insert into customers (name) values ('eve') returning id, name;
select setval('customers_id_seq', 100);
insert into customers (name) values ('fay') returning id, name;

-- errors that main must report exactly as stock Postgres does
\set ON_ERROR_STOP 0
insert into customers (name) values ('ada');
insert into orders (customer_id) values (999);
update products set price = -1 where sku = 'apple';
insert into orders (id, customer_id) values (1, 1);
delete from products where sku = 'apple';
select 1 / 0;
\set ON_ERROR_STOP 1
do $$
begin
  insert into customers (name) values ('ada');
exception when unique_violation then
  raise notice 'caught %', sqlstate;
end $$;

-- TRUNCATE and DROP
truncate order_items;
select count(*) from order_items;
truncate audit_log restart identity;
insert into audit_log (what) values ('after truncate') returning at_seq, what;
drop view order_totals cascade;
drop table stock_moves;
drop table events;
delete from customers where name = 'cy' returning id, name;
select id, customer_id from orders order by id;
