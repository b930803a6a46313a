// Config entries: every entry of each kind this token may read, and one
// entry's raw JSON as the API returns it.
import { html } from "../vendor/htm-preact-3.1.1.js";
import { ROOT, useLive, Link, ErrorNote, enc } from "../lib.js";

export const KINDS = [
  "proxy-defaults", "service-defaults", "service-router", "service-splitter",
  "service-resolver", "service-intentions", "ingress-gateway", "terminating-gateway",
  "mesh", "exported-services", "jwt-provider", "api-gateway", "http-route", "tcp-route",
  "inline-certificate", "sameness-group", "control-plane-request-limit",
];

function KindRows({ dc, kind }) {
  const { data, error } = useLive(`/v1/config/${enc(kind)}?dc=${enc(dc)}`);
  if (error && error.status !== 403) return html`<tr><td colspan="3"><${ErrorNote} error=${error} /></td></tr>`;
  return (data || []).map((entry) => html`<tr data-entry=${`${kind}/${entry.Name}`}>
    <td>${kind}</td>
    <td><${Link} href=${`${ROOT}${enc(dc)}/config/${enc(kind)}/${enc(entry.Name)}`}>${entry.Name}</${Link}></td>
    <td>${entry.ModifyIndex}</td>
  </tr>`);
}

export function ConfigPage({ dc, kind, name }) {
  if (kind && name) return html`<${ConfigEntry} dc=${dc} kind=${kind} name=${name} />`;
  return html`<section>
    <h1>Config entries</h1>
    <table class="list" id="config-entries">
      <thead><tr><th>Kind</th><th>Name</th><th>Modify index</th></tr></thead>
      <tbody>${KINDS.map((k) => html`<${KindRows} dc=${dc} kind=${k} />`)}</tbody>
    </table>
  </section>`;
}

function ConfigEntry({ dc, kind, name }) {
  const { data, error } = useLive(`/v1/config/${enc(kind)}/${enc(name)}?dc=${enc(dc)}`);
  return html`<section>
    <p><${Link} href=${`${ROOT}${enc(dc)}/config`}>← All config entries</${Link}></p>
    <h1>${kind} / ${name}</h1>
    <${ErrorNote} error=${error} />
    ${data && html`<pre class="json" id="config-json">${JSON.stringify(data, null, 2)}</pre>`}
  </section>`;
}
