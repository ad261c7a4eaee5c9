// `#/agents[?offset=]`: agents a page at a time (`/slaves?limit=&offset=`);
// `#/agents/<id>`: one agent (`/slaves?slave_id=`).

import { getJSON, Poller } from "../api.js";
import { el, facts, link, replace, table } from "../dom.js";
import * as fmt from "../format.js";
import { hashFor, offsetParam } from "../route.js";
import { heading, pager, PAGE_SIZE, short } from "../widgets.js";

export function mount(container, route, status) {
  return route.id ? mountOne(container, route, status) : mountList(container, route, status);
}

function mountList(container, route, status) {
  const offset = offsetParam(route.params);
  const body = el("div", { id: "agents" });
  replace(container, heading("Agents"), body);
  const poller = new Poller(async () => {
    const page = await getJSON("/slaves", { limit: PAGE_SIZE, offset });
    const agents = page.slaves || [];
    replace(body, agentsTable(agents), pager("agents", {}, offset, agents.length, page.total));
  }, { onError: (err) => status.report(err) });
  poller.now();
  return () => poller.stop();
}

function agentsTable(agents) {
  return table([
    { title: "Host", cell: (a) => link(hashFor(`agents/${a.id}`), a.hostname || short(a.id), { title: a.id }) },
    { title: "State", cell: agentState },
    { title: "Resources", cell: (a) => fmt.resources(a.resources) },
    { title: "Used", cell: (a) => fmt.resources(a.used_resources) },
    { title: "Free", cell: (a) => fmt.resources(a.free_resources) },
    { title: "Registered", cell: (a) => fmt.time(a.registered_time) },
  ], agents, "No agents registered.");
}

/** active / inactive, or draining or drained with its deadline (a draining agent is
 * not active, as in Mesos: it gets no offers). */
function agentState(agent) {
  if (agent.draining || agent.drain_info) {
    const info = agent.drain_info || {};
    const state = String(info.state || "DRAINING").toLowerCase();
    const parts = [el("span", { class: "badge pending" }, state)];
    if (info.deadline) parts.push(" ", el("span", { class: "muted" }, `kills at ${fmt.time(info.deadline)}`));
    return parts;
  }
  return [el("span", { class: `badge ${agent.active ? "ok" : "bad"}` }, agent.active ? "active" : "inactive")];
}

function mountOne(container, route, status) {
  const body = el("div", { id: "agent" });
  replace(container, heading("Agent", route.id), body);
  const poller = new Poller(async () => {
    const answer = await getJSON("/slaves", { slave_id: route.id });
    const agent = (answer.slaves || [])[0];
    replace(body, agent ? agentFacts(agent) : el("p", { class: "muted" }, "No such agent registered."));
  }, { onError: (err) => status.report(err) });
  poller.now();
  return () => poller.stop();
}

function agentFacts(a) {
  const attributes = Object.entries(a.attributes || {}).map(([k, v]) => `${k}=${v}`).join(", ");
  return facts([
    ["Hostname", a.hostname],
    ["Id", el("span", { class: "mono" }, a.id)],
    ["Address", a.pid || "—"],
    ["State", agentState(a)],
    ["Registered", fmt.time(a.registered_time)],
    ["Version", a.version || "—"],
    ["Resources", fmt.resources(a.resources)],
    ["Used", fmt.resources(a.used_resources)],
    ["Offered", fmt.resources(a.offered_resources)],
    ["Free", fmt.resources(a.free_resources)],
    ["Attributes", attributes || "—"],
  ]);
}
