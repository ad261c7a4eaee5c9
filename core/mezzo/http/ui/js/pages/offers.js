// `#/offers[?offset=]`: outstanding offers, a page at a time (`/offers?limit=&offset=`).

import { getJSON, Poller } from "../api.js";
import { el, link, replace, table } from "../dom.js";
import * as fmt from "../format.js";
import { hashFor, offsetParam } from "../route.js";
import { heading, pager, PAGE_SIZE, short } from "../widgets.js";

export function mount(container, route, status) {
  const offset = offsetParam(route.params);
  const body = el("div", { id: "offers" });
  replace(container, heading("Outstanding offers"), body);
  const poller = new Poller(async () => {
    const page = await getJSON("/offers", { limit: PAGE_SIZE, offset });
    const offers = page.offers || [];
    replace(body, table([
      { title: "Offer", cell: (o) => el("span", { class: "mono" }, short(o.id)) },
      { title: "Framework", cell: (o) => link(hashFor(`frameworks/${o.framework_id}`), short(o.framework_id), { title: o.framework_id }) },
      { title: "Agent", cell: (o) => link(hashFor(`agents/${o.slave_id}`), short(o.slave_id), { title: o.slave_id }) },
      { title: "Resources", cell: (o) => fmt.resources(o.resources) },
    ], offers, "No outstanding offers."), pager("offers", {}, offset, offers.length, page.total));
  }, { onError: (err) => status.report(err) });
  poller.now();
  return () => poller.stop();
}
