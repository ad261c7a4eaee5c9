// A tiny DOM helper. Everything the UI shows goes through `el`, which sets text with
// `textContent` and attributes with `setAttribute`: data from the cluster (task names,
// messages, file contents) is never parsed as HTML, whatever it holds.

/**
 * Make an element.
 * @param {string} tag
 * @param {object} [attrs] attributes; `class`, `href`, `title`, ... Values null/undefined/false
 *   are left out; `on<event>` keys add listeners instead.
 * @param {...(Node|string|number|null|undefined|Array)} children nodes or text (arrays flattened)
 */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      node.addEventListener(name.slice(2), value);
    } else {
      node.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(node, children);
  return node;
}

/** Append nodes or text (as text nodes) to `node`. */
export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Replace what `node` holds with `children`. */
export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

/**
 * A table: `columns` are `{title, cell(row) -> Node|string, className?}`.
 * An empty `rows` shows `empty` in one wide cell.
 */
export function table(columns, rows, empty = "None.") {
  const head = el("tr", {}, columns.map((c) => el("th", { class: c.className }, c.title)));
  const body = rows.length
    ? rows.map((row) => el("tr", {}, columns.map((c) => el("td", { class: c.className }, c.cell(row)))))
    : [el("tr", {}, el("td", { colspan: columns.length, class: "muted" }, empty))];
  return el("table", { class: "grid" }, el("thead", {}, head), el("tbody", {}, body));
}

/** A `<dl>` of label/value pairs. */
export function facts(pairs) {
  return el("dl", { class: "facts" }, pairs.map(([label, value]) => [el("dt", {}, label), el("dd", {}, value)]));
}

/** A link to a hash route, e.g. `link("#/agents/" + id, id)`. */
export function link(href, text, attrs = {}) {
  return el("a", { href, ...attrs }, text);
}
