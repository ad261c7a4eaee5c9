// Hash routes: `#/<page>[/<id>][?k=v&...]`, e.g. `#/frameworks/<id>`,
// `#/tasks?state=TASK_RUNNING&offset=50`, `#/sandbox?agent_id=...&path=...`.
// The whole state of a page is in its hash, so every view can be bookmarked and the
// browser's back button works.

/** The current route: `{page, id, params}` (`page` "" for the front page). */
export function currentRoute(hash = location.hash) {
  const text = hash.replace(/^#\/?/, "");
  const [pathPart, queryPart = ""] = splitOnce(text, "?");
  const [page = "", ...rest] = pathPart.split("/").filter((s) => s !== "");
  const id = rest.length ? decodeURIComponent(rest.join("/")) : null;
  const params = Object.fromEntries(new URLSearchParams(queryPart));
  return { page: decodeURIComponent(page), id, params };
}

/** The hash of `route` ("tasks", "frameworks/<id>") with `params` (empty ones left out). */
export function hashFor(route, params = {}) {
  const path = String(route).split("/").map(encodeURIComponent).join("/");
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== "") query.set(key, String(value));
  }
  const text = query.toString();
  return `#/${path}${text ? "?" + text : ""}`;
}

/** The `offset` parameter of a paged table: a whole number ≥ 0 (anything else is 0). */
export function offsetParam(params) {
  const n = Number.parseInt(params.offset || "0", 10);
  return Number.isFinite(n) && n > 0 ? n : 0;
}

function splitOnce(text, separator) {
  const i = text.indexOf(separator);
  return i < 0 ? [text] : [text.slice(0, i), text.slice(i + 1)];
}
