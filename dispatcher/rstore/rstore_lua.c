/*
 * rstore_lua.c - the Lua scripts of the Redis snapshot store: commit (and
 * create), fork and delete. Each write of a head is one script, so its
 * checks, its writes, retention and the collection of what it stops
 * naming happen at once for every other client of Redis.
 *
 * DESIGN
 * Reference counts, both in hashes of the tenant:
 *   P:{T}:refs   manifest key -> history rows naming it (the head's row is
 *                always in the history, so these are all its names);
 *   P:{T}:crefs  chunk key -> entries of named manifests listing it (a
 *                chunk listed twice by one manifest counts twice).
 * A blob's first name takes a reference on each chunk it lists and makes
 * the blob and its newly referenced chunks permanent (PERSIST: they were
 * uploaded with an expiry); its last name going deletes it and drops a
 * reference on each chunk, deleting those left with none. Lua reads the
 * chunk list from the manifest's bytes (string.byte; a 256-entry table of
 * "%02x" for hex): it cannot check the manifest's hash (Redis's Lua has
 * SHA-1 only), which is rstore_pull()'s job on the way out.
 *
 * Every script checks before it writes and returns {status, number,
 * detail}: a script that stopped half-way through would not be undone.
 * Times are Redis's clock (TIME), one clock for every host. The blob and
 * chunk keys a script reaches beyond KEYS are built from ARGV[1],
 * "P:{T}:", so they are in the slot of KEYS (Redis Cluster serves keys
 * of the local slot that a script did not declare); the scripts check
 * that KEYS were built from the same ARGV.
 */
#include "rstore.h"
#include "rstore_int.h"

/*
 * What every script shares: hex, the manifest's chunk list, the names of
 * blobs, history rows and the clock.
 */
#define LUA_LIB \
	"local HEX = {}\n" \
	"for i = 0, 255 do HEX[i] = string.format('%02x', i) end\n" \
	/* The 64 hex digits of the 32 bytes of s at position at. */ \
	"local function hex_at(s, at)\n" \
	"  local t = {}\n" \
	"  for k = 0, 31 do t[k + 1] = HEX[string.byte(s, at + k)] end\n" \
	"  return table.concat(t)\n" \
	"end\n" \
	/*
	 * The chunk keys manifest m lists, or nil when m is not a manifest:
	 * "sandq-snapshot-1" NUL, u64 LE size, u32 LE chunk size, hashes.
	 */ \
	"local function chunks_of(m)\n" \
	"  if type(m) ~= 'string' or #m < 29 or (#m - 29) % 32 ~= 0 or\n" \
	"      string.sub(m, 1, 17) ~= 'sandq-snapshot-1\\0' then\n" \
	"    return nil\n" \
	"  end\n" \
	"  local size, cs = 0, 0\n" \
	"  for k = 25, 18, -1 do size = size * 256 + string.byte(m, k) end\n" \
	"  for k = 29, 26, -1 do cs = cs * 256 + string.byte(m, k) end\n" \
	"  local n = (#m - 29) / 32\n" \
	"  if cs == 0 or n ~= math.ceil(size / cs) then return nil end\n" \
	"  local t = {}\n" \
	"  for i = 1, n do t[i] = hex_at(m, 30 + 32 * (i - 1)) end\n" \
	"  return t\n" \
	"end\n" \
	/* Drops one name of blob sha; the last one collects it. */ \
	"local function unname(base, refs, crefs, sha)\n" \
	"  if redis.call('HINCRBY', refs, sha, -1) > 0 then return end\n" \
	"  redis.call('HDEL', refs, sha)\n" \
	"  local key = base .. 'blob:' .. sha\n" \
	"  local cs = chunks_of(redis.call('GET', key))\n" \
	"  redis.call('DEL', key)\n" \
	"  if not cs then return end\n" \
	"  for _, c in ipairs(cs) do\n" \
	"    if redis.call('HINCRBY', crefs, c, -1) <= 0 then\n" \
	"      redis.call('HDEL', crefs, c)\n" \
	"      redis.call('DEL', base .. 'chunk:' .. c)\n" \
	"    end\n" \
	"  end\n" \
	"end\n" \
	/*
	 * Whether blob sha may be named: named already (its chunks are held),
	 * or stored with every chunk. Returns the chunks to take references
	 * on ({} when named), or nil and the reply saying what is missing.
	 */ \
	"local function nameable(base, refs, sha)\n" \
	"  if tonumber(redis.call('HGET', refs, sha) or '0') > 0 then\n" \
	"    return {}\n" \
	"  end\n" \
	"  local m = redis.call('GET', base .. 'blob:' .. sha)\n" \
	"  if not m then return nil, {'ENOENT', 0, 'blob ' .. sha} end\n" \
	"  local cs = chunks_of(m)\n" \
	"  if not cs then return nil, {'EBADMSG', 0, 'blob ' .. sha} end\n" \
	"  for _, c in ipairs(cs) do\n" \
	"    if redis.call('EXISTS', base .. 'chunk:' .. c) == 0 then\n" \
	"      return nil, {'ENOENT', 0, 'chunk ' .. c}\n" \
	"    end\n" \
	"  end\n" \
	"  return cs\n" \
	"end\n" \
	/* Adds one name of sha, after nameable() gave cs. */ \
	"local function name(base, refs, crefs, sha, cs)\n" \
	"  if redis.call('HINCRBY', refs, sha, 1) > 1 then return end\n" \
	"  redis.call('PERSIST', base .. 'blob:' .. sha)\n" \
	"  for _, c in ipairs(cs) do\n" \
	"    if redis.call('HINCRBY', crefs, c, 1) == 1 then\n" \
	"      redis.call('PERSIST', base .. 'chunk:' .. c)\n" \
	"    end\n" \
	"  end\n" \
	"end\n" \
	/* A history row: version, sha, created_at, job ('' for none). */ \
	"local function row_of(r)\n" \
	"  return string.match(r, '^(%d+) (%x+) (%d+) ?(.*)$')\n" \
	"end\n" \
	"local function now_ms()\n" \
	"  local t = redis.call('TIME')\n" \
	"  return t[1] .. string.format('%03d', math.floor(t[2] / 1000))\n" \
	"end\n" \
	/* An EINVAL reply unless KEYS are want, in order. */ \
	"local function keys_bad(want)\n" \
	"  for i, k in ipairs(want) do\n" \
	"    if KEYS[i] ~= k then\n" \
	"      return {'EINVAL', 0, 'KEYS[' .. i .. '] is not ' .. k}\n" \
	"    end\n" \
	"  end\n" \
	"  return nil\n" \
	"end\n"

/* rstore.h has the contract: KEYS, ARGV and the reply. */
const char rstore_commit_lua[] =
	LUA_LIB
	"local base, id, sha, job = ARGV[1], ARGV[2], ARGV[4], ARGV[5]\n"
	"local from, keep = tonumber(ARGV[3]), tonumber(ARGV[6])\n"
	"local bad = keys_bad({base .. 'sbx:' .. id, base .. 'sbxv:' .. id,\n"
	"  base .. 'sbxj:' .. id, base .. 'refs', base .. 'crefs',\n"
	"  base .. 'sbxs'})\n"
	"if bad then return bad end\n"
	"local hex64 = '^' .. string.rep('[0-9a-f]', 64) .. '$'\n"
	"if not from or from < 0 or not keep or keep < 0 or\n"
	"    not string.match(sha, hex64) then\n"
	"  return {'EINVAL', 0, 'ARGV'}\n"
	"end\n"
	"local sbx, hist, jobs = KEYS[1], KEYS[2], KEYS[3]\n"
	"local refs, crefs, ids = KEYS[4], KEYS[5], KEYS[6]\n"
	/* A job that made a version already says so, whatever the version. */
	"if job ~= '' then\n"
	"  local made = redis.call('HGET', jobs, job)\n"
	"  if made then return {'EALREADY', tonumber(made), job} end\n"
	"end\n"
	"local cur = redis.call('HGET', sbx, 'version')\n"
	"if from == 0 and cur then return {'EEXIST', tonumber(cur), id} end\n"
	"if from > 0 and not cur then\n"
	"  return {'ENOENT', 0, 'sandbox ' .. id}\n"
	"end\n"
	"if from > 0 and tonumber(cur) ~= from then\n"
	"  return {'ESTALE', tonumber(cur), id}\n"
	"end\n"
	"local cs, err = nameable(base, refs, sha)\n"
	"if not cs then return err end\n"
	/* Checked: from here on every call writes. */
	"local now, v = now_ms(), string.format('%d', from + 1)\n"
	"if from == 0 then\n"
	"  local labels = ARGV[7]\n"
	"  if labels == '' then labels = '{}' end\n"
	"  redis.call('HSET', sbx, 'head', sha, 'version', v,\n"
	"    'created_at', now, 'updated_at', now, 'labels', labels)\n"
	/* What the sandbox runs on: absent for none (docs/images.md). */
	"  if ARGV[8] ~= '' then redis.call('HSET', sbx, 'image', ARGV[8]) end\n"
	"  if ARGV[9] ~= '' then redis.call('HSET', sbx, 'workdir', ARGV[9]) end\n"
	"  redis.call('SADD', ids, id)\n"
	"else\n"
	"  redis.call('HSET', sbx, 'head', sha, 'version', v,\n"
	"    'updated_at', now)\n"
	"end\n"
	"local row = v .. ' ' .. sha .. ' ' .. now\n"
	"if job ~= '' then\n"
	"  row = row .. ' ' .. job\n"
	"  redis.call('HSET', jobs, job, v)\n"
	"end\n"
	"redis.call('LPUSH', hist, row)\n"
	/* Named before retention drops anything: shared chunks stay. */
	"name(base, refs, crefs, sha, cs)\n"
	"if keep > 0 then\n"
	"  local old = redis.call('LRANGE', hist, keep, -1)\n"
	"  if #old > 0 then\n"
	"    redis.call('LTRIM', hist, 0, keep - 1)\n"
	"    for _, r in ipairs(old) do\n"
	"      local _, osha, _, ojob = row_of(r)\n"
	"      if ojob and ojob ~= '' then redis.call('HDEL', jobs, ojob) end\n"
	"      if osha then unname(base, refs, crefs, osha) end\n"
	"    end\n"
	"  end\n"
	"end\n"
	"return {'OK', from + 1, sha}\n";

/*
 * KEYS[1] P:{T}:sbx:SRC, KEYS[2] P:{T}:sbx:DST, KEYS[3] P:{T}:sbxv:DST,
 * KEYS[4] P:{T}:refs, KEYS[5] P:{T}:sbxs; ARGV[1] "P:{T}:", ARGV[2] SRC,
 * ARGV[3] DST. The source's head is named already, so its chunks are
 * held: one more name is one HINCRBY.
 */
const char rstore__fork_lua[] =
	LUA_LIB
	"local base, src, dst = ARGV[1], ARGV[2], ARGV[3]\n"
	"local bad = keys_bad({base .. 'sbx:' .. src, base .. 'sbx:' .. dst,\n"
	"  base .. 'sbxv:' .. dst, base .. 'refs', base .. 'sbxs'})\n"
	"if bad then return bad end\n"
	"local s = redis.call('HMGET', KEYS[1], 'head', 'labels', 'image',\n"
	"  'workdir')\n"
	"if not s[1] then return {'ENOENT', 0, 'sandbox ' .. src} end\n"
	"local cur = redis.call('HGET', KEYS[2], 'version')\n"
	"if cur then return {'EEXIST', tonumber(cur), dst} end\n"
	"local now = now_ms()\n"
	"redis.call('HSET', KEYS[2], 'head', s[1], 'version', '1',\n"
	"  'created_at', now, 'updated_at', now, 'labels', s[2] or '{}')\n"
	/* A fork runs on what its source runs on. */
	"if s[3] then redis.call('HSET', KEYS[2], 'image', s[3]) end\n"
	"if s[4] then redis.call('HSET', KEYS[2], 'workdir', s[4]) end\n"
	"redis.call('LPUSH', KEYS[3], '1 ' .. s[1] .. ' ' .. now)\n"
	"redis.call('HINCRBY', KEYS[4], s[1], 1)\n"
	"redis.call('SADD', KEYS[5], dst)\n"
	"return {'OK', 1, s[1]}\n";

/*
 * KEYS[1] P:{T}:sbx:ID, KEYS[2] P:{T}:sbxv:ID, KEYS[3] P:{T}:sbxj:ID,
 * KEYS[4] P:{T}:refs, KEYS[5] P:{T}:crefs, KEYS[6] P:{T}:sbxs; ARGV[1]
 * "P:{T}:", ARGV[2] ID. Each history row is a name to drop.
 */
const char rstore__delete_lua[] =
	LUA_LIB
	"local base, id = ARGV[1], ARGV[2]\n"
	"local bad = keys_bad({base .. 'sbx:' .. id, base .. 'sbxv:' .. id,\n"
	"  base .. 'sbxj:' .. id, base .. 'refs', base .. 'crefs',\n"
	"  base .. 'sbxs'})\n"
	"if bad then return bad end\n"
	"if redis.call('EXISTS', KEYS[1]) == 0 then\n"
	"  return {'ENOENT', 0, 'sandbox ' .. id}\n"
	"end\n"
	"local rows = redis.call('LRANGE', KEYS[2], 0, -1)\n"
	"redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])\n"
	"redis.call('SREM', KEYS[6], id)\n"
	"for _, r in ipairs(rows) do\n"
	"  local _, sha = row_of(r)\n"
	"  if sha then unname(base, KEYS[4], KEYS[5], sha) end\n"
	"end\n"
	"return {'OK', #rows, id}\n";
