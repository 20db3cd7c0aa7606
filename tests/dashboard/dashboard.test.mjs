// dashboard.test.mjs - the web dashboard (gateway/dashboard/, served by
// sandq-gateway at /dashboard/) driven in Debian's headless Chromium by
// puppeteer-core, against a private redis-server, sandqd and gateway
// (clients/typescript/test/harness.mjs; the gateway finds the pages beside
// build/, its default).
//
// The data is made first: jobs of tenant default (one printing markup
// meant to run), a job of tenant other, a sandbox with files, and a dead
// letter written into the dead-letter stream as tests/gateway_admin_test.c
// does (its payload packed by the Python client's Job.pack(), handed to
// redis-cli -x so the bytes are never quoted). Then each page is opened
// with an admin token and asserted on the text it shows, a retry from the
// dead-letter page runs the job, the hostile output is text with no
// element made of it, and a tenant token sees neither another tenant's
// jobs and sandboxes nor the operator's views.
//
// SANDQ_DASHBOARD_SHOTS=1 writes a screenshot of each page to
// docs/dashboard/NAME.png (made once and committed; off by default).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import puppeteer from "puppeteer-core";
import { Harness, REPO } from "../../clients/typescript/test/harness.mjs";

const H = new Harness();
const SHOTS = process.env.SANDQ_DASHBOARD_SHOTS === "1";
const HOSTILE = "<img src=x onerror=window.__pwned=1>";
let browser, admin, other, ids = {};

/** A JSON call to the gateway as token (and tenant, for an admin). */
async function call(method, path, token, { body, tenant, raw } = {}) {
  const headers = { authorization: `Bearer ${token}` };
  if (tenant) headers["x-sandq-tenant"] = tenant;
  const r = await fetch(H.url + path, { method, headers, body });
  if (raw) return r;
  const t = await r.text();
  assert.ok(r.status < 300, `${method} ${path}: ${r.status} ${t}`);
  return t ? JSON.parse(t) : null;
}

/** Runs a sh job as token to its end; its id. */
async function job(token, script, id, more = {}) {
  await call("POST", "/v1/jobs", token, { body: JSON.stringify({ op: "sh", script, id, ...more }) });
  const r = await call("GET", `/v1/jobs/${id}?wait=60`, token);
  assert.equal(r.status, "ok", `${id}: ${JSON.stringify(r)}`);
  return id;
}

/** Writes a retryable dead letter of tenant default for a job running script. */
function deadLetter(id, script) {
  const payload = execFileSync("/usr/bin/python3", ["-c",
    "import sys; from sandq.job import Job; sys.stdout.buffer.write(Job.sh(sys.argv[1], id=sys.argv[2]).pack())",
    script, id], { env: { ...process.env, PYTHONPATH: join(REPO, "clients/python"), PYTHONDONTWRITEBYTECODE: "1" } });
  execFileSync("redis-cli", ["-p", String(H.redisPort), "-x", "XADD", "sandq:{default}:dead", "*",
    "entry", "1-1", "id", id, "reason", "worker lost",
    "attempts", '[{"attempt":1,"host":"h1","reason":"worker lost"}]',
    "payload_truncated", "0", "payload"], { input: payload });
}

/** A new page signed in with token (through the login form). */
async function signIn(token) {
  const ctx = await browser.createBrowserContext();
  const page = await ctx.newPage();
  await page.setViewport({ width: 1280, height: 800 });
  page.on("pageerror", (e) => { throw e; });
  await page.goto(`${H.url}/dashboard/`);
  await page.waitForSelector("#token");
  await page.type("#token", token);
  await Promise.all([page.waitForSelector("#logout"), page.click("#login button")]);
  return page;
}

/** Opens route in page and waits for selector; the main area's text. */
async function open(page, route, selector, shot) {
  await page.evaluate((r) => { location.hash = r; }, route);
  await page.waitForSelector(selector);
  if (SHOTS && shot) {
    mkdirSync(join(REPO, "docs/dashboard"), { recursive: true });
    await page.screenshot({ path: join(REPO, "docs/dashboard", `${shot}.png`), fullPage: true });
  }
  return page.$eval("main", (m) => m.textContent);
}

before(async () => {
  await H.start();
  admin = H.sandq("tenant", "token", "add", "--admin", "--name", "dash").trim().split("\n").pop();
  H.sandq("tenant", "add", "other");
  other = H.sandq("tenant", "token", "add", "other", "--name", "dash").trim().split("\n").pop();
  ids.hello = await job(H.token, "echo hello from the dashboard", "dash-hello");
  ids.hostile = await job(H.token, `printf '%s\\n' '${HOSTILE}'`, "dash-hostile");
  ids.secret = await job(other, "echo secret of other", "dash-secret");
  await call("POST", "/v1/sandboxes", H.token, { body: JSON.stringify({ sandbox: "sb-web", labels: { team: "<b>web</b>" } }) });
  await job(H.token, "mkdir docs && echo 'read me, operator' > docs/readme.txt", "dash-files", { sandbox: "sb-web" });
  await call("POST", "/v1/sandboxes", other, { body: JSON.stringify({ sandbox: "sb-other" }) });
  deadLetter("dash-dead", "echo back from the dead");
  browser = await puppeteer.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: process.getuid() === 0 ? ["--no-sandbox"] : [],
  });
});

after(async () => {
  if (browser) await browser.close();
  await H.stop();
});

test("a bad token is refused at the login form", async () => {
  const ctx = await browser.createBrowserContext();
  const page = await ctx.newPage();
  await page.goto(`${H.url}/dashboard/`);
  await page.waitForSelector("#token");
  await page.type("#token", "not-a-token");
  await Promise.all([page.waitForSelector("#error"), page.click("#login button")]);
  assert.match(await page.$eval("#error", (e) => e.textContent), /not known/);
  if (SHOTS) {
    mkdirSync(join(REPO, "docs/dashboard"), { recursive: true });
    await page.screenshot({ path: join(REPO, "docs/dashboard/login.png") });
  }
  await ctx.close();
});

test("an admin sees hosts, tenants, jobs, a job, sandboxes, files and the audit trail", async () => {
  const page = await signIn(admin);
  let t = await open(page, "#/status", "#tenants", "status");
  assert.match(await page.$eval("#hosts", (e) => e.textContent), /yes/);
  const tenants = await page.$eval("#tenants", (e) => e.textContent);
  assert.ok(tenants.includes("default") && tenants.includes("other"), tenants);

  t = await open(page, "#/jobs", "#jobs", "jobs");
  assert.ok(t.includes(ids.hello) && t.includes(ids.hostile), t);
  assert.ok(!t.includes(ids.secret), "another tenant's job in default's list");
  await open(page, "#/jobs?q=hello", "#jobs");
  const rows = await page.$$eval("#jobs tbody tr", (r) => r.map((x) => x.textContent));
  assert.equal(rows.length, 1, rows.join("\n"));

  t = await open(page, `#/job/${ids.hello}`, "#stdout", "job");
  assert.equal(await page.$eval("#job-status", (e) => e.textContent), "ok");
  assert.equal(await page.$eval("#stdout", (e) => e.textContent), "hello from the dashboard\n");
  assert.match(t, /attempt1/);

  t = await open(page, "#/sandboxes", "#sandboxes", "sandboxes");
  assert.ok(t.includes("sb-web") && t.includes("team=<b>web</b>"), t);
  assert.ok(!t.includes("sb-other"), t);
  t = await open(page, "#/sandbox/sb-web/files/docs", "#files", "sandbox");
  assert.ok(t.includes("readme.txt"), t);
  assert.match(await page.$eval("#versions", (e) => e.textContent), /1/);
  await page.click("#files a.file");
  await page.waitForSelector("#file-text");
  assert.equal(await page.$eval("#file-text", (e) => e.textContent), "read me, operator\n");
  if (SHOTS) await page.screenshot({ path: join(REPO, "docs/dashboard/sandbox.png"), fullPage: true });

  t = await open(page, "#/audit?category=job", "#audit", "audit");
  assert.ok(t.includes("finished") && t.includes(ids.hello), t);
  const cats = await page.$$eval("#audit tbody tr td:nth-child(2)", (c) => [...new Set(c.map((x) => x.textContent))]);
  assert.deepEqual(cats, ["job"]);
  await page.close();
});

test("a retry from the dead-letter page runs the job", async () => {
  const page = await signIn(admin);
  const t = await open(page, "#/dead", "#dead", "dead");
  assert.ok(t.includes("dash-dead") && t.includes("worker lost"), t);
  await page.click("#dead button.retry");
  await page.waitForSelector("#retried a");
  assert.match(await page.$eval("#retried", (e) => e.textContent), /dash-dead/);
  const r = await call("GET", "/v1/jobs/dash-dead?wait=60", admin, { tenant: "default" });
  assert.equal(r.status, "ok", JSON.stringify(r));
  await page.click("#retried a");
  await page.waitForSelector("#stdout");
  assert.equal(await page.$eval("#stdout", (e) => e.textContent), "back from the dead\n");
  await page.close();
});

test("a hostile output shows as text and runs nothing", async () => {
  const page = await signIn(admin);
  await open(page, `#/job/${ids.hostile}`, "#stdout");
  assert.equal(await page.$eval("#stdout", (e) => e.textContent), HOSTILE + "\n");
  assert.equal(await page.$$eval("main img, main b", (x) => x.length), 0);
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  await open(page, "#/sandboxes", "#sandboxes");
  assert.equal(await page.$$eval("main img, main b", (x) => x.length), 0);
  await page.close();
});

test("a slow view never replaces the view asked for after it", async () => {
  const page = await signIn(admin);
  await open(page, "#/sandboxes", "#sandboxes");
  // Hold every status answer back 600 ms: the status view asked for first
  // finishes after the job view asked for next, which must stay.
  await page.setRequestInterception(true);
  page.on("request", (req) => {
    if (req.url().includes("/v1/admin/status")) setTimeout(() => req.continue(), 600);
    else req.continue();
  });
  await page.evaluate(() => { location.hash = "#/status"; });
  await page.evaluate((id) => { location.hash = `#/job/${id}`; }, ids.hello);
  await page.waitForSelector("#stdout");
  await page.waitForNetworkIdle({ idleTime: 300, timeout: 10000 });
  assert.equal(await page.$eval("#stdout", (e) => e.textContent), "hello from the dashboard\n");
  assert.equal(await page.$("#hosts"), null, "the slow status view was drawn over the job");
  await page.close();
});

test("a tenant token sees its own tenant only", async () => {
  const page = await signIn(other);
  const navText = await page.$eval("#nav", (e) => e.textContent);
  assert.ok(!navText.includes("Dead letters") && !navText.includes("Audit"), navText);
  let t = await open(page, "#/sandboxes", "#sandboxes");
  assert.ok(t.includes("sb-other") && !t.includes("sb-web"), t);
  t = await open(page, `#/job/${ids.secret}`, "#stdout");
  assert.equal(await page.$eval("#stdout", (e) => e.textContent), "secret of other\n");
  // Another tenant's job, sandbox and the operator's views: the gateway refuses.
  await open(page, `#/job/${ids.hello}`, "#error");
  assert.match(await page.$eval("#error", (e) => e.textContent), /404/);
  await open(page, "#/sandbox/sb-web", "#error");
  assert.match(await page.$eval("#error", (e) => e.textContent), /404|not_found/);
  // As if the page were tampered with to name tenant default: still refused.
  await page.evaluate(() => sessionStorage.setItem("sandq.tenant", "default"));
  for (const r of ["#/status", "#/dead", "#/audit"]) {
    await page.evaluate(() => document.getElementById("main").replaceChildren());
    await open(page, r, "#error");
    assert.match(await page.$eval("#error", (e) => e.textContent), /not_admin/, r);
  }
  await page.close();
});
