// Legate's web UI: Preact components written with htm (no build step),
// reading the agent's /v1 API. Lists stay current through blocking queries
// (?index=), as Consul's UI does. Every value is rendered as text.
import { html, render, useState, useEffect } from "./vendor/htm-preact-3.1.1.js";
import { CONFIG, ROOT, Link, token, enc, navigate, useOnce } from "./lib.js";
import { ServicesPage, ServicePage, NodesPage } from "./pages/catalog.js";
import { KvPage } from "./pages/kv.js";
import { IntentionsPage } from "./pages/intentions.js";
import { SettingsPage } from "./pages/settings.js";
import { RoutingPage } from "./pages/routing.js";
import { TopologyPage } from "./pages/topology.js";
import { ConfigPage } from "./pages/config.js";
import { AclsPage } from "./pages/acls.js";
import { ProxyPage } from "./pages/proxy.js";

function NotFound() {
  return html`<section><h1>Page not found</h1>
    <p><${Link} href=${ROOT}>Back to the start</${Link}></p></section>`;
}

// The page for a path under the content path: /<dc>/<section>/<rest>.
function route(path) {
  const rest = path.startsWith(ROOT) ? path.slice(ROOT.length) : "";
  const raw = rest.split("/");
  let parts;
  let tail;
  try {
    parts = raw.filter(Boolean).map(decodeURIComponent);
    tail = raw.slice(2).map(decodeURIComponent).join("/");
  } catch (_) {
    // A malformed escape (`%E0`): not a page of ours.
    return { dc: CONFIG.LocalDatacenter, page: html`<${NotFound} />` };
  }
  if (parts.length === 0) return { redirect: `${ROOT}${enc(CONFIG.LocalDatacenter)}/services` };
  const [dc, section, name, view] = parts;
  if (!section) return { redirect: `${ROOT}${enc(dc)}/services` };
  switch (section) {
    case "services":
      if (name && view === "routing") return { dc, page: html`<${RoutingPage} dc=${dc} name=${name} />` };
      if (name && view === "topology") return { dc, page: html`<${TopologyPage} dc=${dc} name=${name} />` };
      return { dc, page: name ? html`<${ServicePage} dc=${dc} name=${name} />` : html`<${ServicesPage} dc=${dc} />` };
    case "nodes":
      return { dc, page: html`<${NodesPage} dc=${dc} />` };
    case "kv":
      return { dc, page: html`<${KvPage} dc=${dc} rest=${tail} />` };
    case "intentions":
      return { dc, page: html`<${IntentionsPage} dc=${dc} />` };
    case "proxies":
      return { dc, page: html`<${ProxyPage} dc=${dc} id=${name} />` };
    case "config":
      return { dc, page: html`<${ConfigPage} dc=${dc} kind=${name} name=${view} />` };
    case "acls":
      return { dc, page: html`<${AclsPage} dc=${dc} section=${name} id=${view} />` };
    case "settings":
      return { dc, page: html`<${SettingsPage} />` };
    default:
      return { dc, page: html`<${NotFound} />` };
  }
}

// The datacenter switcher: every datacenter the servers know, nearest first;
// choosing one shows its services.
function Datacenters({ dc }) {
  const data = useOnce("/v1/catalog/datacenters");
  const all = data && data.length ? data : [dc];
  const choose = (event) => navigate(`${ROOT}${enc(event.target.value)}/services`);
  return html`<select class="dc" id="datacenter" aria-label="Datacenter" value=${dc} onChange=${choose}>
    ${(all.includes(dc) ? all : [dc, ...all]).map((name) => html`<option value=${name}>${name}</option>`)}
  </select>`;
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
  const at = (section) => `${ROOT}${enc(found.dc)}/${section}`;
  return html`<div class="shell">
    <nav>
      <strong class="brand">Legate</strong>
      <${Link} href=${at("services")}>Services</${Link}>
      <${Link} href=${at("nodes")}>Nodes</${Link}>
      <${Link} href=${at("kv/")}>Key/Value</${Link}>
      <${Link} href=${at("intentions")}>Intentions</${Link}>
      <${Link} href=${at("config")}>Config</${Link}>
      ${CONFIG.ACLsEnabled && html`<${Link} href=${at("acls/tokens")}>ACLs</${Link}>`}
      <${Link} href=${at("settings")}>Settings</${Link}>
      <${Datacenters} dc=${found.dc} />
    </nav>
    ${CONFIG.ACLsEnabled && !token() && html`<p class="banner">ACLs are on:
      <${Link} href=${at("settings")}>log in with a token</${Link}> to see what it may read.</p>`}
    <main>${found.page}</main>
  </div>`;
}

const mount = document.getElementById("app");
mount.textContent = "";
render(html`<${App} />`, mount);
