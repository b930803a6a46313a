// ACLs: tokens, policies and roles as this token may list them, and one
// of each with its details (a token's secret is never shown in the list).
import { html } from "../vendor/htm-preact-3.1.1.js";
import { ROOT, useLive, Link, ErrorNote, enc } from "../lib.js";

const SECTIONS = {
  tokens: { list: "/v1/acl/tokens", one: "/v1/acl/token/", id: "AccessorID", title: (t) => t.Description || t.AccessorID },
  policies: { list: "/v1/acl/policies", one: "/v1/acl/policy/", id: "ID", title: (p) => p.Name },
  roles: { list: "/v1/acl/roles", one: "/v1/acl/role/", id: "ID", title: (r) => r.Name },
};

function names(list) {
  return (list || []).map((x) => x.Name || x.ServiceName || x.NodeName || x.ID).join(", ");
}

function Tabs({ dc, at }) {
  return html`<p class="tabs">${Object.keys(SECTIONS).map((k, i) => html`${i > 0 && " · "}${k === at
    ? html`<strong>${k}</strong>`
    : html`<${Link} href=${`${ROOT}${enc(dc)}/acls/${k}`}>${k}</${Link}>`}`)}</p>`;
}

export function AclsPage({ dc, section, id }) {
  const at = SECTIONS[section] ? section : "tokens";
  if (id) return html`<${AclItem} dc=${dc} section=${at} id=${id} />`;
  const spec = SECTIONS[at];
  const { data, error } = useLive(`${spec.list}?dc=${enc(dc)}`);
  return html`<section>
    <h1>ACL ${at} <span class="count">${data ? data.length : ""}</span></h1>
    <${Tabs} dc=${dc} at=${at} />
    <${ErrorNote} error=${error} />
    <table class="list" id="acl-list">
      <thead><tr><th>Name</th><th>Details</th></tr></thead>
      <tbody>
        ${(data || []).map((x) => html`<tr data-id=${x[spec.id]}>
          <td><${Link} href=${`${ROOT}${enc(dc)}/acls/${at}/${enc(x[spec.id])}`}>${spec.title(x)}</${Link}></td>
          <td>${at === "tokens"
            ? `policies: ${names(x.Policies) || "none"}; roles: ${names(x.Roles) || "none"}${x.Local ? "; local" : ""}`
            : x.Description}</td>
        </tr>`)}
      </tbody>
    </table>
  </section>`;
}

function AclItem({ dc, section, id }) {
  const spec = SECTIONS[section];
  const { data, error } = useLive(`${spec.one}${enc(id)}?dc=${enc(dc)}`);
  const shown = data && section === "tokens" ? { ...data, SecretID: "(hidden)" } : data;
  return html`<section>
    <p><${Link} href=${`${ROOT}${enc(dc)}/acls/${section}`}>← All ${section}</${Link}></p>
    <h1>${data ? spec.title(data) : id}</h1>
    <${ErrorNote} error=${error} />
    ${shown && section === "policies" && html`<h2>Rules</h2><pre class="json" id="acl-rules">${data.Rules}</pre>`}
    ${shown && html`<pre class="json" id="acl-json">${JSON.stringify(shown, null, 2)}</pre>`}
  </section>`;
}
