// What every page shares: the agent's settings, the token, requests to the
// /v1 API, values kept current by blocking queries, links that move
// without reloading, and small display pieces. Every value is rendered as
// text (Preact escapes it); nothing is ever written as HTML.
import { html, useState, useEffect } from "./vendor/htm-preact-3.1.1.js";

export const CONFIG = JSON.parse(
  document.querySelector("script[data-consul-ui-config]").textContent
);
export const ROOT = CONFIG.ContentPath;
const TOKEN_KEY = "legate:token";

export function token() {
  return window.localStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(secret) {
  if (secret) window.localStorage.setItem(TOKEN_KEY, secret);
  else window.localStorage.removeItem(TOKEN_KEY);
  window.dispatchEvent(new Event("legate:token"));
}

// Any request to the API; resolves to { status, data, text, index }.
export async function request(method, path, body, signal) {
  const headers = {};
  if (token()) headers["X-Consul-Token"] = token();
  const init = { method, headers, signal };
  if (body !== undefined) {
    init.body = typeof body === "string" ? body : JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let data = null;
  if (response.ok && text) {
    try { data = JSON.parse(text); } catch (_) { data = text; }
  }
  return { status: response.status, data, text, index: response.headers.get("X-Consul-Index") };
}

// A write: resolves to the answer, throws { status, text } when refused.
export async function write(method, path, body) {
  const answer = await request(method, path, body);
  if (answer.status >= 400) throw answer;
  return answer;
}

// The value of a /v1 path, kept current by blocking queries. `missing` is
// the value a 404 stands for (an empty KV folder), else a 404 is an error.
export function useLive(path, missing) {
  const [state, setState] = useState({ data: null, error: null });
  const [tokenChanges, setTokenChanges] = useState(0);
  useEffect(() => {
    const changed = () => setTokenChanges((n) => n + 1);
    window.addEventListener("legate:token", changed);
    return () => window.removeEventListener("legate:token", changed);
  }, []);
  useEffect(() => {
    if (!path) return undefined;
    const abort = new AbortController();
    let index = null;
    (async () => {
      while (!abort.signal.aborted) {
        const join = path.includes("?") ? "&" : "?";
        const url = index ? `${path}${join}index=${index}&wait=60s` : path;
        let answer;
        try {
          answer = await request("GET", url, undefined, abort.signal);
        } catch (error) {
          if (abort.signal.aborted) return;
          answer = { status: 0, text: String(error) };
        }
        const ok = answer.status === 200 || (answer.status === 404 && missing !== undefined);
        if (ok) {
          // An index that goes backwards starts over (Consul's rule).
          const next = Number(answer.index || 0);
          index = next > 0 && next >= Number(index || 0) ? answer.index : null;
          setState({ data: answer.status === 404 ? missing : answer.data, error: null });
          // Without an index to block on, ask again after a pause, not at once.
          if (!index) await new Promise((r) => setTimeout(r, 1000));
        } else {
          setState((s) => ({ data: s.data, error: answer }));
          index = null;
          await new Promise((r) => setTimeout(r, 1000));
        }
      }
    })();
    return () => abort.abort();
  }, [path, tokenChanges]);
  return state;
}

// The value of a /v1 path read once (lists that rarely change and carry
// no index to block on, such as the datacenters).
export function useOnce(path) {
  const [data, setData] = useState(null);
  useEffect(() => {
    const abort = new AbortController();
    request("GET", path, undefined, abort.signal)
      .then((answer) => { if (answer.status === 200) setData(answer.data); })
      .catch(() => {});
    return () => abort.abort();
  }, [path]);
  return data;
}

export function navigate(href) {
  window.history.pushState(null, "", href);
  window.dispatchEvent(new Event("popstate"));
}

export function Link({ href, children, ...rest }) {
  const click = (event) => {
    if (event.button !== 0 || event.metaKey || event.ctrlKey) return;
    event.preventDefault();
    navigate(href);
  };
  return html`<a href=${href} onClick=${click} ...${rest}>${children}</a>`;
}

export function ErrorNote({ error }) {
  if (!error) return null;
  let text = `Error ${error.status || ""}: ${error.text || ""}`;
  if (error.status === 403) {
    text = CONFIG.ACLsEnabled && !token()
      ? "ACLs are on: log in with a token in Settings to see this."
      : `This token may not do this (${error.text}).`;
  }
  return html`<p class="error" role="alert">${text}</p>`;
}

export function Health({ passing, warning, critical }) {
  return html`<span class="health">
    ${passing > 0 && html`<span class="passing" title="passing">✔ ${passing}</span>`}
    ${warning > 0 && html`<span class="warning" title="warning">! ${warning}</span>`}
    ${critical > 0 && html`<span class="critical" title="critical">✖ ${critical}</span>`}
  </span>`;
}

export function Tags({ tags }) {
  return html`<span class="tags">${(tags || []).map((t) => html`<span class="tag">${t}</span>`)}</span>`;
}

export function worst(checks) {
  const order = ["passing", "warning", "critical", "maintenance"];
  return (checks || []).reduce(
    (w, c) => (order.indexOf(c.Status) > order.indexOf(w) ? c.Status : w),
    "passing"
  );
}

// A path segment or query value, encoded.
export const enc = encodeURIComponent;
