// `#/frameworks`: every framework with its share and why it waits;
// `#/frameworks/<id>`: one framework and its tasks, newest first, paged.
//
// The list comes from `/overview` (frameworks are few; their counts are kept by the
// master), one framework's tasks from the paged `/tasks?framework_id=`.

import { getJSON, Poller } from "../api.js";
import { el, facts, link, replace, table } from "../dom.js";
import * as fmt from "../format.js";
import { hashFor, offsetParam } from "../route.js";
import { heading, pager, PAGE_SIZE, short, stateBadge, tasksTable, TASK_STATES } from "../widgets.js";

export function mount(container, route, status) {
  return route.id ? mountOne(container, route, status) : mountList(container, status);
}

function mountList(container, status) {
  const body = el("div", { id: "frameworks" });
  replace(container, heading("Frameworks"), body);
  const poller = new Poller(async () => {
    const overview = await getJSON("/overview");
    replace(body, frameworksTable(overview.frameworks || []));
  }, { onError: (err) => status.report(err) });
  poller.now();
  return () => poller.stop();
}

function frameworksTable(frameworks) {
  return table([
    { title: "Name", cell: (f) => link(hashFor(`frameworks/${f.id}`), f.name || short(f.id), { title: f.id }) },
    { title: "Role", cell: (f) => f.role },
    { title: "Principal", cell: (f) => f.principal || el("span", { class: "muted" }, "none") },
    { title: "Connected", cell: (f) => (f.connected ? (f.active ? "yes" : "inactive") : "no") },
    { title: "Dominant share", className: "num", cell: (f) => fmt.percent(f.dominant_share) },
    { title: "Guarantee", cell: (f) => fmt.resources(f.guarantee) },
    { title: "Used", cell: (f) => fmt.resources(f.used_resources) },
    { title: "Offered", cell: (f) => fmt.resources(f.offered_resources) },
    { title: "Tasks", cell: (f) => taskCounts(f) },
    { title: "Why pending", cell: (f) => whyPending(f.why_pending) },
  ], frameworks, "No frameworks registered.");
}

/** The non-zero task counts of a framework (`TASK_*` keys) as badges with numbers. */
function taskCounts(framework) {
  const parts = TASK_STATES.filter((s) => framework[s]).map((s) =>
    el("span", { class: "count" }, stateBadge(s), " ", String(framework[s])));
  return parts.length ? parts : el("span", { class: "muted" }, "none");
}

/**
 * Why a framework gets no offers right now: the master's `why_pending` list
 * (`[{reason, message}]`, e.g. suppressed, refusal filters, above its share).
 */
export function whyPending(reasons) {
  if (!reasons || !reasons.length) return el("span", { class: "muted" }, "—");
  return el("ul", { class: "why-pending" },
    reasons.map((r) => el("li", {}, el("span", { class: "mono" }, r.reason), r.message ? `: ${r.message}` : "")));
}

function mountOne(container, route, status) {
  const id = route.id;
  const offset = offsetParam(route.params);
  const summary = el("div", { id: "framework" });
  const tasks = el("div", { id: "framework-tasks" });
  replace(container, heading("Framework", id), summary, el("h2", {}, "Tasks"), tasks);
  const poller = new Poller(async () => {
    const [overview, page] = await Promise.all([
      getJSON("/overview"),
      getJSON("/tasks", { framework_id: id, limit: PAGE_SIZE, offset, order: "desc" }),
    ]);
    const f = (overview.frameworks || []).find((x) => x.id === id);
    replace(summary, f ? frameworkFacts(f) : el("p", { class: "muted" }, "Not registered now (its ended tasks are below)."));
    replace(tasks, tasksTable(page.tasks || []), pager(`frameworks/${id}`, {}, offset, (page.tasks || []).length, page.total));
  }, { onError: (err) => status.report(err) });
  poller.now();
  return () => poller.stop();
}

function frameworkFacts(f) {
  return facts([
    ["Name", f.name],
    ["Id", el("span", { class: "mono" }, f.id)],
    ["Role", f.role],
    ["Principal", f.principal || "none"],
    ["Connected", f.connected ? (f.active ? "yes" : "yes, inactive") : "no"],
    ["Dominant share", fmt.percent(f.dominant_share)],
    ["Guarantee", fmt.resources(f.guarantee)],
    ["Used", fmt.resources(f.used_resources)],
    ["Offered", fmt.resources(f.offered_resources)],
    ["Tasks", taskCounts(f)],
    ["Why pending", whyPending(f.why_pending)],
  ]);
}
