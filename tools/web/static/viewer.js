// sessionledger viewer: the list (filters, paging, live) and a session (paging, time travel,
// the model's view, live tail, verify badge). Plain script, no dependencies, GET requests only.
"use strict";
(function () {
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));
  const getJSON = async (url) => {
    const r = await fetch(url, { headers: { Accept: "application/json" } });
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    return body;
  };
  const debounce = (fn, ms) => {
    let t = null;
    return (...a) => { clearTimeout(t); t = setTimeout(() => fn(...a), ms); };
  };
  const live = (on) => { const el = $("#live"); if (el) el.classList.toggle("on", on); };
  const html = (text) => { const t = document.createElement("template"); t.innerHTML = text; return t.content; };

  // Long text is left out of the page and fetched when its fold is opened.
  document.addEventListener("toggle", async (ev) => {
    const d = ev.target;
    if (!(d instanceof HTMLDetailsElement) || !d.open) return;
    const full = $(".full[data-src]", d);
    if (!full || full.dataset.loaded) return;
    full.dataset.loaded = "1";
    full.textContent = "loading\u2026";
    const r = await fetch(full.dataset.src);
    const t = document.createElement("textarea");
    t.innerHTML = await r.text();
    full.textContent = t.value;
  }, true);

  function listPage() {
    const form = $("#filters");
    let offset = 0;
    const limit = 50;
    const load = async () => {
      const q = new URLSearchParams(new FormData(form));
      q.set("offset", offset); q.set("limit", limit);
      const data = await getJSON("/api/sessions?" + q);
      $("#rows").innerHTML = data.html;
      $("#count").textContent = data.total + " session" + (data.total === 1 ? "" : "s");
      $("#range").textContent = data.total ? (offset + 1) + "\u2013" + (offset + data.shown) + " of " + data.total : "";
      $("#prev").disabled = offset === 0;
      $("#next").disabled = offset + data.shown >= data.total;
      document.body.dataset.loaded = String(Date.now());
    };
    const reload = debounce(() => { offset = 0; load(); }, 200);
    form.addEventListener("submit", (ev) => { ev.preventDefault(); reload(); });
    form.addEventListener("input", reload);
    form.addEventListener("change", reload);
    $("#prev").addEventListener("click", () => { offset = Math.max(0, offset - limit); load(); });
    $("#next").addEventListener("click", () => { offset += limit; load(); });
    load();
    const es = new EventSource("/api/sessions/events");
    es.addEventListener("hello", () => live(true));
    es.addEventListener("change", () => load());
    es.onerror = () => live(false);
  }

  function sessionPage() {
    const root = $("#session");
    const key = root.dataset.key;
    const base = Number(root.dataset.base);
    let head = Number(root.dataset.head);
    let first = Number(root.dataset.first);
    let last = Number(root.dataset.last);
    let at = Number(root.dataset.at);
    const slider = $("#slider");
    const events = $("#events");
    const k = "key=" + encodeURIComponent(key);
    const buttons = () => {
      $("#earlier").style.display = first > base + 1 ? "" : "none";
      $("#later").style.display = last < head ? "" : "none";
    };
    const mark = () => {
      $$(".ev", events).forEach((el) => el.classList.toggle("future", Number(el.dataset.seq) > at));
      $$(".result", events).forEach((el) => el.classList.toggle("future", Number(el.dataset.seq) > at));
    };
    const label = (ts) => {
      $("#at").textContent = "#" + at + " of #" + head + (ts ? " \u00b7 " + ts.replace("T", " ").slice(0, 19) : "");
    };
    const view = async () => {
      const budget = Number($("#budget").value) || 0;
      const q = k + "&max_tokens=" + budget + (at < head ? "&seq=" + at : "");
      try {
        const data = await getJSON("/api/view?" + q);
        $("#view").innerHTML = data.html;
        label(data.ts);
        document.body.dataset.viewSeq = String(data.seq);
      } catch (e) {
        $("#view").innerHTML = "";
        $("#view").append(Object.assign(document.createElement("div"), { className: "bad-line", textContent: e.message }));
      }
    };
    const heading = async () => {
      const r = await fetch("/api/heading?" + k);
      if (r.ok) { $("#heading").outerHTML = await r.text(); document.body.dataset.heading = "1"; }
    };
    const verify = async () => {
      try {
        const data = await getJSON("/api/verify?" + k);
        $("#badge").innerHTML = data.html;
      } catch (e) { /* the page says so elsewhere */ }
    };
    const loadPage = async (params, where) => {
      const data = await getJSON("/api/timeline?" + k + "&" + params);
      if (where === "replace") { events.innerHTML = data.html; first = data.first; last = data.last; }
      else if (where === "before") { events.prepend(html(data.html)); first = Math.min(first, data.first); }
      else { events.append(html(data.html)); last = Math.max(last, data.last); }
      head = Math.max(head, data.head);
      buttons(); mark();
    };
    const jump = async (seq) => {
      if (!$("#e" + seq)) await loadPage("around=" + seq, "replace");
      const el = $("#e" + seq);
      if (el) {
        $$(".hit").forEach((h) => h.classList.remove("hit"));
        el.classList.add("hit");
        el.scrollIntoView({ block: "center" });
      }
    };
    $("#earlier").addEventListener("click", () => loadPage("before=" + first, "before"));
    $("#later").addEventListener("click", () => loadPage("after=" + last, "after"));
    const travel = debounce(async () => {
      await view();
      if (at > base && (at < first || at > last)) await loadPage("around=" + at, "replace");
      mark();
      const el = $("#e" + at);
      if (el && at < head) el.scrollIntoView({ block: "center" });
      document.body.dataset.travelled = String(at);
    }, 120);
    slider.addEventListener("input", () => { at = Number(slider.value); label(); mark(); travel(); });
    $("#budget").addEventListener("change", view);
    document.addEventListener("click", (ev) => {
      const a = ev.target.closest("[data-jump]");
      if (!a) return;
      ev.preventDefault();
      jump(Number(a.dataset.jump));
    });
    buttons(); mark(); view(); verify(); heading();
    if (at < head) jump(at);
    const refresh = debounce(() => { verify(); heading(); if (at >= head) view(); }, 300);
    const es = new EventSource("/api/tail?" + k + "&after=" + head);
    es.addEventListener("hello", () => live(true));
    es.addEventListener("append", (ev) => {
      const data = JSON.parse(ev.data);
      const following = at >= head;
      if (data.seq > head) head = data.seq;
      const waiting = data.cid ? $$(".call", events).find((c) => c.dataset.cid === data.cid) : null;
      const slot = waiting ? $(".result.missing", waiting) : null;
      if (slot) {
        // The call is on the page, waiting for this result: show it there, once.
        slot.replaceWith(html(data.result));
        $("#e" + data.seq, waiting).classList.add("new");
        last = Math.max(last, data.seq);
      } else if (last >= data.seq - 1 && !$("#e" + data.seq)) {
        const frag = html(data.html);
        $$(".ev", frag).forEach((el) => el.classList.add("new"));
        events.append(frag);
        last = data.seq;
      }
      slider.max = head;
      if (following) { at = head; slider.value = head; }
      label(); buttons(); mark(); refresh();
      document.body.dataset.tail = String(data.seq);
    });
    es.addEventListener("problem", (ev) => { verify(); live(false); });
    es.onerror = () => live(false);
  }

  const page = document.body.dataset.page;
  if (page === "list") listPage();
  else if (page === "session") sessionPage();
})();
