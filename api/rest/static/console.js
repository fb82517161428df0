"use strict";
// The Titen console: plain DOM over the REST API and the event stream, no framework, no build.
// Data is only ever written as text (never as HTML). The key stays in this tab's sessionStorage
// and travels only in the Authorization header; the stream uses a ticket, as EventSource needs.
(() => {
  const STORED_KEY = "titen.console.key";
  const LEASE_PAGE = 100; // rows per page of leases: paged, so 10,000 leases cost one page
  const HANDOFFS_SHOWN = 500;
  const TAIL_KEPT = 1000; // events kept in memory for the filter
  const TAIL_SHOWN = 200; // rows of the tail in the page
  const LEASE_POLL_MS = 5000; // releases are not published: the page re-reads its leases
  const WEBHOOK_POLL_MS = 15000;
  const REFRESH_DELAY_MS = 250; // events coalesce into one re-read per delay
  const TYPES = document.body.dataset.eventTypes.split(",");

  const $ = (selector, root = document) => root.querySelector(selector);
  const state = {
    key: null,
    me: null,
    leaseCursors: [null],
    leasePage: 0,
    leaseNext: null,
    leases: [],
    leaseReads: 0,
    leaseFilters: {},
    events: [],
    lastCursor: null,
    source: null,
    dropped: false,
    retries: 0,
    timers: [],
    pending: new Map(),
    unshown: [],
  };

  class Refused extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(method, path, params = {}) {
    const url = new URL(path, location.origin);
    for (const [name, value] of Object.entries(params)) {
      if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
    }
    let response;
    try {
      response = await fetch(url, {
        method,
        headers: { authorization: `Bearer ${state.key}` },
        cache: "no-store",
        credentials: "omit",
      });
    } catch {
      throw new Refused(0, "The service does not answer.");
    }
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    if (!response.ok) {
      const said = body && body.error && body.error.message;
      throw new Refused(response.status, said || `The service answered ${response.status}.`);
    }
    return body.data;
  }

  function element(tag, text, className) {
    const made = document.createElement(tag);
    if (text !== undefined && text !== null) made.textContent = String(text);
    if (className) made.className = className;
    return made;
  }

  function say(target, message) {
    target.textContent = message || "";
    target.hidden = !message;
  }

  function regionError(region, message) {
    say($(`#${region} .error`), message);
  }

  // Coalesces bursts (100 events a second) into one call per delay.
  function soon(name, run) {
    if (state.pending.has(name)) return;
    state.pending.set(
      name,
      setTimeout(() => {
        state.pending.delete(name);
        run();
      }, REFRESH_DELAY_MS),
    );
  }

  function every(ms, run) {
    state.timers.push(setInterval(run, ms));
  }

  function duration(ms) {
    const seconds = Math.max(0, Math.floor(ms / 1000));
    const h = Math.floor(seconds / 3600);
    const m = Math.floor((seconds % 3600) / 60);
    const s = seconds % 60;
    if (h) return `${h}h ${m}m`;
    if (m) return `${m}m ${s}s`;
    return `${s}s`;
  }

  // ---- opening with a key ----

  async function open(key) {
    for (const timer of state.timers) clearInterval(timer);
    state.timers = [];
    if (state.source) state.source.close();
    state.source = null;
    Object.assign(state, { events: [], unshown: [], lastCursor: null, leaseCursors: [null], leasePage: 0 });
    state.key = key;
    say($("#page-error"), "");
    try {
      state.me = await api("GET", "/v1/me");
    } catch (refused) {
      state.key = null;
      sessionStorage.removeItem(STORED_KEY);
      say($("#page-error"), refused.message);
      return;
    }
    sessionStorage.setItem(STORED_KEY, key);
    $("#api-key").value = "";
    $("#forget").hidden = false;
    const me = state.me;
    const sees = me.reads_organization ? "the organization's leases and handoffs" : "its own leases and inbox";
    const may = me.releases_any_lease ? "; it may release any lease" : "";
    $("#who").textContent = `${me.principal} (${me.role}) of ${me.organization}: sees ${sees}${may}.`;
    $("#handoffs .scope").textContent = me.reads_organization
      ? "Every pending handoff of the organization, by recipient."
      : "Your inbox: pending handoffs addressed to this key.";
    $("#console").hidden = false;
    loadLeases();
    loadHandoffs();
    loadWebhooks();
    startStream();
    every(1000, tick);
    every(LEASE_POLL_MS, loadLeases);
    every(WEBHOOK_POLL_MS, loadWebhooks);
  }

  function forget() {
    sessionStorage.removeItem(STORED_KEY);
    location.reload();
  }

  // ---- leases ----

  async function loadLeases() {
    const params = { ...state.leaseFilters, limit: LEASE_PAGE, cursor: state.leaseCursors[state.leasePage] };
    const asked = (state.leaseReads += 1);
    try {
      const data = await api("GET", "/v1/leases", params);
      if (asked !== state.leaseReads) return; // a later read was asked for: it draws
      state.leases = data.leases;
      state.leaseNext = data.next_cursor;
      regionError("leases", "");
    } catch (refused) {
      regionError("leases", refused.message);
      return;
    }
    renderLeases();
  }

  function renderLeases() {
    const rows = document.createDocumentFragment();
    for (const lease of state.leases) rows.append(leaseRow(lease));
    $("#leases tbody").replaceChildren(rows);
    $("#leases-next").disabled = !state.leaseNext;
    $("#leases-first").disabled = state.leasePage === 0;
    const shown = state.leases.length;
    $("#leases-page").textContent = `Page ${state.leasePage + 1}: ${shown} lease${shown === 1 ? "" : "s"}.`;
    tick();
  }

  function leaseRow(lease) {
    const row = element("tr");
    row.dataset.leaseId = lease.lease_id;
    row.dataset.expiresAt = lease.expires_at;
    row.append(
      element("td", `${lease.resource_type}/${lease.resource_id}`, "resource"),
      element("td", lease.holder, "holder"),
      element("td", lease.purpose, "purpose"),
      element("td", lease.fencing_token, "token"),
      element("td", "", "expiry"),
    );
    const actions = element("td", null, "actions");
    const me = state.me;
    if (me.releases_any_lease || lease.holder === me.principal) {
      const button = element("button", "Release");
      button.type = "button";
      button.addEventListener("click", () => release(lease));
      actions.append(button);
    }
    row.append(actions);
    return row;
  }

  async function release(lease) {
    const what = `${lease.resource_type}/${lease.resource_id}`;
    if (!confirm(`Release the lease on ${what} held by ${lease.holder}?`)) return;
    try {
      await api("DELETE", `/v1/leases/${encodeURIComponent(lease.lease_id)}`);
      regionError("leases", "");
    } catch (refused) {
      regionError("leases", refused.message);
    }
    loadLeases();
  }

  function tick() {
    const now = Date.now();
    for (const row of document.querySelectorAll("#leases tbody tr")) {
      const left = Date.parse(row.dataset.expiresAt) - now;
      const expired = left <= 0;
      row.classList.toggle("expired", expired);
      $(".expiry", row).textContent = expired ? "expired" : duration(left);
    }
    for (const age of document.querySelectorAll("#handoffs [data-created-at]")) {
      age.textContent = `${duration(now - Date.parse(age.dataset.createdAt))} ago`;
    }
  }

  function filterLeases(submitted) {
    submitted.preventDefault();
    state.leaseFilters = {
      resource_type: $("#lease-type").value.trim(),
      holder: $("#lease-holder").value.trim(),
    };
    firstLeases();
  }

  function firstLeases() {
    state.leaseCursors = [null];
    state.leasePage = 0;
    loadLeases();
  }

  function olderLeases() {
    if (!state.leaseNext) return;
    state.leaseCursors[state.leasePage + 1] = state.leaseNext;
    state.leasePage += 1;
    loadLeases();
  }

  // ---- handoffs ----

  async function loadHandoffs() {
    const params = { limit: HANDOFFS_SHOWN };
    if (state.me.reads_organization) params.scope = "organization";
    let data;
    try {
      data = await api("GET", "/v1/handoffs", params);
      regionError("handoffs", "");
    } catch (refused) {
      regionError("handoffs", refused.message);
      return;
    }
    const groups = new Map();
    for (const handoff of data.handoffs) {
      if (!groups.has(handoff.to_principal)) groups.set(handoff.to_principal, []);
      groups.get(handoff.to_principal).push(handoff);
    }
    const shown = document.createDocumentFragment();
    if (!groups.size) shown.append(element("p", "No pending handoffs.", "note"));
    for (const recipient of [...groups.keys()].sort()) {
      const group = element("section");
      group.setAttribute("aria-label", `Handoffs to ${recipient}`);
      group.append(element("h3", `To ${recipient} (${groups.get(recipient).length})`));
      const list = element("ul");
      for (const handoff of groups.get(recipient)) list.append(handoffItem(handoff));
      group.append(list);
      shown.append(group);
    }
    if (data.next_cursor) shown.append(element("p", `The oldest ${HANDOFFS_SHOWN} are shown.`, "note"));
    $("#handoffs .groups").replaceChildren(shown);
    tick();
  }

  function handoffItem(handoff) {
    const item = element("li");
    item.dataset.handoffId = handoff.handoff_id;
    item.append(
      element("span", `from ${handoff.from_principal}`, "from"),
      document.createTextNode(" · "),
      element("span", handoff.subject_id, "subject"),
      document.createTextNode(" · "),
      element("span", handoff.message === null ? "(no message)" : handoff.message, "message"),
      document.createTextNode(" · "),
    );
    const age = element("span", "", "age");
    age.dataset.createdAt = handoff.created_at;
    item.append(age);
    return item;
  }

  // ---- the event stream and the tail ----

  async function startStream() {
    if (state.source) state.source.close();
    let ticket;
    try {
      ticket = (await api("POST", "/v1/events/tickets")).ticket;
    } catch (refused) {
      streamStatus(`The event stream is down (${refused.message}); reconnecting…`, true);
      retryStream();
      return;
    }
    const query = new URLSearchParams({ after: state.lastCursor || "latest", ticket });
    const source = new EventSource(`/v1/events/stream?${query}`);
    state.source = source;
    source.onopen = () => {
      streamStatus(state.dropped ? "Reconnected: live again." : "Live: following the event log.", false);
      state.dropped = false;
      state.retries = 0;
      if (state.lastCursor) reloadAll(); // what changed while it was down
    };
    source.onerror = () => {
      state.dropped = true;
      if (source.readyState === EventSource.CLOSED) {
        streamStatus("The event stream dropped; reconnecting with a new ticket…", true);
        retryStream();
      } else {
        streamStatus("The event stream dropped; reconnecting…", true);
      }
    };
    for (const type of TYPES) source.addEventListener(type, received);
  }

  function retryStream() {
    const wait = Math.min(30000, 1000 * 2 ** state.retries);
    state.retries += 1;
    setTimeout(startStream, wait);
  }

  function streamStatus(message, down) {
    const shown = $("#stream-status");
    shown.textContent = message;
    shown.classList.toggle("down", down);
  }

  function reloadAll() {
    soon("leases", loadLeases);
    soon("handoffs", loadHandoffs);
  }

  function received(message) {
    const event = JSON.parse(message.data);
    state.lastCursor = message.lastEventId || event.cursor;
    state.events.push(event);
    if (state.events.length > TAIL_KEPT) state.events.splice(0, state.events.length - TAIL_KEPT);
    state.unshown.push(event);
    soon("tail", addToTail);
    if (event.type.startsWith("lease.")) soon("leases", loadLeases);
    else soon("handoffs", loadHandoffs);
  }

  // New events go on top of the rows already drawn, and the oldest beyond TAIL_SHOWN leave:
  // the work per event is one row, however fast they come.
  function addToTail() {
    const wanted = $("#event-type").value;
    const rows = document.createDocumentFragment();
    const fresh = state.unshown.filter((event) => !wanted || event.type === wanted).slice(-TAIL_SHOWN);
    state.unshown = [];
    for (let i = fresh.length - 1; i >= 0; i -= 1) rows.append(eventRow(fresh[i]));
    const tail = $("#events .tail");
    tail.prepend(rows);
    while (tail.childElementCount > TAIL_SHOWN) tail.lastElementChild.remove();
  }

  // A new filter draws the tail again from the events kept.
  function renderTail() {
    state.unshown = [];
    const wanted = $("#event-type").value;
    const rows = document.createDocumentFragment();
    let shown = 0;
    for (let i = state.events.length - 1; i >= 0 && shown < TAIL_SHOWN; i -= 1) {
      const event = state.events[i];
      if (wanted && event.type !== wanted) continue;
      rows.append(eventRow(event));
      shown += 1;
    }
    $("#events .tail").replaceChildren(rows);
  }

  function eventRow(event) {
    const row = element("li");
    row.dataset.type = event.type;
    const time = element("time", event.time, "time");
    time.dateTime = event.time;
    row.append(element("span", event.type, "type"), document.createTextNode(" "), time);
    row.append(document.createTextNode(" "), element("span", about(event), "about"));
    return row;
  }

  function about(event) {
    const data = event.data;
    if (event.type.startsWith("lease.")) return `${data.resource_type}/${data.resource_id} by ${data.holder}`;
    return `${data.subject_id}: ${data.from_principal} → ${data.to_principal}`;
  }

  // ---- history ----

  const ENDED = {
    released: "released",
    released_by_operator: "released by an operator",
    superseded: "superseded",
    replaced_after_expiry: "expired",
  };
  const MOST_TERMS = 5000;

  async function showHistory(submitted) {
    submitted.preventDefault();
    const resource = { resource_type: $("#history-type").value.trim(), resource_id: $("#history-id").value.trim() };
    const terms = [];
    let cursor = null;
    try {
      do {
        const data = await api("GET", "/v1/audit/leases", { ...resource, limit: 500, cursor });
        terms.push(...data.terms);
        cursor = data.next_cursor;
      } while (cursor && terms.length < MOST_TERMS);
      regionError("history", "");
    } catch (refused) {
      regionError("history", refused.message);
      $("#history .timeline").replaceChildren();
      return;
    }
    const rows = document.createDocumentFragment();
    if (!terms.length) rows.append(element("li", "No lease was ever acquired on this resource."));
    terms.forEach((term, i) => rows.append(termRow(term, terms[i + 1])));
    $("#history .timeline").replaceChildren(rows);
  }

  function termRow(term, next) {
    const row = element("li");
    row.dataset.leaseId = term.lease_id;
    let until = term.expires_at;
    let how;
    if (term.ended === null) {
      how = Date.parse(term.expires_at) <= Date.now() ? "expired, not replaced" : "held now";
    } else {
      how = ENDED[term.ended] || term.ended;
      if (term.released_at) until = term.released_at;
      else if (term.ended === "superseded" && next) until = next.acquired_at;
      if (term.released_by) how += ` by ${term.released_by}`;
    }
    row.append(
      element("span", `#${term.fencing_token}`, "token"),
      document.createTextNode(" "),
      element("span", term.holder, "holder"),
      document.createTextNode(": "),
      element("time", term.acquired_at, "time"),
      document.createTextNode(" → "),
      element("time", until, "time"),
      document.createTextNode(" "),
      element("span", how, "ended"),
    );
    return row;
  }

  // ---- webhooks ----

  async function loadWebhooks() {
    let hooks;
    try {
      hooks = (await api("GET", "/v1/webhooks", { limit: 100 })).webhooks;
      const deliveries = await Promise.all(
        hooks.map((hook) => api("GET", `/v1/webhooks/${encodeURIComponent(hook.webhook_id)}/deliveries`, { limit: 5 })),
      );
      hooks.forEach((hook, i) => (hook.deliveries = deliveries[i].deliveries));
      regionError("webhooks", "");
    } catch (refused) {
      regionError("webhooks", refused.message);
      return;
    }
    const shown = document.createDocumentFragment();
    if (!hooks.length) shown.append(element("p", "No subscriptions.", "note"));
    for (const hook of hooks) {
      const item = element("section");
      item.setAttribute("aria-label", `Webhook ${hook.url}`);
      item.append(element("h3", `${hook.url} (${hook.status})`));
      const target = hook.to_principal ? ` to ${hook.to_principal}` : "";
      item.append(element("p", `${hook.types.join(", ")}${target}`, "note"));
      const list = element("ul");
      if (!hook.deliveries.length) list.append(element("li", "No deliveries yet."));
      for (const attempt of hook.deliveries) {
        const failed = attempt.error !== null || attempt.status_code === null || attempt.status_code >= 300;
        const result = attempt.error || `HTTP ${attempt.status_code}`;
        const text = `${attempt.attempted_at} attempt ${attempt.attempt}: ${result} (${attempt.duration_ms} ms)`;
        list.append(element("li", text, failed ? "failed" : ""));
      }
      item.append(list);
      shown.append(item);
    }
    $("#webhooks .subscriptions").replaceChildren(shown);
  }

  // ---- wiring ----

  for (const type of TYPES) $("#event-type").append(element("option", type));
  $("#event-type").value = "";
  $("#event-type").addEventListener("change", renderTail);
  $("#open-form").addEventListener("submit", (submitted) => {
    submitted.preventDefault();
    const key = $("#api-key").value.trim();
    if (key) open(key);
  });
  $("#forget").addEventListener("click", forget);
  $("#lease-filter").addEventListener("submit", filterLeases);
  $("#leases-first").addEventListener("click", firstLeases);
  $("#leases-next").addEventListener("click", olderLeases);
  $("#history-form").addEventListener("submit", showHistory);
  const kept = sessionStorage.getItem(STORED_KEY);
  if (kept) open(kept);
})();
