// sdk.mjs - loads the pinned agentfs-sdk for read.mjs and write.mjs.
//
// The modules live in $SANDQ_NODE_MODULES (set by tests/run.sh or the
// caller) or else in node_modules beside this file, where
// deploy/install-node-deps.sh puts them. ES modules ignore
// NODE_PATH, so the package is resolved from that folder explicitly. A
// missing package exits with status 3 and a line saying how to install it,
// which tests/interop_test.c passes on.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const modules = resolve(process.env.SANDQ_NODE_MODULES ||
  join(here, 'node_modules'));
const pinned = JSON.parse(readFileSync(join(here, 'package.json'), 'utf8'))
  .dependencies['agentfs-sdk'];

function missing(what) {
  process.stderr.write(`interop: ${what}; install it with ` +
    `"sh deploy/install-node-deps.sh" (npm install in tests/interop) or ` +
    'point SANDQ_NODE_MODULES at a node_modules holding ' +
    `agentfs-sdk@${pinned}\n`);
  process.exit(3);
}

// Resolved by hand: require.resolve() would also search every node_modules
// above the folder and could load some other copy.
const pkgFile = join(modules, 'agentfs-sdk', 'package.json');
if (!existsSync(pkgFile))
  missing(`agentfs-sdk is not installed in ${modules}`);
const pkg = JSON.parse(readFileSync(pkgFile, 'utf8'));
const version = pkg.version;
if (version !== pinned)
  missing(`${modules} has agentfs-sdk@${version}, not the pinned ${pinned}`);
const entry = join(modules, 'agentfs-sdk',
  pkg.exports?.['.']?.node ?? pkg.main);

let sdk;
try {
  sdk = await import(pathToFileURL(entry).href);
} catch (err) {
  // Most often the native binding (@tursodatabase/database-<platform>).
  missing(`agentfs-sdk@${version} does not load: ${err.message}`);
}

export const { AgentFS } = sdk;
export const SDK_VERSION = version;

const S_IFMT = 0o170000;

// The type name sandq uses for a full st_mode.
export function typeName(st) {
  if (st.isDirectory())
    return 'dir';
  if (st.isFile())
    return 'file';
  if (st.isSymbolicLink())
    return 'symlink';
  return `other:${(st.mode & S_IFMT).toString(8)}`;
}

// Prints one JSON object on stdout and lets node exit once it is flushed.
export function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}
