// `#/sandbox?agent_id=&path=[&file=][&root=]`: a task's sandbox, through the master's
// files proxy (the browser never talks to agents, which need not be reachable from it).
//
// Without `file`: the directory `path` (`/files/browse`), polled. With `file`: that file
// in a pager that follows it (`/files/read`, see file_pager.js) and a download link
// (`/files/download`). `root` is the sandbox the visit started from, for the breadcrumbs.

import { getJSON, Poller, withQuery } from "../api.js";
import { el, link, replace, table } from "../dom.js";
import { FilePager } from "../file_pager.js";
import * as fmt from "../format.js";
import { hashFor } from "../route.js";
import { heading } from "../widgets.js";

export function mount(container, route, status) {
  const agentId = route.params.agent_id || "";
  const path = route.params.path || "";
  const root = route.params.root || path;
  if (!agentId || !path) {
    replace(container, heading("Sandbox"), el("p", {}, "Open a sandbox from a task's “Sandbox” link."));
    return () => {};
  }
  const file = route.params.file || "";
  const where = { agent_id: agentId, root };
  replace(container, heading("Sandbox", `agent ${agentId}`), breadcrumbs(where, path, file));
  if (file) {
    const body = el("div", { id: "file" });
    const download = withQuery("/files/download", { agent_id: agentId, path: file });
    container.append(el("p", {}, el("a", { href: download, download: basename(file), id: "download" }, "Download"), " ", el("span", { class: "mono" }, file)), body);
    const pager = new FilePager(body, agentId, file, status);
    return () => pager.stop();
  }
  const body = el("div", { id: "listing" });
  container.append(body);
  const poller = new Poller(async () => {
    const entries = await getJSON("/files/browse", { agent_id: agentId, path });
    replace(body, listing(where, path, Array.isArray(entries) ? entries : entries.files || []));
  }, { onError: (err) => status.report(err) });
  poller.now();
  return () => poller.stop();
}

/** Links to the sandbox root and each directory below it down to `path` (then the file). */
function breadcrumbs(where, path, file) {
  const parts = [link(hashFor("sandbox", { ...where, path: where.root }), "sandbox")];
  const below = path.startsWith(where.root) ? path.slice(where.root.length).split("/").filter(Boolean) : [];
  let current = where.root;
  for (const name of below) {
    current = `${current.replace(/\/$/, "")}/${name}`;
    parts.push(" / ", link(hashFor("sandbox", { ...where, path: current }), name));
  }
  if (file) parts.push(" / ", el("strong", {}, basename(file)));
  return el("p", { class: "breadcrumbs" }, parts);
}

function listing(where, path, entries) {
  const rows = entries.map((e) => ({ ...e, path: entryPath(path, e.path), dir: isDirectory(e) }));
  rows.sort((a, b) => (b.dir - a.dir) || a.path.localeCompare(b.path));
  return table([
    { title: "Name", cell: (e) => e.dir
      ? link(hashFor("sandbox", { ...where, path: e.path }), basename(e.path) + "/")
      : link(hashFor("sandbox", { ...where, path, file: e.path }), basename(e.path), { class: "file-link" }) },
    { title: "Size", className: "num", cell: (e) => (e.dir ? "" : fmt.bytes(e.size)) },
    { title: "Modified", cell: (e) => fmt.time(e.mtime) },
    { title: "Mode", cell: (e) => el("span", { class: "mono" }, modeText(e.mode)) },
    { title: "", cell: (e) => (e.dir ? "" : el("a", { href: withQuery("/files/download", { agent_id: where.agent_id, path: e.path }), download: basename(e.path) }, "download")) },
  ], rows, "Empty directory.");
}

/** An entry's full path: the API gives it whole (as Mesos does), or else relative to the directory. */
function entryPath(directory, path) {
  const text = String(path || "");
  return text.startsWith("/") ? text : `${directory.replace(/\/$/, "")}/${text}`;
}

/** Mesos gives the mode as text (`drwxr-xr-x`); a number is st_mode. */
function isDirectory(entry) {
  if (typeof entry.mode === "string") return entry.mode.startsWith("d");
  return (Number(entry.mode) & 0o170000) === 0o040000;
}

function modeText(mode) {
  return typeof mode === "number" ? mode.toString(8) : String(mode ?? "");
}

function basename(path) {
  return String(path).replace(/\/$/, "").split("/").pop();
}
