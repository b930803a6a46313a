// Legate's web UI: Preact components written with htm (no build step),
// reading the agent's /v1 API. Lists stay current through blocking queries
// (?index=), as Consul's UI does. Every value is rendered as text.
import { html, render, useState, useEffect } from "./vendor/htm-preact-3.1.1.js";

const CONFIG = JSON.parse(
  document.querySelector("script[data-consul-ui-config]").textContent
);
const ROOT = CONFIG.ContentPath;

function token() {
  return window.localStorage.getItem("legate:token") || "";
}

// GET a /v1 path; resolves to { data, index } or throws { status, text }.
async function get(path, signal) {
  const headers = {};
  if (token()) headers["X-Consul-Token"] = token();
  const response = await fetch(path, { headers, signal });
  const text = await response.text();
  if (!response.ok) throw { status: response.status, text };
  return {
    data: text ? JSON.parse(text) : null,
    index: response.headers.get("X-Consul-Index"),
  };
}

// The value of a /v1 path, kept current by blocking queries.
function useLive(path) {
  const [state, setState] = useState({ data: null, error: null });
  useEffect(() => {
    const abort = new AbortController();
    let index = null;
    (async () => {
      while (!abort.signal.aborted) {
        const join = path.includes("?") ? "&" : "?";
        const url = index ? `${path}${join}index=${index}&wait=60s` : path;
        try {
          const answer = await get(url, abort.signal);
          // An index that goes backwards starts over (Consul's rule).
          index = answer.index && Number(answer.index) >= Number(index || 0) ? answer.index : null;
          setState({ data: answer.data, error: null });
        } catch (error) {
          if (abort.signal.aborted) return;
          setState((s) => ({ data: s.data, error }));
          index = null;
          await new Promise((r) => setTimeout(r, 1000));
        }
      }
    })();
    return () => abort.abort();
  }, [path]);
  return state;
}

function navigate(href) {
  window.history.pushState(null, "", href);
  window.dispatchEvent(new Event("popstate"));
}

function Link({ href, children, ...rest }) {
  const click = (event) => {
    if (event.button !== 0 || event.metaKey || event.ctrlKey) return;
    event.preventDefault();
    navigate(href);
  };
  return html`<a href=${href} onClick=${click} ...${rest}>${children}</a>`;
}

function ErrorNote({ error }) {
  if (!error) return null;
  const text = error.status === 403
    ? "This token may not read this. Set a token in Settings."
    : `Error ${error.status || ""}: ${error.text || error.message || error}`;
  return html`<p class="error" role="alert">${text}</p>`;
}

function Health({ passing, warning, critical }) {
  return html`<span class="health">
    ${passing > 0 && html`<span class="passing" title="passing">✔ ${passing}</span>`}
    ${warning > 0 && html`<span class="warning" title="warning">! ${warning}</span>`}
    ${critical > 0 && html`<span class="critical" title="critical">✖ ${critical}</span>`}
  </span>`;
}

function Tags({ tags }) {
  return html`<span class="tags">${(tags || []).map((t) => html`<span class="tag">${t}</span>`)}</span>`;
}

function ServicesPage({ dc }) {
  const { data, error } = useLive(`/v1/internal/ui/services?dc=${encodeURIComponent(dc)}`);
  const [search, setSearch] = useState("");
  const [kind, setKind] = useState("all");
  const rows = (data || []).filter((s) => {
    const text = search.toLowerCase();
    const matches = !text || s.Name.toLowerCase().includes(text)
      || (s.Tags || []).some((t) => t.toLowerCase().includes(text));
    const kindMatches = kind === "all" || (kind === "service" ? !s.Kind : s.Kind === kind);
    return matches && kindMatches;
  });
  return html`<section>
    <h1>Services <span class="count">${data ? data.length : ""}</span></h1>
    <div class="filters">
      <input type="search" placeholder="Search by name or tag" aria-label="Search"
        value=${search} onInput=${(e) => setSearch(e.target.value)} />
      <select aria-label="Kind" value=${kind} onChange=${(e) => setKind(e.target.value)}>
        <option value="all">All kinds</option>
        <option value="service">Services</option>
        <option value="connect-proxy">Sidecar proxies</option>
        <option value="mesh-gateway">Mesh gateways</option>
        <option value="terminating-gateway">Terminating gateways</option>
        <option value="ingress-gateway">Ingress gateways</option>
      </select>
    </div>
    <${ErrorNote} error=${error} />
    <table class="list" id="services">
      <thead><tr><th>Service</th><th>Health</th><th>Instances</th><th>Tags</th></tr></thead>
      <tbody>
        ${rows.map((s) => html`<tr data-service=${s.Name}>
          <td>
            <${Link} href=${`${ROOT}${dc}/services/${encodeURIComponent(s.Name)}`}>${s.Name}</${Link}>
            ${s.Kind && html` <span class="badge">${s.Kind}</span>`}
            ${s.ConnectedWithProxy && html` <span class="badge mesh">in the mesh</span>`}
          </td>
          <td><${Health} passing=${s.ChecksPassing} warning=${s.ChecksWarning} critical=${s.ChecksCritical} /></td>
          <td>${s.InstanceCount}</td>
          <td><${Tags} tags=${s.Tags} /></td>
        </tr>`)}
      </tbody>
    </table>
  </section>`;
}

function worst(checks) {
  const order = ["passing", "warning", "critical", "maintenance"];
  return (checks || []).reduce((w, c) => (order.indexOf(c.Status) > order.indexOf(w) ? c.Status : w), "passing");
}

function ServicePage({ dc, name }) {
  const { data, error } = useLive(
    `/v1/health/service/${encodeURIComponent(name)}?dc=${encodeURIComponent(dc)}`
  );
  return html`<section>
    <p><${Link} href=${`${ROOT}${dc}/services`}>← All services</${Link}></p>
    <h1>${name}</h1>
    <${ErrorNote} error=${error} />
    <h2>Instances</h2>
    <table class="list" id="instances">
      <thead><tr><th>ID</th><th>Node</th><th>Address</th><th>Health</th><th>Tags</th></tr></thead>
      <tbody>
        ${(data || []).map((i) => html`<tr>
          <td>${i.Service.ID}</td>
          <td><${Link} href=${`${ROOT}${dc}/nodes/${encodeURIComponent(i.Node.Node)}`}>${i.Node.Node}</${Link}></td>
          <td>${i.Service.Address || i.Node.Address}:${i.Service.Port}</td>
          <td class=${worst(i.Checks)}>
            ${(i.Checks || []).map((c) => html`<div class=${`check ${c.Status}`}>${c.Name}: ${c.Status}</div>`)}
          </td>
          <td><${Tags} tags=${i.Service.Tags} /></td>
        </tr>`)}
      </tbody>
    </table>
  </section>`;
}

function NodesPage({ dc }) {
  const { data, error } = useLive(`/v1/internal/ui/nodes?dc=${encodeURIComponent(dc)}`);
  return html`<section>
    <h1>Nodes <span class="count">${data ? data.length : ""}</span></h1>
    <${ErrorNote} error=${error} />
    <table class="list" id="nodes">
      <thead><tr><th>Node</th><th>Address</th><th>Health</th><th>Services</th></tr></thead>
      <tbody>
        ${(data || []).map((n) => html`<tr data-node=${n.Node}>
          <td>${n.Node}</td>
          <td>${n.Address}</td>
          <td class=${worst(n.Checks)}>${worst(n.Checks)}</td>
          <td>${n.Services.map((s) => s.Service).join(", ")}</td>
        </tr>`)}
      </tbody>
    </table>
  </section>`;
}

function NotFound() {
  return html`<section><h1>Page not found</h1>
    <p><${Link} href=${ROOT}>Back to the start</${Link}></p></section>`;
}

// The page for a path under the content path: [dc, section, ...rest].
function route(path) {
  const rest = path.startsWith(ROOT) ? path.slice(ROOT.length) : "";
  const parts = rest.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts.length === 0) return { redirect: `${ROOT}${CONFIG.LocalDatacenter}/services` };
  const [dc, section, name] = parts;
  if (section === "services" && !name) return { dc, page: html`<${ServicesPage} dc=${dc} />` };
  if (section === "services") return { dc, page: html`<${ServicePage} dc=${dc} name=${name} />` };
  if (section === "nodes") return { dc, page: html`<${NodesPage} dc=${dc} />` };
  return { dc, page: html`<${NotFound} />` };
}

function App() {
  const [path, setPath] = useState(window.location.pathname);
  useEffect(() => {
    const moved = () => setPath(window.location.pathname);
    window.addEventListener("popstate", moved);
    return () => window.removeEventListener("popstate", moved);
  }, []);
  const found = route(path);
  useEffect(() => {
    if (found.redirect) {
      window.history.replaceState(null, "", found.redirect);
      setPath(found.redirect);
    }
  }, [found.redirect]);
  if (found.redirect) return null;
  const dc = found.dc;
  return html`<div class="shell">
    <nav>
      <strong class="brand">Legate</strong>
      <${Link} href=${`${ROOT}${dc}/services`}>Services</${Link}>
      <${Link} href=${`${ROOT}${dc}/nodes`}>Nodes</${Link}>
      <span class="dc" title="datacenter">${dc}</span>
    </nav>
    <main>${found.page}</main>
  </div>`;
}

const mount = document.getElementById("app");
mount.textContent = "";
render(html`<${App} />`, mount);
