// `#/tasks[?framework_id=&state=&offset=]`: active and completed tasks, newest first,
// a page at a time (`/tasks?limit=&offset=&order=desc`), filtered by framework and state.
// The filters live in the hash, so a filtered view is a link.

import { getJSON, Poller } from "../api.js";
import { el, replace } from "../dom.js";
import { hashFor, offsetParam } from "../route.js";
import { heading, pager, PAGE_SIZE, tasksTable, TASK_STATES } from "../widgets.js";

export function mount(container, route, status) {
  const filters = { framework_id: route.params.framework_id || "", state: route.params.state || "" };
  const offset = offsetParam(route.params);
  const body = el("div", { id: "tasks" });
  replace(container, heading("Tasks"), filterForm(filters), body);
  const poller = new Poller(async () => {
    const page = await getJSON("/tasks", { ...filters, limit: PAGE_SIZE, offset, order: "desc" });
    const tasks = page.tasks || [];
    replace(body, tasksTable(tasks), pager("tasks", filters, offset, tasks.length, page.total));
  }, { onError: (err) => status.report(err) });
  poller.now();
  return () => poller.stop();
}

/** The filter bar; applying it changes the hash (and so remounts the page at offset 0). */
function filterForm(filters) {
  const framework = el("input", { name: "framework_id", placeholder: "framework id", value: filters.framework_id, size: 40 });
  const state = el("select", { name: "state" },
    el("option", { value: "" }, "any state"),
    TASK_STATES.map((s) => el("option", { value: s, selected: s === filters.state }, s)));
  const form = el("form", { class: "filters", id: "task-filters" },
    el("label", {}, "Framework ", framework), " ",
    el("label", {}, "State ", state), " ",
    el("button", { type: "submit" }, "Filter"), " ",
    el("a", { href: hashFor("tasks") }, "clear"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = hashFor("tasks", { framework_id: framework.value.trim(), state: state.value });
  });
  state.addEventListener("change", () => form.requestSubmit());
  return form;
}
