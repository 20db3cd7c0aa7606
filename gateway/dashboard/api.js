// api.js - the gateway's /v1 API as the dashboard calls it. The token the
// user pasted lives in sessionStorage (gone when the tab closes, never a
// cookie, so no other site's page can make the browser send it); every
// call sends it as Authorization: Bearer, and, when an admin picked a
// tenant, X-Sandq-Tenant. The gateway decides what the token may see.

const TOKEN = "sandq.token";
const TENANT = "sandq.tenant";

export const session = {
  get token() { return sessionStorage.getItem(TOKEN); },
  set token(v) { v ? sessionStorage.setItem(TOKEN, v) : sessionStorage.removeItem(TOKEN); },
  get tenant() { return sessionStorage.getItem(TENANT) || ""; },
  set tenant(v) { v ? sessionStorage.setItem(TENANT, v) : sessionStorage.removeItem(TENANT); },
  admin: false,    // learnt at login from GET /v1/admin/status
};

/** An API error: the gateway's {"error":{code,message}} and the HTTP status. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(`${status} ${code}: ${message}`);
    this.status = status;
    this.code = code;
  }
}

/**
 * method path (already encoded) with an optional JSON body; resolves to the
 * parsed JSON (raw: the Response) or throws an ApiError. asTenant: send
 * X-Sandq-Tenant (tenant routes, for an admin token).
 */
export async function api(method, path, { body, asTenant = false, raw = false } = {}) {
  const headers = { authorization: `Bearer ${session.token}` };
  if (asTenant && session.admin && session.tenant) headers["x-sandq-tenant"] = session.tenant;
  if (body !== undefined) headers["content-type"] = "application/json";
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (raw && r.ok) return r;
  const text = await r.text();
  let j = null;
  try { j = text ? JSON.parse(text) : null; } catch { j = null; }
  if (!r.ok) {
    const e = j && j.error ? j.error : { code: "http", message: text.slice(0, 200) };
    throw new ApiError(r.status, e.code, e.message);
  }
  return j;
}

/** A path segment or a /-separated path, each segment URI-encoded. */
export function enc(p) {
  return String(p).split("/").filter((s) => s !== "").map(encodeURIComponent).join("/");
}
