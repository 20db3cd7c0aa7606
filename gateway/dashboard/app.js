// app.js - the dashboard's views and its hash router (#/status, #/jobs,
// #/job/ID, #/dead, #/sandboxes, #/sandbox/ID[/files/PATH], #/audit).
//
// Login: the user pastes a token; GET /v1/admin/status tells an admin
// token (200) from a tenant's (403 not_admin). An admin sees the
// operator's views and picks the tenant the tenant views act as
// (X-Sandq-Tenant); a tenant's token sees its own jobs (by id) and
// sandboxes. The dashboard hides what a token cannot reach only for
// convenience: the gateway refuses it anyway. All data reaches the DOM
// through dom.js as text.
import { api, enc, session, ApiError } from "./api.js";
import { el, append, table, pairs, when, link } from "./dom.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const who = document.getElementById("who");

/** Replaces the main area with children (route() draws what a view returns). */
function show(...children) {
  main.replaceChildren();
  append(main, children);
}

/** An error as a paragraph (tests and people read its text). */
function failure(e) {
  return el("p", { class: "error", id: "error" }, e instanceof ApiError ? e.message : String(e));
}

/*** Login and the header ***/

function loginView(msg) {
  const input = el("input", { type: "password", id: "token", size: 50, placeholder: "API token", autocomplete: "off" });
  show(el("h1", {}, "Sign in"),
    el("p", {}, "Paste an API token: an admin token (sandq tenant token add --admin) or a tenant's."),
    msg ? el("p", { class: "error", id: "error" }, msg) : null,
    el("form", { class: "filters", id: "login", onsubmit: async (ev) => {
      ev.preventDefault();
      session.token = input.value.trim();
      await login();
    } }, input, el("button", { type: "submit" }, "Sign in")));
}

/** Checks the stored token; draws the header and the current route. */
async function login() {
  if (!session.token) return loginView();
  try {
    const st = await api("GET", "/v1/admin/status");
    session.admin = true;
    const names = st.tenants.map((t) => t.name);
    if (!names.includes(session.tenant)) session.tenant = names[0] || "";
  } catch (e) {
    if (e instanceof ApiError && e.code === "not_admin") session.admin = false;
    else {
      session.token = null;
      return loginView(e instanceof ApiError && e.status === 401 ? "That token is not known." : String(e.message || e));
    }
  }
  await header();
  if (!location.hash || location.hash === "#/" || location.hash === "#/login")
    location.hash = session.admin ? "#/status" : "#/sandboxes";
  else route();
}

async function header() {
  const items = session.admin
    ? [["status", "Hosts & tenants"], ["jobs", "Jobs"], ["dead", "Dead letters"], ["sandboxes", "Sandboxes"], ["audit", "Audit"]]
    : [["jobs", "Jobs"], ["sandboxes", "Sandboxes"]];
  nav.replaceChildren(...items.map(([r, t]) => el("a", { href: `#/${r}`, "data-route": r }, t)));
  who.replaceChildren();
  if (session.admin) {
    const st = await api("GET", "/v1/admin/status");
    const sel = el("select", { id: "tenant", title: "the tenant the tenant views act as", onchange: () => {
      session.tenant = sel.value;
      route();
    } }, st.tenants.map((t) => el("option", { value: t.name, selected: t.name === session.tenant }, t.name)));
    append(who, ["admin, tenant ", sel]);
  } else {
    append(who, ["tenant token"]);
  }
  append(who, [el("button", { id: "logout", onclick: () => {
    session.token = null;
    session.tenant = null;
    location.hash = "#/login";
    nav.replaceChildren();
    who.replaceChildren();
    loginView();
  } }, "Sign out")]);
}

/*** Hosts and tenants ***/

async function statusView() {
  const st = await api("GET", "/v1/admin/status");
  return [el("h1", {}, "Hosts and tenants"),
    el("p", {}, `${st.workers} workers in all`),
    el("h2", {}, "Hosts"),
    table(["host", "workers", "busy", "last report", "audit lost", "live"], st.hosts.map((h) => [
      h.host, h.workers, h.busy, `${Math.round(h.age_ms / 1000)} s ago`, h.audit_lost,
      el("span", { class: h.live ? "ok" : "bad" }, h.live ? "yes" : "no")]), { id: "hosts" }),
    el("h2", {}, "Tenants"),
    table(["tenant", "queued", "pulling", "running", "done (1 min)", "refused (1 min)", "share"], st.tenants.map((t) => [
      t.name, t.queued, t.pulling, t.running, t.done_1m, t.refused_1m, t.share]), { id: "tenants" })];
}

/*** Jobs ***/

/** A job id box that opens #/job/ID. */
function jobLookup() {
  const id = el("input", { id: "jobid", placeholder: "job id", size: 30 });
  return el("form", { class: "filters", onsubmit: (ev) => {
    ev.preventDefault();
    if (id.value.trim()) location.hash = "#/job/" + encodeURIComponent(id.value.trim());
  } }, "Open a job:", id, el("button", { type: "submit" }, "Open"));
}

async function jobsView(q) {
  const parts = [el("h1", {}, "Jobs"), jobLookup()];
  if (!session.admin) {
    return [parts, el("p", { class: "muted" }, "The list of recent jobs comes from the audit trail, which an admin token reads; open a job by its id.")];
  }
  const status = q.get("status") || "";
  const text = q.get("q") || "";
  const r = await api("GET", `/v1/admin/audit?tenant=${encodeURIComponent(session.tenant)}&category=job&limit=500`);
  let ev = r.events.filter((e) => e.action === "finished" && e.job);
  if (status) ev = ev.filter((e) => (e.detail || "").includes(status) || e.target === status);
  if (text) ev = ev.filter((e) => e.job.includes(text) || (e.detail || "").includes(text));
  const sel = el("select", { name: "status", id: "status-filter" },
    ["", "ok", "exit", "timeout", "cancelled", "internal", "refused"].map((s) => el("option", { value: s, selected: s === status }, s || "any status")));
  const box = el("input", { name: "q", id: "job-filter", value: text, placeholder: "id or text" });
  parts.push(el("form", { class: "filters", onsubmit: (e) => {
    e.preventDefault();
    const p = new URLSearchParams();
    if (sel.value) p.set("status", sel.value);
    if (box.value) p.set("q", box.value);
    location.hash = "#/jobs" + (p.size ? "?" + p : "");
  } }, "Filter:", sel, box, el("button", { type: "submit" }, "Apply")));
  parts.push(el("p", { class: "muted" }, `Finished jobs of tenant ${session.tenant} among the last ${r.scanned} audit entries.`));
  parts.push(table(["finished", "job", "host", "result", "sandbox"], ev.map((e) => [
    e.time, link(e.job, "job", e.job), e.host, [e.target, e.detail ? ` ${e.detail}` : ""], e.sandbox || ""]), { id: "jobs" }));
  return [parts];
}

async function jobView(id) {
  const r = await api("GET", `/v1/jobs/${encodeURIComponent(id)}`, { asTenant: true });
  const refused = Object.entries(r.refused || {});
  return [el("h1", {}, "Job ", el("span", { id: "job-id" }, id)),
    pairs([
      ["status", el("span", { id: "job-status", class: r.status === "ok" ? "ok" : "bad" }, r.status)],
      ["exit code", r.exit_code], ["signal", r.signal || ""],
      ["error", r.error ? `${r.error.code}: ${r.error.message}` : ""],
      ["queued", when(r.queued_at)], ["started", when(r.started_at)], ["finished", when(r.finished_at)],
      ["wall / cpu", `${r.wall_ms} ms / ${r.cpu_ms} ms`], ["max RSS", `${r.max_rss_kb} KiB`],
      ["host / worker", `${r.host ?? ""} / ${r.worker ?? ""}`], ["attempt", r.attempt],
      ["sandbox", r.sandbox ? [link(r.sandbox, "sandbox", r.sandbox), ` version ${r.version}`] : ""],
      ["image", r.image_name || r.image || ""],
    ]),
    el("h2", {}, "stdout", r.stdout_truncated ? ` (first bytes of ${r.stdout_len})` : ""),
    el("pre", { id: "stdout" }, r.stdout ?? ""),
    el("h2", {}, "stderr", r.stderr_truncated ? ` (first bytes of ${r.stderr_len})` : ""),
    el("pre", { id: "stderr" }, r.stderr ?? ""),
    el("h2", {}, "Refused calls"),
    refused.length ? table(["call", "times"], refused, { id: "refused" }) : el("p", { class: "muted" }, "none"),
    r.refused_paths && r.refused_paths.length ? [el("h2", {}, "Refused paths"), el("pre", {}, r.refused_paths.join("\n"))] : null,
    r.changed && r.changed.length ? [el("h2", {}, "Changed files"), el("pre", {}, r.changed.join("\n"))] : null];
}

/*** Dead letters ***/

async function deadView() {
  const r = await api("GET", `/v1/admin/dead?tenant=${encodeURIComponent(session.tenant)}&limit=200`);
  const out = el("p", { id: "retried" });
  return [el("h1", {}, "Dead letters of ", session.tenant), out,
    r.dead.length === 0 ? el("p", { class: "muted", id: "no-dead" }, "No dead letters.") :
      table(["dead at", "job", "reason", "attempts", "payload", ""], r.dead.map((d) => [
        when(d.at), link(d.id ?? "", "job", d.id ?? ""), d.reason ?? "",
        (d.attempts || []).map((a) => `#${a.attempt} ${a.host ?? ""}: ${a.reason ?? ""}`).join("; "),
        d.payload_truncated ? "cut" : `${d.payload_bytes} bytes`,
        d.retryable ? el("button", { class: "retry", "data-job": d.id, onclick: async (ev) => {
          ev.target.disabled = true;
          try {
            await api("POST", `/v1/admin/dead/${encodeURIComponent(session.tenant)}/${encodeURIComponent(d.dead_id)}/retry`);
            await deadView();
            main.querySelector("#retried").replaceChildren("Retried: ", link(d.id, "job", d.id));
          } catch (e) {
            out.replaceChildren(failure(e));
          }
        } }, "Retry") : el("span", { class: "muted" }, "not retryable")]), { id: "dead" })];
}

/*** Sandboxes ***/

async function sandboxesView() {
  const list = await api("GET", "/v1/sandboxes", { asTenant: true });
  return [el("h1", {}, "Sandboxes"),
    table(["sandbox", "version", "updated", "labels", "image"], list.map((s) => [
      link(s.sandbox, "sandbox", s.sandbox), s.version, when(s.updated_at),
      Object.entries(s.labels || {}).map(([k, v]) => `${k}=${v}`).join(", "), s.image || ""]), { id: "sandboxes" })];
}

/** #/sandbox/ID or #/sandbox/ID/files/PATH: info, history and the file browser at PATH. */
async function sandboxView(id, path) {
  const base = `/v1/sandboxes/${encodeURIComponent(id)}`;
  const [info, hist] = await Promise.all([api("GET", base, { asTenant: true }), api("GET", `${base}/history`, { asTenant: true })]);
  const crumbs = [link("/", "sandbox", id, "files")];
  const segs = path.split("/").filter(Boolean);
  segs.forEach((s, i) => crumbs.push(" / ", link(s, "sandbox", id, "files", ...segs.slice(0, i + 1))));
  let browser;
  let entries;
  try {
    entries = await api("GET", segs.length ? `${base}/list/${enc(path)}` : `${base}/files`, { asTenant: true });
    browser = table(["name", "type", "size", "modified"], entries.map((e) => [
      e.type === "dir" ? link(e.name, "sandbox", id, "files", ...segs, e.name)
        : e.type === "file" ? el("a", { href: "#", class: "file", onclick: (ev) => { ev.preventDefault(); openFile(base, [...segs, e.name].join("/")); } }, e.name)
        : e.name,
      e.type === "symlink" ? `symlink → ${e.target ?? ""}` : e.type, e.size, when(e.mtime * 1000)]), { id: "files" });
  } catch (e) {
    browser = failure(e);
  }
  return [el("h1", {}, "Sandbox ", el("span", { id: "sandbox-id" }, id)),
    pairs([["version", info.version], ["snapshot", info.snapshot], ["size", info.size ?? ""],
      ["created", when(info.created_at)], ["updated", when(info.updated_at)],
      ["labels", Object.entries(info.labels || {}).map(([k, v]) => `${k}=${v}`).join(", ")],
      ["image", info.image || ""], ["workdir", info.workdir || ""]]),
    el("h2", {}, "Files: ", crumbs), browser,
    el("div", { id: "file" }),
    el("h2", {}, "Versions"),
    table(["version", "snapshot", "created"], hist.versions.map((v) => [v.version, v.snapshot, when(v.created_at)]), { id: "versions" }),
    el("h2", {}, "Calls"),
    table(["#", "call", "status", "parameters"], hist.calls.map((c) => [c.id, c.name, c.status, c.parameters ?? ""]), { id: "calls" })];
}

/** Shows the first 64 KiB of a file as text under the browser. */
async function openFile(base, path) {
  const box = main.querySelector("#file");
  try {
    const r = await api("GET", `${base}/files/${enc(path)}`, { asTenant: true, raw: true });
    const buf = new Uint8Array(await r.arrayBuffer());
    const text = new TextDecoder("utf-8", { fatal: false }).decode(buf.subarray(0, 65536));
    box.replaceChildren(el("h2", {}, path, ` (${buf.length} bytes)`), el("pre", { id: "file-text" }, text));
  } catch (e) {
    box.replaceChildren(failure(e));
  }
}

/*** Audit ***/

async function auditView(q) {
  const cat = q.get("category") || "";
  const before = q.get("before") || "";
  const p = new URLSearchParams({ tenant: session.tenant, limit: "50" });
  if (cat) p.set("category", cat);
  if (before) p.set("before", before);
  const r = await api("GET", `/v1/admin/audit?${p}`);
  const sel = el("select", { id: "category" }, ["", "job", "sandbox", "syscall", "path", "quota", "policy", "tenant", "audit", "image"]
    .map((c) => el("option", { value: c, selected: c === cat }, c || "any category")));
  const go = (b) => {
    const n = new URLSearchParams();
    if (sel.value) n.set("category", sel.value);
    if (b) n.set("before", b);
    location.hash = "#/audit" + (n.size ? "?" + n : "");
  };
  return [el("h1", {}, "Audit trail of ", session.tenant),
    el("form", { class: "filters", onsubmit: (e) => { e.preventDefault(); go(""); } },
      "Category:", sel, el("button", { type: "submit" }, "Apply")),
    table(["time", "category", "action", "target", "allowed", "job", "sandbox", "host", "detail"], r.events.map((e) => e.error
      ? [e.entry, "", "", "", "", "", "", "", el("span", { class: "error" }, e.error)]
      : [e.time, e.category, e.action, e.target, e.allowed ? "yes" : el("span", { class: "bad" }, "no"),
        e.job ? link(e.job, "job", e.job) : "", e.sandbox || "", e.host, e.detail]), { id: "audit" }),
    r.next ? el("button", { id: "next", onclick: () => go(r.next) }, "Older") : el("p", { class: "muted" }, "End of the trail.")];
}

/*** Router ***/

/*
 * Each view returns what it draws, and route() draws it only if no later
 * route() started meanwhile: a slow view (a status fetch started by the
 * redirect after login) never replaces the view asked for after it.
 */
let latest = 0;

async function route() {
  const mine = ++latest;
  if (!session.token) return loginView();
  const [pathPart, query] = location.hash.slice(2).split("?");
  const parts = pathPart.split("/").map(decodeURIComponent);
  const q = new URLSearchParams(query || "");
  for (const a of nav.querySelectorAll("a")) a.classList.toggle("on", a.dataset.route === parts[0]);
  let content;
  try {
    switch (parts[0]) {
    case "status": content = await statusView(); break;
    case "jobs": content = await jobsView(q); break;
    case "job": content = await jobView(parts[1]); break;
    case "dead": content = await deadView(); break;
    case "sandboxes": content = await sandboxesView(); break;
    case "sandbox": content = await sandboxView(parts[1], parts[2] === "files" ? parts.slice(3).join("/") : ""); break;
    case "audit": content = await auditView(q); break;
    case "login": return loginView();
    default: location.hash = session.admin ? "#/status" : "#/sandboxes"; return;
    }
  } catch (e) {
    content = [failure(e)];
  }
  if (mine === latest) show(...content);
}

window.addEventListener("hashchange", () => { if (session.token) route(); });
login();
