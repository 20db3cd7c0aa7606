// read.mjs DBFILE - prints what agentfs-sdk sees in an AgentFS database.
//
// Output, one JSON object on stdout:
//   {"sdk": "0.6.4", "chunk_size": 4096,
//    "files": {"/path": {"type": "dir"|"file"|"symlink"|"other:NNN",
//              "mode": full st_mode, "size", "mtime" (s),
//              "content_b64" (files) | "target" (symlinks)}},
//    "kv": {"key": parsed JSON value},
//    "calls": [{"id", "name", "parameters", "result", "error", "status",
//               "started_at", "completed_at", "duration_ms"}]}  (id order)
// Absent tool-call fields are null. Only the SDK's public API is used (no
// SQL), so this is what a program built on agentfs-sdk would get.
//
// The SDK opens the file read-write: it adds its indexes and
// schema_version if missing, readFile() updates atime, and the Turso engine
// leaves DBFILE-wal beside it. Give it a copy.
import { AgentFS, SDK_VERSION, emit, typeName } from './sdk.mjs';

if (process.argv.length !== 3) {
  process.stderr.write('usage: node read.mjs DBFILE\n');
  process.exit(2);
}

const agent = await AgentFS.open({ path: process.argv[2] });
const files = {};

// Depth first; readdirPlus returns names in order with each entry's stats.
async function walk(dir) {
  for (const { name, stats } of await agent.fs.readdirPlus(dir)) {
    const path = dir === '/' ? `/${name}` : `${dir}/${name}`;
    const ent = {
      type: typeName(stats),
      mode: stats.mode,
      size: stats.size,
      mtime: stats.mtime,
    };
    files[path] = ent;
    if (stats.isDirectory()) {
      await walk(path);
    } else if (stats.isSymbolicLink()) {
      ent.target = await agent.fs.readlink(path);
    } else if (stats.isFile()) {
      ent.content_b64 = (await agent.fs.readFile(path)).toString('base64');
    }
  }
}
await walk('/');

const kv = {};
for (const { key, value } of await agent.kv.list(''))
  kv[key] = value;

// getRecent() is the SDK's only "all calls" query (started_at > since,
// newest first); sort back into id order.
const calls = (await agent.tools.getRecent(Number.MIN_SAFE_INTEGER))
  .sort((a, b) => a.id - b.id)
  .map((c) => ({
    id: c.id,
    name: c.name,
    parameters: c.parameters ?? null,
    result: c.result ?? null,
    error: c.error ?? null,
    status: c.status,
    started_at: c.started_at,
    completed_at: c.completed_at ?? null,
    duration_ms: c.duration_ms ?? null,
  }));

const chunkSize = agent.fs.getChunkSize();
await agent.close();
emit({ sdk: SDK_VERSION, chunk_size: chunkSize, files, kv, calls });
