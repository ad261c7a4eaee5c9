// Talking to the master: a JSON fetch wrapper and a poller.
//
// Every request goes to the page's own origin (the master); under TLS the browser
// presents the operator's certificate itself, nothing to do here.

/** A failed request: `status` is the HTTP status (0 when the master was not reached). */
export class ApiError extends Error {
  constructor(path, status, message) {
    super(`${path}: ${status ? status + " " : ""}${message}`);
    this.status = status;
  }
}

const TIMEOUT_MS = 15000;

/**
 * GET `path` with `params` (null/undefined/"" values left out) and return its JSON.
 * Throws ApiError; the master's errors are `{"error": ..., "status": N}`, whose text is used.
 */
export async function getJSON(path, params = {}) {
  const url = withQuery(path, params);
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), TIMEOUT_MS);
  let response;
  try {
    response = await fetch(url, { headers: { Accept: "application/json" }, signal: controller.signal });
  } catch (err) {
    throw new ApiError(path, 0, controller.signal.aborted ? "timed out" : "master not reachable");
  } finally {
    clearTimeout(timer);
  }
  if (!response.ok) {
    let message = response.statusText;
    try {
      message = (await response.json()).error || message;
    } catch (_) {
      // not JSON: keep the status text
    }
    throw new ApiError(path, response.status, message);
  }
  return response.json();
}

/** `path?k=v&...`, leaving out empty values. */
export function withQuery(path, params = {}) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== "") query.set(key, String(value));
  }
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}

/**
 * Calls `tick()` (async) now and then again `intervalMs` after each call *ends*, so
 * calls never overlap, however slow the master answers. After a failure the wait
 * doubles each time (up to `maxBackoffMs`) and `onError(err)` is told; a success goes
 * back to `intervalMs` and calls `onError(null)`. While the tab is hidden nothing is
 * asked; showing it again asks at once. `stop()` ends it for good (a page left).
 */
export class Poller {
  constructor(tick, { intervalMs = 2000, maxBackoffMs = 60000, onError = () => {} } = {}) {
    this.tick = tick;
    this.intervalMs = intervalMs;
    this.maxBackoffMs = maxBackoffMs;
    this.onError = onError;
    this.delayMs = intervalMs;
    this.timer = null;
    this.running = false; // a tick in flight
    this.stopped = false;
    this.onVisibility = () => {
      if (!document.hidden && !this.running && !this.stopped) this.now();
    };
    document.addEventListener("visibilitychange", this.onVisibility);
  }

  /** Start (or ask right away, e.g. after a filter changed); ignored while a tick runs. */
  now() {
    clearTimeout(this.timer);
    this.timer = null;
    if (this.running || this.stopped) return;
    this.run();
  }

  async run() {
    this.running = true;
    try {
      await this.tick();
      this.delayMs = this.intervalMs;
      this.onError(null);
    } catch (err) {
      this.delayMs = Math.min(this.delayMs * 2, this.maxBackoffMs);
      this.onError(err);
    } finally {
      this.running = false;
    }
    if (!this.stopped && !document.hidden) this.timer = setTimeout(() => this.now(), this.delayMs);
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    document.removeEventListener("visibilitychange", this.onVisibility);
  }
}
