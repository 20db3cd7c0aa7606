// write.mjs DBFILE - makes an AgentFS database with agentfs-sdk and prints
// what it put there, in read.mjs's format (without "mtime": the SDK stamps
// the clock, so "time": [first, last] seconds brackets every mtime).
//
// The tree covers what the codec must read back: nested and empty
// directories, parents the SDK creates itself (writeFile makes missing
// ones), an empty file, a binary file with every byte value, one over
// several 4096-byte chunks with a partial last chunk, one of exactly two
// chunks, a non-ASCII name, relative and dangling symlinks; kv values of
// each JSON type; tool calls recorded whole (success and error), started
// then finished, and left pending.
//
// The SDK's Turso engine writes in WAL mode and does not checkpoint on
// close, so the rows would stay in DBFILE-wal. A file handle's fsync() is
// the SDK's checkpoint (wal_checkpoint(TRUNCATE)): after it DBFILE alone
// is the database, which is what a snapshot blob must be.
import { existsSync, statSync } from 'node:fs';
import { AgentFS, SDK_VERSION, emit } from './sdk.mjs';

const DIR = 0o040755;	// the SDK's DEFAULT_DIR_MODE; it has no chmod
const FILE = 0o100644;	// DEFAULT_FILE_MODE
const LINK = 0o120777;

if (process.argv.length !== 3) {
  process.stderr.write('usage: node write.mjs DBFILE\n');
  process.exit(2);
}
const dbfile = process.argv[2];
if (existsSync(dbfile)) {
  process.stderr.write(`write.mjs: ${dbfile} exists; give a new path\n`);
  process.exit(2);
}

const big = Buffer.alloc(10000);
for (let i = 0; i < big.length; i++)
  big[i] = (i * 31 + 7) % 251;
const exact = Buffer.alloc(8192, 0x5a);
const bytes = Buffer.alloc(768);
for (let i = 0; i < bytes.length; i++)
  bytes[i] = i % 256;

const dirs = ['/project', '/project/src', '/project/empty-dir', '/data'];
const contents = {
  '/project/src/main.py': Buffer.from("print('hello')\n"),
  '/project/notes \u00e9.txt': Buffer.from('caf\u00e9 notes\n'),
  '/project/empty.txt': Buffer.alloc(0),
  '/data/bytes.bin': bytes,
  '/data/big.bin': big,
  '/data/exact.bin': exact,
  '/auto/made/deep.txt': Buffer.from('made by writeFile\n'),
};
const implied = ['/auto', '/auto/made'];
const links = {
  '/project/latest': 'src/main.py',
  '/dangling': '/nowhere/at/all',
};
const kv = {
  session: 'abc',
  step: 3,
  ratio: 0.5,
  flag: false,
  nothing: null,
  list: [1, 'two', { three: 3 }],
  config: { nested: { a: [1, 2] }, name: 'caf\u00e9' },
  'unicode \u043a\u043b\u044e\u0447': '\u00e9',
};

const t0 = Math.floor(Date.now() / 1000);
const agent = await AgentFS.open({ path: dbfile });
for (const d of dirs)
  await agent.fs.mkdir(d);
for (const [path, data] of Object.entries(contents))
  await agent.fs.writeFile(path, data);
for (const [path, target] of Object.entries(links))
  await agent.fs.symlink(target, path);
for (const [key, value] of Object.entries(kv))
  await agent.kv.set(key, value);

const calls = [];
const recorded = [
  ['sh', 1700000000, 1700000002, { script: 'ls -la' },
    { status: 'ok', exit_code: 0, stdout: 'x\n' }, undefined],
  ['python', 1700000010, 1700000011, { code: '1/0' }, undefined,
    'ZeroDivisionError: division by zero'],
];
for (const [name, started, completed, params, result, error] of recorded) {
  const id = await agent.tools.record(name, started, completed, params,
    result, error);
  calls.push({
    id, name, parameters: params, result: result ?? null,
    error: error ?? null, status: error ? 'error' : 'success',
    started_at: started, completed_at: completed,
    duration_ms: (completed - started) * 1000,
  });
}
const done = await agent.tools.start('fs.write', { path: '/x', size: 3 });
await agent.tools.success(done, { size: 3 });
const pending = await agent.tools.start('kv.set', { key: 'k' });
for (const id of [done, pending]) {
  const c = await agent.tools.get(id);
  calls.push({
    id: c.id, name: c.name, parameters: c.parameters ?? null,
    result: c.result ?? null, error: c.error ?? null, status: c.status,
    started_at: c.started_at, completed_at: c.completed_at ?? null,
    duration_ms: c.duration_ms ?? null,
  });
}

const handle = await agent.fs.open('/project/src/main.py');
await handle.fsync();
const chunkSize = agent.fs.getChunkSize();
await agent.close();
const t1 = Math.ceil(Date.now() / 1000);

const wal = `${dbfile}-wal`;
if (existsSync(wal) && statSync(wal).size !== 0) {
  process.stderr.write(`write.mjs: ${wal} still holds ` +
    `${statSync(wal).size} bytes after the checkpoint\n`);
  process.exit(1);
}

const files = {};
for (const d of [...dirs, ...implied])
  files[d] = { type: 'dir', mode: DIR, size: 0 };
for (const [path, data] of Object.entries(contents))
  files[path] = { type: 'file', mode: FILE, size: data.length,
    content_b64: data.toString('base64') };
for (const [path, target] of Object.entries(links))
  files[path] = { type: 'symlink', mode: LINK,
    size: Buffer.byteLength(target), target };

emit({ sdk: SDK_VERSION, chunk_size: chunkSize, time: [t0, t1], files, kv,
  calls });
