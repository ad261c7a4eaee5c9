// The UI's entry point: picks the page of the current hash route and mounts it.
//
// A page module exports `mount(container, route, status)` and returns a function that
// unmounts it (stops its pollers). Only the visible page polls.

import { replace, el } from "./dom.js";
import { currentRoute } from "./route.js";
import * as overview from "./pages/overview.js";
import * as frameworks from "./pages/frameworks.js";
import * as agents from "./pages/agents.js";
import * as tasks from "./pages/tasks.js";
import * as offers from "./pages/offers.js";
import * as sandbox from "./pages/sandbox.js";

const PAGES = { "": overview, frameworks, agents, tasks, offers, sandbox };

/** The status line in the top bar: when the page last updated, or what went wrong. */
const status = {
  node: null,
  /** `err` null: the last request worked. */
  report(err) {
    this.node ??= document.getElementById("status");
    if (err) {
      this.node.className = "status error";
      this.node.textContent = err.status === 0 ? "master not reachable; retrying" : String(err.message);
    } else {
      this.node.className = "status";
      this.node.textContent = `updated ${new Date().toLocaleTimeString()}`;
    }
  },
};

let unmount = null;

function show() {
  const route = currentRoute();
  const page = PAGES[route.page];
  if (unmount) unmount();
  unmount = null;
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.dataset.page === (route.page || "overview"));
  }
  const container = document.getElementById("page");
  if (!page) {
    replace(container, el("h1", {}, "Not found"), el("p", {}, "No page ", el("code", {}, location.hash), "."));
    return;
  }
  replace(container);
  unmount = page.mount(container, route, status);
  window.scrollTo(0, 0);
}

window.addEventListener("hashchange", show);
show();
