// The front page: the cluster at a glance.
//
// It reads `/overview` (counts and sums the master keeps, whatever the cluster's size)
// and `/metrics/snapshot`, nothing else: drawing it must not cost the master a render
// of 50,000 agents every 2 seconds, which is what froze Mesos' masters.

import { getJSON, Poller } from "../api.js";
import { el, facts, link, replace, table } from "../dom.js";
import * as fmt from "../format.js";
import { hashFor } from "../route.js";
import { heading, short, stateBadge, TASK_STATES } from "../widgets.js";
import { whyPending } from "./frameworks.js";

/** The metrics shown, by their /metrics/snapshot name, with a label (and how to show the value). */
const METRICS = [
  ["master/uptime_secs", "Uptime", fmt.duration],
  ["master/frameworks_active", "Frameworks active"],
  ["master/frameworks_connected", "Frameworks connected"],
  ["master/slaves_connected", "Agents connected"],
  ["master/outstanding_offers", "Outstanding offers"],
  ["master/tasks_running", "Tasks running"],
  ["allocator/mesos/allocation_runs", "Allocation cycles"],
  ["allocator/mesos/allocation_run_ms", "Last allocation cycle (ms)"],
];

const SCALARS = ["cpus", "gpus", "mem", "disk"];
const TOP_FRAMEWORKS = 20;

export function mount(container, _route, status) {
  const body = el("div", { id: "overview" });
  replace(container, heading("Cluster"), body);
  const poller = new Poller(async () => {
    const [overview, metrics] = await Promise.all([getJSON("/overview"), getJSON("/metrics/snapshot")]);
    replace(body, ...render(overview, metrics));
  }, { onError: (err) => status.report(err) });
  poller.now();
  return () => poller.stop();
}

function render(overview, metrics) {
  const master = overview.master || {};
  const agents = overview.agents || {};
  return [
    el("section", { class: "cards" },
      card("Master", facts([
        ["Leader", master.leader || "—"],
        ["Version", master.version || "—"],
        ["Started", `${fmt.time(master.start_time)} (${fmt.ago(master.start_time)})`],
        ["Elected", `${fmt.time(master.elected_time)} (${fmt.ago(master.elected_time)})`],
        ["Hostname", master.hostname || "—"],
        ["Id", el("span", { class: "mono" }, master.id || "—")],
      ]), "master-card"),
      card("Agents", facts([
        ["Active", link(hashFor("agents"), String(agents.active ?? 0))],
        ["Inactive", String(agents.inactive ?? 0)],
        ["Draining", String(agents.draining ?? 0)],
      ]), "agents-card"),
      card("Tasks", facts(
        TASK_STATES.filter((s) => (overview.tasks || {})[s]).map((s) => [
          stateBadge(s), link(hashFor("tasks", { state: s }), String(overview.tasks[s])),
        ]).concat([["Outstanding offers", link(hashFor("offers"), String(overview.offers ?? 0))]]),
      ), "tasks-card"),
      card("Metrics", facts(
        METRICS.filter(([key]) => key in metrics).map(([key, label, show = fmt.number]) => [label, show(metrics[key])]),
      ), "metrics-card"),
    ),
    el("h2", {}, "Resources"),
    resourcesTable(overview.resources || {}),
    el("h2", {}, "Frameworks"),
    frameworksTable(overview.frameworks || []),
  ];
}

function card(title, content, id) {
  return el("div", { class: "card", id }, el("h2", {}, title), content);
}

/** Rows total / used / offered / idle, a column per scalar, with a meter of use. */
function resourcesTable(resources) {
  const total = resources.total || {};
  const used = resources.used || {};
  const offered = resources.offered || {};
  const names = SCALARS.filter((n) => total[n]);
  const amount = (n, value) => (n === "mem" || n === "disk" ? fmt.megabytes(value || 0) : fmt.number(value || 0));
  const rows = [
    ["Total", (n) => amount(n, total[n])],
    ["Used", (n) => [amount(n, used[n]), " ", el("meter", { min: 0, max: total[n], value: used[n] || 0, title: fmt.percent((used[n] || 0) / total[n]) })]],
    ["Offered", (n) => amount(n, offered[n])],
    ["Idle", (n) => amount(n, Math.max(0, (total[n] || 0) - (used[n] || 0) - (offered[n] || 0)))],
  ];
  return table(
    [{ title: "", cell: (r) => el("strong", {}, r[0]) }, ...names.map((n) => ({ title: n, cell: (r) => r[1](n) }))],
    rows,
  );
}

/** The frameworks with the largest dominant shares (all of them on the Frameworks page). */
function frameworksTable(frameworks) {
  const sorted = [...frameworks].sort((a, b) => (b.dominant_share || 0) - (a.dominant_share || 0));
  const shown = sorted.slice(0, TOP_FRAMEWORKS);
  const more = sorted.length > shown.length
    ? el("p", {}, link(hashFor("frameworks"), `All ${sorted.length} frameworks →`))
    : null;
  return [table([
    { title: "Name", cell: (f) => link(hashFor(`frameworks/${f.id}`), f.name || short(f.id)) },
    { title: "Role", cell: (f) => f.role },
    { title: "Dominant share", className: "num", cell: (f) => fmt.percent(f.dominant_share) },
    { title: "Running", className: "num", cell: (f) => String(f.TASK_RUNNING || 0) },
    { title: "Used", cell: (f) => fmt.resources(f.used_resources) },
    { title: "Why pending", cell: (f) => whyPending(f.why_pending) },
  ], shown, "No frameworks registered."), more];
}
