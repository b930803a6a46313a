// The catalog's pages: services (health, instances, kinds, tags; search and
// a kind filter), one service's instances with their checks and the
// intentions that name it, and nodes with their round-trip time from this
// agent (network coordinates).
import { html, useState } from "../vendor/htm-preact-3.1.1.js";
import { CONFIG, ROOT, useLive, useOnce, Link, ErrorNote, Health, Tags, worst, enc } from "../lib.js";

// The service's dashboard link from `ui_config.dashboard_url_templates`
// (`{{Service.Name}}`, `{{Service.Namespace}}`, `{{Service.Partition}}`,
// `{{Datacenter}}`, each URL-encoded); only http(s) links are shown.
export function dashboardUrl(name, dc) {
  const template = ((CONFIG.UIConfig || {}).dashboard_url_templates || {}).service;
  if (typeof template !== "string" || !/^https?:\/\//i.test(template)) return null;
  const values = {
    "Service.Name": name, "Service.Namespace": "default", "Service.Partition": "default", Datacenter: dc,
  };
  return template.replace(/\{\{\s*([A-Za-z.]+)\s*\}\}/g, (all, key) => (key in values ? enc(values[key]) : all));
}

export function ServicesPage({ dc }) {
  const { data, error } = useLive(`/v1/internal/ui/services?dc=${enc(dc)}`);
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
            <${Link} href=${`${ROOT}${enc(dc)}/services/${enc(s.Name)}`}>${s.Name}</${Link}>
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

// The intentions whose source or destination is `name` (or `*`).
function ServiceIntentions({ dc, name }) {
  const { data } = useLive(`/v1/connect/intentions?dc=${enc(dc)}`);
  const rows = (data || []).filter((i) => [i.SourceName, i.DestinationName].some((n) => n === name || n === "*"));
  return html`<h2>Intentions</h2>
    ${rows.length === 0
      ? html`<p class="note">No intention names ${name}: the default policy decides.</p>`
      : html`<table class="list" id="service-intentions">
        <thead><tr><th>Source</th><th>Destination</th><th>Action</th><th>Precedence</th></tr></thead>
        <tbody>${rows.map((i) => html`<tr data-intention=${`${i.SourceName}>${i.DestinationName}`}>
          <td>${i.SourceName}</td><td>${i.DestinationName}</td>
          <td class=${i.Action === "deny" ? "critical" : "passing"}>${i.Action || `L7: ${(i.Permissions || []).length} permission(s)`}</td>
          <td>${i.Precedence}</td></tr>`)}</tbody>
      </table>`}`;
}

export function ServicePage({ dc, name }) {
  const { data, error } = useLive(`/v1/health/service/${enc(name)}?dc=${enc(dc)}`);
  return html`<section>
    <p><${Link} href=${`${ROOT}${enc(dc)}/services`}>← All services</${Link}></p>
    <h1>${name}</h1>
    <p class="tabs">
      <${Link} href=${`${ROOT}${enc(dc)}/services/${enc(name)}/topology`}>Topology</${Link}>${" · "}
      <${Link} href=${`${ROOT}${enc(dc)}/services/${enc(name)}/routing`}>Routing</${Link}>
      ${dashboardUrl(name, dc) && html`${" · "}<a id="dashboard" href=${dashboardUrl(name, dc)} target="_blank" rel="noopener noreferrer">Open dashboard</a>`}
    </p>
    <${ErrorNote} error=${error} />
    <h2>Instances</h2>
    <table class="list" id="instances">
      <thead><tr><th>ID</th><th>Node</th><th>Address</th><th>Health</th><th>Tags</th></tr></thead>
      <tbody>
        ${(data || []).map((i) => html`<tr>
          <td>${i.Service.Kind === "connect-proxy"
            ? html`<${Link} href=${`${ROOT}${enc(dc)}/proxies/${enc(i.Service.ID)}`}>${i.Service.ID}</${Link}>`
            : i.Service.ID}</td>
          <td>${i.Node.Node}</td>
          <td>${i.Service.Address || i.Node.Address}:${i.Service.Port}</td>
          <td class=${worst(i.Checks)}>
            ${(i.Checks || []).map((c) => html`<div class=${`check ${c.Status}`}>${c.Name}: ${c.Status}</div>`)}
          </td>
          <td><${Tags} tags=${i.Service.Tags} /></td>
        </tr>`)}
      </tbody>
    </table>
    <${ServiceIntentions} dc=${dc} name=${name} />
  </section>`;
}

// Serf's estimate of the round trip between two coordinates, in ms
// (Consul's ComputeDistance: Euclidean distance plus both heights, plus
// both adjustments when that stays positive).
export function rttMs(a, b) {
  if (!a || !b || !a.Vec || !b.Vec || a.Vec.length !== b.Vec.length) return null;
  const sum = a.Vec.reduce((acc, x, i) => acc + (x - b.Vec[i]) ** 2, 0);
  let seconds = Math.sqrt(sum) + a.Height + b.Height;
  const adjusted = seconds + a.Adjustment + b.Adjustment;
  if (adjusted > 0) seconds = adjusted;
  return seconds * 1000;
}

export function NodesPage({ dc }) {
  const { data, error } = useLive(`/v1/internal/ui/nodes?dc=${enc(dc)}`);
  const coordinates = useLive(`/v1/coordinate/nodes?dc=${enc(dc)}`).data || [];
  const self = useOnce("/v1/agent/self");
  const coordOf = (node) => (coordinates.find((c) => c.Node === node) || {}).Coord;
  const here = self && dc === CONFIG.LocalDatacenter ? coordOf(self.Config.NodeName) : null;
  const rtt = (node) => {
    const ms = rttMs(here, coordOf(node));
    return ms === null ? "–" : `${ms.toFixed(2)} ms`;
  };
  return html`<section>
    <h1>Nodes <span class="count">${data ? data.length : ""}</span></h1>
    <${ErrorNote} error=${error} />
    <table class="list" id="nodes">
      <thead><tr><th>Node</th><th>Address</th><th>Health</th><th>Services</th><th class="number">RTT from this agent</th></tr></thead>
      <tbody>
        ${(data || []).map((n) => html`<tr data-node=${n.Node}>
          <td>${n.Node}</td>
          <td>${n.Address}</td>
          <td class=${worst(n.Checks)}>${worst(n.Checks)}</td>
          <td>${n.Services.map((s) => s.Service).join(", ")}</td>
          <td class="number" data-field="rtt">${rtt(n.Node)}</td>
        </tr>`)}
      </tbody>
    </table>
  </section>`;
}
