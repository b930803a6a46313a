// One local proxy: the resources of its last xDS configuration (names,
// versions, sizes — never their content) and its recent pushes with the
// proxy's answer, from /v1/internal/ui/proxy/:id (refreshed every second).
import { html } from "../vendor/htm-preact-3.1.1.js";
import { ROOT, useLive, Link, ErrorNote, enc } from "../lib.js";
import { bytes } from "./topology.js";

const short = (typeUrl) => typeUrl.split(".").pop();

export function ProxyPage({ dc, id }) {
  const { data, error } = useLive(`/v1/internal/ui/proxy/${enc(id)}`);
  const status = data || { Resources: [], Pushes: [] };
  return html`<section>
    <p><${Link} href=${`${ROOT}${enc(dc)}/services`}>← All services</${Link}></p>
    <h1>Proxy ${id}</h1>
    <${ErrorNote} error=${error} />
    <h2>Configuration <span class="count">${status.Resources.length} resources</span></h2>
    <table class="list" id="proxy-resources">
      <thead><tr><th>Type</th><th>Name</th><th>Version</th><th class="number">Size</th></tr></thead>
      <tbody>${status.Resources.map((r) => html`<tr>
        <td>${short(r.TypeUrl)}</td><td>${r.Name}</td><td><code>${r.Version}</code></td>
        <td class="number">${bytes(r.Bytes)}</td></tr>`)}</tbody>
    </table>
    <h2>Recent pushes</h2>
    <table class="list" id="proxy-pushes">
      <thead><tr><th>Sent</th><th>Type</th><th>Nonce</th><th class="number">Resources</th>
        <th class="number">Removed</th><th>Answer</th></tr></thead>
      <tbody>${status.Pushes.map((p) => html`<tr data-status=${p.Status}>
        <td>${new Date(p.SentAtMs).toLocaleTimeString()}</td><td>${short(p.TypeUrl)}</td><td>${p.Nonce}</td>
        <td class="number">${p.Resources}</td><td class="number">${p.Removed}</td>
        <td class=${p.Status === "nacked" ? "critical" : p.Status === "acked" ? "passing" : ""}>
          ${p.Status}${p.Error ? `: ${p.Error}` : ""}</td></tr>`)}</tbody>
    </table>
  </section>`;
}
