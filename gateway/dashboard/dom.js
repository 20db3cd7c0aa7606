// dom.js - building the DOM from data. Everything the API returns (tenant
// names, outputs, file names, labels, audit details) goes in as text
// nodes, never as markup: el() takes children as strings (text nodes) or
// nodes, and there is no innerHTML anywhere in the dashboard.

/** An element tag with attrs (a plain object; "on*" keys are listeners) and children. */
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  append(e, children);
  return e;
}

/** Appends children (strings as text nodes, arrays flattened) to e. */
export function append(e, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** A table of rows (arrays of cells) under the header cells heads. */
export function table(heads, rows, attrs = {}) {
  return el("table", attrs,
    el("thead", {}, el("tr", {}, heads.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))))));
}

/** A <dl> of [term, value] pairs. */
export function pairs(list) {
  return el("dl", {}, list.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v ?? "")]));
}

/** Epoch milliseconds as local date and time, "" for none. */
export function when(ms) {
  if (!ms) return "";
  return new Date(ms).toLocaleString("sv-SE");
}

/** A link to a dashboard route (#/...), its parts URI-encoded. */
export function link(text, ...parts) {
  return el("a", { href: "#/" + parts.map(encodeURIComponent).join("/") }, text);
}
