/*
 * bullmq.mjs - BullMQ, a queue with no isolation, measured the way bench.c
 * measures sandq: make bench prints its figures beside sandq's.
 *
 *   node bullmq.mjs bench URL DB [--latency-jobs N] [--throughput-jobs N]
 *                               [--producers N] [--workers N]
 *   node bullmq.mjs worker URL DB      (started by bench, one per worker)
 *
 * bench starts the workers as child processes (each a Worker with
 * concurrency 1 whose job runs execFile('/bin/true')), waits until each
 * says it is ready, then measures:
 *   latency     N sequential jobs: Queue.add to the job's completion seen by
 *               QueueEvents (waitUntilFinished), p50 and p99
 *   throughput  M jobs from P producers (one connection each), each adding
 *               its share one job at a time; jobs/s from the first add to
 *               the last completion
 * and stops every worker by its PID (SIGTERM, then waits for its exit).
 * BullMQ's keys live in Redis database DB, apart from sandq's (database 0);
 * BullMQ needs EVAL there. Last line: "PEER bullmq P50 P99 JOBS_PER_S" for
 * bench/peers/run.sh's ratios. Numbers, never assertions.
 */
import { spawn, execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Queue, QueueEvents, Worker } from 'bullmq';

const QUEUE = 'sandq-bench-peer';
const execFileP = promisify(execFile);

/* The ioredis connection options for URL, database DB. */
function connection(url, db) {
	const u = new URL(url);
	return { host: u.hostname, port: Number(u.port || 6379), db: Number(db),
	    maxRetriesPerRequest: null };
}

/* The p-th percentile of the sorted array ms (nearest rank). */
function pct(ms, p) {
	const i = Math.min(ms.length - 1, Math.max(0, Math.ceil(p / 100 * ms.length) - 1));
	return ms[i];
}

/* A worker process: concurrency 1, each job one execFile('/bin/true'). */
async function worker(url, db) {
	const w = new Worker(QUEUE, async () => { await execFileP('/bin/true'); },
	    { connection: connection(url, db), concurrency: 1 });
	await w.waitUntilReady();
	process.stdout.write('ready\n');
	process.on('SIGTERM', async () => { await w.close(); process.exit(0); });
}

/* Starts one worker process; resolves with it once it printed "ready". */
function startWorker(url, db) {
	return new Promise((resolve, reject) => {
		const child = spawn(process.execPath, [new URL(import.meta.url).pathname,
		    'worker', url, db], { stdio: ['ignore', 'pipe', 'inherit'] });
		child.once('error', reject);
		child.once('exit', (code) => reject(new Error(`bullmq worker exited (${code})`)));
		child.stdout.once('data', () => resolve(child));
	});
}

/* Stops a worker process by its PID and waits for its exit. */
function stopWorker(child) {
	return new Promise((resolve) => {
		if (child.exitCode !== null || child.signalCode !== null)
			return resolve();
		child.removeAllListeners('exit');
		child.once('exit', () => resolve());
		process.kill(child.pid, 'SIGTERM');
	});
}

async function bench(url, db, opts) {
	const conn = connection(url, db);
	const workers = [];
	const queues = [];
	const events = new QueueEvents(QUEUE, { connection: conn });
	/* BullMQ's defaults: completed jobs are kept (obliterated at the end);
	 * removeOnComplete would race waitUntilFinished ("Missing key"). */
	const add = {};
	let rc = 0;

	try {
		await events.waitUntilReady();
		for (let i = 0; i < opts.workers; i++)
			workers.push(await startWorker(url, db));
		for (let i = 0; i < opts.producers; i++)
			queues.push(new Queue(QUEUE, { connection: conn }));

		/* Warm-up, then sequential latency. */
		for (let i = 0; i < 20; i++)
			await (await queues[0].add('true', {}, add)).waitUntilFinished(events);
		const ms = [];
		for (let i = 0; i < opts.latency; i++) {
			const t0 = performance.now();
			const job = await queues[0].add('true', {}, add);
			await job.waitUntilFinished(events);
			ms.push(performance.now() - t0);
		}
		ms.sort((a, b) => a - b);
		const p50 = pct(ms, 50), p99 = pct(ms, 99);
		console.log(`${'bullmq: add -> completed, /bin/true'.padEnd(34)} n=${String(ms.length).padEnd(5)} ` +
		    `p50 ${p50.toFixed(3).padStart(7)} ms   p99 ${p99.toFixed(3).padStart(7)} ms`);

		/* Burst: producers add their shares; wait for every completion. */
		const pending = new Set();
		let done;
		const all = new Promise((r) => { done = r; });
		let adding = true;
		events.on('completed', ({ jobId }) => {
			if (pending.delete(jobId) && !adding && pending.size === 0)
				done();
		});
		const t0 = performance.now();
		await Promise.all(queues.map(async (q, p) => {
			const share = Math.floor(opts.throughput / opts.producers) +
			    (p < opts.throughput % opts.producers ? 1 : 0);
			for (let i = 0; i < share; i++)
				pending.add((await q.add('true', {}, add)).id);
		}));
		adding = false;
		/* Completions seen before their add returned were not yet pending. */
		const seen = await Promise.all([...pending].map(async (id) =>
		    [id, (await queues[0].getJobState(id))]));
		for (const [id, state] of seen)
			if (state === 'completed')
				pending.delete(id);
		if (pending.size > 0)
			await all;
		const s = (performance.now() - t0) / 1000;
		const rate = opts.throughput / s;
		console.log(`${'bullmq: throughput, /bin/true'.padEnd(34)} ${opts.throughput} jobs, ` +
		    `${opts.producers} producers: ${rate.toFixed(0)} jobs/s (${s.toFixed(2)} s)`);
		console.log(`PEER bullmq ${p50.toFixed(3)} ${p99.toFixed(3)} ${rate.toFixed(1)}`);
	} catch (e) {
		console.error(`bullmq bench: ${e.message}`);
		rc = 1;
	} finally {
		await Promise.all(workers.map(stopWorker));
		for (const q of queues) {
			await q.obliterate({ force: true }).catch(() => {});
			await q.close();
		}
		await events.close();
	}
	return rc;
}

const [mode, url, db, ...rest] = process.argv.slice(2);
if (mode === 'worker' && url && db) {
	await worker(url, db);
} else if (mode === 'bench' && url && db) {
	const opts = { latency: 500, throughput: 2000, producers: 4, workers: 2 };
	const flags = { '--latency-jobs': 'latency', '--throughput-jobs': 'throughput',
	    '--producers': 'producers', '--workers': 'workers' };
	for (let i = 0; i + 1 < rest.length; i += 2)
		if (flags[rest[i]])
			opts[flags[rest[i]]] = Number(rest[i + 1]);
	process.exit(await bench(url, db, opts));
} else {
	console.error('usage: node bullmq.mjs bench URL DB [--latency-jobs N] ' +
	    '[--throughput-jobs N] [--producers N] [--workers N]');
	process.exit(2);
}
