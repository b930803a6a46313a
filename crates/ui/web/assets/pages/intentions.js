// Intentions: every intention with its precedence (Consul's order), and a
// form that creates or replaces the one between two services: allow or
// deny through `/v1/connect/intentions/exact`, or L7 permissions (JSON,
// Consul's `Permissions` list) written into the destination's
// `service-intentions` config entry, as Consul's UI does (the legacy API
// refuses permissions); each can be deleted.
import { html, useState } from "../vendor/htm-preact-3.1.1.js";
import { useLive, ErrorNote, write, request, enc } from "../lib.js";

// Puts `source`'s permissions into `destination`'s service-intentions
// entry (created if missing; written with check-and-set when it exists).
async function writeL7(dc, source, destination, permissionsText, description) {
  let permissions;
  try {
    permissions = JSON.parse(permissionsText);
  } catch (e) {
    throw { status: 400, text: `Permissions are not JSON: ${e.message}` };
  }
  if (!Array.isArray(permissions) || permissions.length === 0) {
    throw { status: 400, text: "Permissions must be a non-empty JSON list" };
  }
  const path = `/v1/config/service-intentions/${enc(destination)}?dc=${enc(dc)}`;
  const current = await request("GET", path);
  if (current.status !== 200 && current.status !== 404) throw current;
  const entry = current.status === 200
    ? current.data
    : { Kind: "service-intentions", Name: destination, Sources: [] };
  const sources = (entry.Sources || []).filter((s) => s.Name !== source);
  sources.push({ Name: source, Permissions: permissions, Description: description, Type: "consul" });
  // Everything else the entry holds (JWT, Meta, ...) is kept as it is.
  const body = { ...entry, Kind: "service-intentions", Name: destination, Sources: sources };
  // Check-and-set either way: 0 creates only if nobody did meanwhile.
  const cas = `&cas=${current.status === 200 ? entry.ModifyIndex : 0}`;
  const answer = await write("PUT", `/v1/config?dc=${enc(dc)}${cas}`, body);
  if (answer.data === false) throw { status: 409, text: "The entry changed meanwhile: try again" };
}

function exact(source, destination, dc) {
  return `/v1/connect/intentions/exact?source=${enc(source)}&destination=${enc(destination)}&dc=${enc(dc)}`;
}

function IntentionForm({ dc }) {
  const [source, setSource] = useState("");
  const [destination, setDestination] = useState("");
  const [action, setAction] = useState("deny");
  const [description, setDescription] = useState("");
  const [permissions, setPermissions] = useState('[{"Action": "deny", "HTTP": {"PathPrefix": "/admin"}}]');
  const [error, setError] = useState(null);
  const submit = async (event) => {
    event.preventDefault();
    setError(null);
    try {
      if (action === "l7") {
        await writeL7(dc, source, destination, permissions, description);
      } else {
        await write("PUT", exact(source, destination, dc), {
          SourceName: source, DestinationName: destination, SourceType: "consul",
          Action: action, Description: description,
        });
      }
      setSource("");
      setDestination("");
      setDescription("");
    } catch (e) {
      setError(e);
    }
  };
  return html`<form class="editor" id="intention-create" onSubmit=${submit}>
    <h2>Create or replace</h2>
    <div class="row">
      <label>Source <input name="source" required placeholder="web or *" value=${source}
        onInput=${(e) => setSource(e.target.value)} /></label>
      <label>Destination <input name="destination" required placeholder="db or *" value=${destination}
        onInput=${(e) => setDestination(e.target.value)} /></label>
      <label>Action <select name="action" value=${action} onChange=${(e) => setAction(e.target.value)}>
        <option value="allow">allow</option>
        <option value="deny">deny</option>
        <option value="l7">L7 permissions</option>
      </select></label>
    </div>
    ${action === "l7" && html`<label>Permissions (JSON, first match wins; the destination must speak HTTP)
      <textarea name="permissions" rows="4" value=${permissions}
        onInput=${(e) => setPermissions(e.target.value)} /></label>`}
    <label>Description <input name="description" value=${description}
      onInput=${(e) => setDescription(e.target.value)} /></label>
    <button type="submit">Save</button>
    <${ErrorNote} error=${error} />
  </form>`;
}

export function IntentionsPage({ dc }) {
  const { data, error } = useLive(`/v1/connect/intentions?dc=${enc(dc)}`);
  const [problem, setProblem] = useState(null);
  const remove = async (i) => {
    setProblem(null);
    try {
      await write("DELETE", exact(i.SourceName, i.DestinationName, dc));
    } catch (e) {
      setProblem(e);
    }
  };
  return html`<section>
    <h1>Intentions <span class="count">${data ? data.length : ""}</span></h1>
    <${ErrorNote} error=${error || problem} />
    <table class="list" id="intentions">
      <thead><tr><th>Source</th><th>Destination</th><th>Action</th><th>Precedence</th><th>Description</th><th></th></tr></thead>
      <tbody>
        ${(data || []).map((i) => html`<tr data-intention=${`${i.SourceName}>${i.DestinationName}`}>
          <td>${i.SourceName}</td>
          <td>${i.DestinationName}</td>
          <td class=${i.Action === "deny" ? "critical" : "passing"}>
            ${i.Action || (i.Permissions ? `L7: ${i.Permissions.length} permission(s)` : "")}</td>
          <td>${i.Precedence}</td>
          <td>${i.Description}</td>
          <td class="actions"><button type="button" onClick=${() => remove(i)}>Delete</button></td>
        </tr>`)}
      </tbody>
    </table>
    <${IntentionForm} dc=${dc} />
  </section>`;
}
