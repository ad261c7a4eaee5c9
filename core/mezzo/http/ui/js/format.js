// Formatting of the master's values for people. Pure functions, no DOM.

/** Seconds since the epoch (a float, as the API gives times) as local date and time. */
export function time(seconds) {
  if (seconds === null || seconds === undefined || seconds === 0) return "—";
  const d = new Date(seconds * 1000);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** How long ago `seconds` (epoch) was, e.g. "3 min ago". */
export function ago(seconds) {
  if (!seconds) return "";
  const s = Math.max(0, Date.now() / 1000 - seconds);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${(s / 3600).toFixed(1)} h ago`;
  return `${(s / 86400).toFixed(1)} d ago`;
}

/** A number of seconds as a duration, e.g. "3 d 4 h", "12 min", "40 s". */
export function duration(seconds) {
  const s = Math.max(0, Math.floor(Number(seconds) || 0));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

/** A byte count, e.g. "1.5 KiB". */
export function bytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(n);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}

/** A number without float noise: 2 → "2", 0.30000000000000004 → "0.3". */
export function number(x) {
  if (typeof x !== "number") return String(x);
  return String(Math.round(x * 1000) / 1000);
}

/** Megabytes (Mesos' unit for mem and disk) for people: 4096 → "4 GB". */
export function megabytes(mb) {
  return mb >= 1024 ? `${number(mb / 1024)} GB` : `${number(mb)} MB`;
}

const ORDER = ["cpus", "gpus", "mem", "disk", "ports"];

/**
 * Flat resources (`{"cpus": 2.0, "mem": 1024.0, "ports": "[31000-32000]"}`) as one
 * line, e.g. "2 cpus · 1 GB mem · ports [31000-32000]". Empty or missing → "—".
 */
export function resources(flat) {
  if (!flat) return "—";
  const names = Object.keys(flat).sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  const parts = [];
  for (const name of names) {
    const value = flat[name];
    if (typeof value === "number") {
      if (value === 0) continue;
      parts.push(name === "mem" || name === "disk" ? `${megabytes(value)} ${name}` : `${number(value)} ${name}`);
    } else if (value && value !== "[]") {
      parts.push(`${name} ${value}`);
    }
  }
  return parts.length ? parts.join(" · ") : "—";
}

function rank(name) {
  const i = ORDER.indexOf(name);
  return i < 0 ? ORDER.length : i;
}

/** A share in [0, 1] as a percentage. */
export function percent(share) {
  if (share === null || share === undefined) return "—";
  return `${(Number(share) * 100).toFixed(1)} %`;
}

/** `TASK_RUNNING` → "running". */
export function stateName(state) {
  return String(state || "").replace(/^TASK_/, "").toLowerCase();
}

/** A task's time of entering its first/last state of `states` (from its `statuses`). */
export function stateTime(task, states) {
  for (const status of task.statuses || []) {
    if (states.includes(status.state)) return status.timestamp;
  }
  return null;
}
