// node-postgres (npm `pg`) against pg_worlds, through worlds-proxy or straight to Postgres: node's own test
// runner (node --test), run by tests/drivers/run.sh with the same environment as test_psycopg.py
// (DRIVERS_VIA proxy|direct, DRIVERS_HOST, DRIVERS_PORT, DRIVERS_DB, DRIVERS_USER). Tests run in order and
// use their own world, node_7.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import path from 'node:path'

// pg lives in the drivers' cache (NODE_PATH), not next to this file
const require = createRequire(path.join(process.env.NODE_PATH || '.', 'noop.js'))
const pg = require('pg')

const VIA = process.env.DRIVERS_VIA || 'direct'
const PROXY = VIA === 'proxy'
const HOST = process.env.DRIVERS_HOST || '127.0.0.1'
const PORT = Number(process.env.DRIVERS_PORT)
const DB = process.env.DRIVERS_DB
const USER = process.env.DRIVERS_USER || 'postgres'

// type OIDs of the spec's columns
const T = { text: 25, int4: 23, int8: 20, timestamptz: 1184, jsonb: 3802, bool: 16 }
const SHOW_WORLDS = [['name', T.text], ['id', T.text], ['parent', T.text], ['depth', T.int4], ['created', T.timestamptz],
  ['version', T.int8], ['meta', T.jsonb], ['owner', T.text], ['expires', T.timestamptz], ['active', T.timestamptz],
  ['pinned', T.bool], ['scope', T.jsonb]]
const DIFF = [['table', T.text], ['id', T.text], ['change', T.text], ['before', T.jsonb], ['after', T.jsonb], ['columns', T.jsonb]]

// config(world): a session in that world (undefined: main, by the database's own name)
function config (world) {
  if (PROXY) return { host: HOST, port: PORT, user: USER, database: world || DB }
  const c = { host: HOST, port: PORT, user: USER, database: DB }
  if (world && world !== 'main') c.options = `-c worlds.world=${world}`
  return c
}

async function connect (world) {
  const c = new pg.Client(config(world))
  await c.connect()
  return c
}

async function withClients (worlds, fn) {
  const clients = []
  try {
    for (const w of worlds) clients.push(await connect(w))
    return await fn(...clients)
  } finally {
    for (const c of clients) await c.end().catch(() => {})
  }
}

// spec(client, statement, name): one statement of the spec, verbatim through the proxy (with a name:
// a prepared statement, Parse/Bind/Execute), through worlds.sql() straight to Postgres. Returns
// { fields: [[name, type oid]], rows, command, rowCount }.
async function spec (client, statement, name) {
  if (PROXY) {
    const r = await client.query(name ? { name, text: statement } : statement)
    return { fields: r.fields.map(f => [f.name, f.dataTypeID]), rows: r.rows, command: r.command, rowCount: r.rowCount }
  }
  const r = await client.query(name ? { name, text: 'select * from worlds.sql($1) j', values: [statement] }
    : { text: 'select * from worlds.sql($1) j', values: [statement] })
  const rows = r.rows.map(x => x.j)
  if (rows.length === 1 && Object.keys(rows[0]).join() === 'tag') {
    const [command, n] = rows[0].tag.split(/ (?=\d+$)/)
    return { fields: [], rows: [], command: command.split(' ')[0], rowCount: n === undefined ? null : Number(n) }
  }
  return { fields: Object.keys(rows[0] || {}).map(k => [k, null]), rows, command: r.command, rowCount: rows.length }
}

function checkFields (res, expected, what) {
  if (PROXY) assert.deepEqual(res.fields, expected, what)
  else if (res.rows.length) assert.deepEqual(res.fields.map(f => f[0]).sort(), expected.map(f => f[0]).sort(), what)
}

async function expectError (code, promise) {
  try {
    await promise
  } catch (e) {
    assert.equal(e.code, code, `expected ${code}, got ${e.code}: ${e.message}`)
    assert.ok(e.message)
    return e
  }
  assert.fail(`expected an error ${code}, none came`)
}

async function one (client, text, values) {
  const r = await client.query({ text, values, rowMode: 'array' })
  return r.rows[0][0]
}

const t = test

t('create world and show worlds: the spec\'s columns and types', () => withClients([undefined], async (c) => {
  const r = await spec(c, "create world node_7 with (task = 'node');")
  assert.equal(r.command, 'CREATE') // tag CREATE WORLD
  const s = await spec(c, 'show worlds')
  checkFields(s, SHOW_WORLDS, 'show worlds')
  const w = s.rows.find(x => x.name === 'node_7')
  assert.ok(w, 'node_7 not in show worlds')
  assert.equal(w.parent, 'main')
  assert.equal(w.depth, 1)
  assert.deepEqual(w.meta, { task: 'node' })
  if (PROXY) {
    assert.ok(w.created instanceof Date, `created is ${typeof w.created}`)
    assert.equal(w.pinned, false)
    assert.equal(s.command, 'SHOW')
  }
}))

t('the database name chooses the world', () => withClients(['node_7', undefined], async (w, m) => {
  assert.equal(await one(w, 'show worlds.world'), 'node_7')
  const u = await w.query('update orders set status = $1 where id = $2', ['node', 8])
  assert.equal(u.rowCount, 1)
  assert.equal(await one(w, 'select status from orders where id = $1', [8]), 'node')
  assert.equal(await one(m, 'select status from orders where id = $1', [8]), 'new')
}))

t('diff: simple protocol and a named prepared statement', () => withClients(['node_7'], async (w) => {
  for (const name of [undefined, 'diff_stmt', 'diff_stmt']) {
    const d = await spec(w, 'diff', name)
    checkFields(d, DIFF, `diff (${name || 'simple'})`)
    assert.equal(d.rows.length, 1)
    const r = d.rows[0]
    assert.deepEqual([r.table, r.id, r.change], ['orders', '8', 'update'])
    assert.equal(r.before.status, 'new')
    assert.equal(r.after.status, 'node')
    assert.deepEqual(r.columns, ['status'])
  }
}))

t('ordinary SQL in the world: prepared statements and binary results', () => withClients(['node_7'], async (w) => {
  for (let i = 0; i < 3; i++) {
    const r = await w.query({ name: 'by_id', text: 'select id, status, amount, placed, doc from orders where id = $1', values: [8] })
    assert.deepEqual([r.rows[0].id, r.rows[0].status, r.rows[0].amount, r.rows[0].doc], [8, 'node', '8.00', { n: 8 }])
    assert.equal(r.rows[0].placed.toISOString(), '2026-01-02T03:04:05.000Z')
  }
  const stmts = await w.query('select statement from pg_prepared_statements')
  assert.ok(stmts.rows.some(r => r.statement.includes('where id = $1')), JSON.stringify(stmts.rows))
  // (types whose binary form pg-types reads right: its timestamptz and large int8 are misread, straight to
  // Postgres too)
  const b = await w.query({ text: 'select id, status, amount, status = $2 as is_node from orders where id = $1', values: [8, 'node'], binary: true })
  assert.deepEqual(b.rows[0], { id: 8, status: 'node', amount: 8, is_node: true })
}))

t('errors keep their SQLSTATE and the session goes on', () => withClients([undefined], async (c) => {
  const e = await expectError('42710', spec(c, 'create world node_7'))
  assert.match(e.message, /node_7/)
  await expectError('3D000', spec(c, 'drop world no_such_world'))
  await expectError('42601', spec(c, 'merge world task-1'))
  await expectError('22012', c.query('select 1 / 0'))
  assert.equal(await one(c, 'select 1'), 1)
}))

t('a world that does not exist', async () => {
  if (PROXY) {
    const c = new pg.Client(config('no_such_world'))
    await expectError('3D000', c.connect())
    await c.end().catch(() => {})
  } else {
    await withClients(['no_such_world'], async (c) => { await expectError('3D000', c.query('select count(*) from orders')) })
  }
})

t('LISTEN/NOTIFY', () => withClients(['node_7', undefined], async (l, s) => {
  await l.query('listen node_channel')
  const got = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no notification in 10 s')), 10000)
    l.on('notification', (n) => { clearTimeout(timer); resolve(n) })
  })
  await s.query("select pg_notify('node_channel', 'hello from main')")
  const n = await got
  assert.equal(n.channel, 'node_channel')
  assert.equal(n.payload, 'hello from main')
}))

// runs pg_sleep(60) on client, cancels it with how(client, query) after 1 s; expects 57014 well before 60 s
async function sleepAndCancel (client, how) {
  const q = new pg.Query('select pg_sleep(60)')
  const done = new Promise((resolve) => {
    q.on('error', (e) => resolve(e))
    q.on('end', () => resolve(null))
  })
  client.query(q)
  const t0 = Date.now()
  await new Promise(resolve => setTimeout(resolve, 1000))
  await how(q)
  const err = await done
  const took = (Date.now() - t0) / 1000
  assert.ok(err, 'pg_sleep(60) ended without an error')
  assert.equal(err.code, '57014', err.message)
  assert.ok(took < 15, `pg_sleep(60) ran ${took} s`)
}

t('cancel a pg_sleep: a CancelRequest on a second connection, and pg_cancel_backend', () => withClients(['node_7', undefined], async (w, watcher) => {
  const pid = await one(w, 'select pg_backend_pid()')
  // pg's own cancel: a new connection sending the session's BackendKeyData (through the proxy, mapped to the right backend)
  await sleepAndCancel(w, async (q) => { new pg.Client(config('node_7')).cancel(w, q) })
  assert.equal(await one(watcher, 'select state from pg_stat_activity where pid = $1', [pid]), 'idle')
  // the server's function, from a second session
  await sleepAndCancel(w, async () => { assert.equal(await one(watcher, 'select pg_cancel_backend($1)', [pid]), true) })
  assert.equal(await one(w, 'select status from orders where id = 8'), 'node')
}))

t('merge world', () => withClients([undefined], async (m) => {
  const r = await spec(m, 'merge world node_7;')
  assert.equal(r.command, 'MERGE')
  assert.equal(r.rowCount, 1)
  assert.equal(await one(m, 'select status from orders where id = 8'), 'node')
}))
