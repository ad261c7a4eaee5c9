// Pieces several pages share: a pager for long tables, task state badges, the tasks
// table, the sandbox link.

import { el, link, table } from "./dom.js";
import * as fmt from "./format.js";
import { hashFor } from "./route.js";

export const PAGE_SIZE = 50;

/** Task states that are over (Mesos' terminal states). */
export const TERMINAL_STATES = [
  "TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_DROPPED",
  "TASK_LOST", "TASK_GONE", "TASK_UNKNOWN",
];
export const TASK_STATES = [
  "TASK_STAGING", "TASK_STARTING", "TASK_RUNNING", "TASK_KILLING", "TASK_UNREACHABLE",
  ...TERMINAL_STATES,
];

/** A state as a coloured badge. */
export function stateBadge(state) {
  const kind = state === "TASK_RUNNING" ? "ok"
    : state === "TASK_FINISHED" ? "done"
    : TERMINAL_STATES.includes(state) ? "bad" : "pending";
  return el("span", { class: `badge ${kind}`, "data-state": state }, fmt.stateName(state));
}

/**
 * "Previous / 1–50 of 1,234 / Next" links for a table paged by `offset`. `route` and
 * `params` make the links (the page's own hash route with offset changed).
 */
export function pager(route, params, offset, shown, total) {
  const prev = Math.max(0, offset - PAGE_SIZE);
  const next = offset + PAGE_SIZE;
  const hasNext = total === undefined || total === null ? shown === PAGE_SIZE : next < total;
  const range = shown ? `${offset + 1}–${offset + shown}` : "0";
  return el("div", { class: "pager" },
    offset > 0 ? link(hashFor(route, { ...params, offset: prev || null }), "← Previous") : el("span", { class: "muted" }, "← Previous"),
    el("span", { class: "range" }, total === undefined || total === null ? range : `${range} of ${total.toLocaleString()}`),
    hasNext ? link(hashFor(route, { ...params, offset: next }), "Next →") : el("span", { class: "muted" }, "Next →"),
  );
}

/** The link to a task's sandbox in the sandbox browser (null when the API gave none). */
export function sandboxLink(task) {
  if (!task.sandbox || !task.slave_id) return el("span", { class: "muted" }, "—");
  return link(hashFor("sandbox", { agent_id: task.slave_id, path: task.sandbox }), "Sandbox", { class: "sandbox-link" });
}

/** The table of tasks, one row each: framework, id, name, state, times, host, exit code, why. */
export function tasksTable(tasks) {
  return table([
    { title: "Framework", cell: (t) => link(hashFor(`frameworks/${t.framework_id}`), short(t.framework_id)) },
    { title: "Task", cell: (t) => el("span", { class: "mono task-id" }, t.id) },
    { title: "Name", cell: (t) => t.name },
    { title: "State", cell: (t) => stateBadge(t.state) },
    { title: "Started", cell: (t) => fmt.time(fmt.stateTime(t, ["TASK_RUNNING", "TASK_STARTING", "TASK_STAGING"])) },
    { title: "Stopped", cell: (t) => fmt.time(TERMINAL_STATES.includes(t.state) ? lastTime(t) : null) },
    { title: "Host", cell: (t) => t.hostname || (t.slave_id ? link(hashFor(`agents/${t.slave_id}`), short(t.slave_id)) : "—") },
    { title: "Exit", className: "num exit-code", cell: (t) => t.exit_code === null || t.exit_code === undefined ? "" : String(t.exit_code) },
    { title: "Reason / message", className: "why", cell: (t) => [t.reason ? el("span", { class: "mono" }, t.reason) : null, t.reason && t.message ? " " : null, t.message || null] },
    { title: "", cell: sandboxLink },
  ], tasks, "No tasks.");
}

function lastTime(task) {
  const statuses = task.statuses || [];
  return statuses.length ? statuses[statuses.length - 1].timestamp : null;
}

/** A long id shortened for a table cell; the full id in its tooltip via the caller's link. */
export function short(id) {
  const text = String(id || "");
  return text.length > 24 ? `${text.slice(0, 10)}…${text.slice(-10)}` : text;
}

/** A page's heading with an optional note beside it. */
export function heading(title, note) {
  return el("h1", {}, title, note ? el("span", { class: "note" }, note) : null);
}
