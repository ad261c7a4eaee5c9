// A pager over one file of a sandbox that follows it as it grows, like `tail -f`.
//
// Through the master's files proxy (`/files/read?agent_id=&path=&offset=&length=`,
// answering `{"offset": N, "data": "..."}`): it first asks with `offset=-1`, which
// answers the file's size, starts WINDOW bytes before the end, then reads on from
// where it got to, once a second. Only the last KEEP_CHARS characters stay on the
// page, so a log followed for hours does not eat the browser's memory.

import { getJSON, Poller } from "./api.js";
import { el, replace } from "./dom.js";
import * as fmt from "./format.js";

export const WINDOW = 64 * 1024; // what is shown of a file at first, and the largest read
export const KEEP_CHARS = 1024 * 1024;
const CHUNKS_PER_TICK = 8; // catching up on a fast writer: at most this many reads per second
const encoder = new TextEncoder();

export class FilePager {
  /**
   * @param {HTMLElement} node where the pager draws itself
   * @param {string} agentId the agent whose sandbox holds the file
   * @param {string} path the file's path as `/files/browse` gives it
   * @param {{report(err): void}} status where errors are told
   */
  constructor(node, agentId, path, status) {
    this.agentId = agentId;
    this.path = path;
    this.offset = null; // next byte to read; null until the size is known
    this.kept = 0; // characters on the page
    this.skipped = ""; // says what of the file's start is not shown
    this.note = el("p", { class: "muted pager-note" }, "Reading…");
    this.text = el("pre", { class: "file-pager", id: "file-pager", tabindex: 0 });
    this.follow = el("input", { type: "checkbox", checked: true, id: "follow" });
    replace(node, el("div", { class: "pager-bar" },
      el("label", {}, this.follow, " follow the end"), " ", this.note), this.text);
    this.poller = new Poller(() => this.tick(), { intervalMs: 1000, onError: (err) => status.report(err) });
    this.poller.now();
  }

  stop() {
    this.poller.stop();
  }

  async tick() {
    if (this.offset === null) {
      // offset=-1 reads nothing and answers the size.
      const probe = await this.read(-1, 0);
      const size = Number(probe.offset) || 0;
      this.offset = Math.max(0, size - WINDOW);
      this.skipped = this.offset > 0
        ? `the first ${fmt.bytes(this.offset)} not shown (Download has them); `
        : "";
    }
    for (let i = 0; i < CHUNKS_PER_TICK; i++) {
      const answer = await this.read(this.offset, WINDOW);
      const data = answer.data || "";
      if (!data) break;
      // The offset counts bytes of the file, the text is characters: advance by the bytes
      // the page covered (mezzo's `length`; the text's UTF-8 length where it is absent).
      const read = Number.isInteger(answer.length) ? answer.length : encoder.encode(data).length;
      this.offset = Number(answer.offset ?? this.offset) + read;
      this.show(data);
      if (read < WINDOW) break; // a short read: caught up with the writer
    }
    this.note.textContent = `${this.skipped}${fmt.bytes(this.offset)} so far; following`;
  }

  read(offset, length) {
    return getJSON("/files/read", { agent_id: this.agentId, path: this.path, offset, length });
  }

  /** Append `data`, drop what is beyond KEEP_CHARS, keep the end in view if following. */
  show(data) {
    this.text.append(document.createTextNode(data));
    this.kept += data.length;
    while (this.kept > KEEP_CHARS && this.text.firstChild && this.text.firstChild !== this.text.lastChild) {
      this.kept -= this.text.firstChild.textContent.length;
      this.text.firstChild.remove();
    }
    if (this.follow.checked) this.text.scrollTop = this.text.scrollHeight;
  }
}
