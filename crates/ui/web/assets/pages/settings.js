// Settings: the ACL token the UI sends (kept in this browser only), checked
// against `/v1/acl/token/self` before it is kept.
import { html, useState } from "../vendor/htm-preact-3.1.1.js";
import { CONFIG, token, setToken, request } from "../lib.js";

export function SettingsPage() {
  const [secret, setSecret] = useState("");
  const [status, setStatus] = useState(token() ? "A token is set." : "No token is set.");
  const login = async (event) => {
    event.preventDefault();
    const previous = token();
    setToken(secret);
    const answer = await request("GET", "/v1/acl/token/self");
    if (answer.status === 200) {
      setStatus(`Logged in: ${answer.data.Description || answer.data.AccessorID}`);
      setSecret("");
    } else {
      setToken(previous);
      setStatus(`Not logged in: ${answer.text || answer.status}`);
    }
  };
  const logout = () => {
    setToken("");
    setStatus("No token is set.");
  };
  return html`<section>
    <h1>Settings</h1>
    <form class="editor" id="login" onSubmit=${login}>
      <h2>ACL token</h2>
      ${!CONFIG.ACLsEnabled && html`<p class="note">ACLs are off on this agent: no token is needed.</p>`}
      <label>Secret ID <input name="token" type="password" autocomplete="off" value=${secret}
        onInput=${(e) => setSecret(e.target.value)} /></label>
      <div class="buttons">
        <button type="submit">Log in</button>
        <button type="button" onClick=${logout}>Log out</button>
      </div>
      <p class="status" role="status">${status}</p>
    </form>
  </section>`;
}
