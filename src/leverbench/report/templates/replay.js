/* leverbench side-by-side replay.  Every text from the run is inserted with textContent / Text nodes,
   never as markup.  URL parameters: ?autoplay=1 starts playing on load, &speed=1|2|5. */
(function () {
  "use strict";
  var root = document.getElementById("replay");
  var src = document.getElementById("replay-data");
  if (!root || !src) { return; }
  var data = JSON.parse(src.textContent);
  function $(id) { return document.getElementById(id); }
  var caseSel = $("rp-case"), repSel = $("rp-repeat"), armsBox = $("rp-arms"), playBtn = $("rp-play"),
      restartBtn = $("rp-restart"), clockOut = $("rp-clock"), bar = $("rp-progress"), panesEl = $("rp-panes"),
      msg = $("rp-msg");
  var speedBtns = root.querySelectorAll("button[data-speed]");
  var st = { t: 0, playing: false, speed: 1, last: 0, end: 0, panes: [] };
  var armInfo = {};
  data.arms.forEach(function (a) { armInfo[a.name] = a; });

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function fmt(s) { return s.toFixed(2) + " s"; }

  function chosenArms() {
    if (!armsBox) { return data.arms.map(function (a) { return a.name; }); }
    var out = [];
    armsBox.querySelectorAll("input[type=checkbox]").forEach(function (c) { if (c.checked) { out.push(c.value); } });
    return out;
  }

  function selection() {
    var c = caseSel ? caseSel.value : data.cases[0];
    var r = repSel ? parseInt(repSel.value, 10) : data.repeats[0];
    var arms = chosenArms();
    var found = [];
    arms.forEach(function (a) {
      for (var i = 0; i < data.turns.length; i++) {
        var t = data.turns[i];
        if (t.arm === a && t.case === c && t.repeat === r) { found.push(t); return; }
      }
    });
    var missing = arms.filter(function (a) { return !found.some(function (t) { return t.arm === a; }); });
    return { turns: found, missing: missing, arms: arms };
  }

  function events(turn) {
    var ev = [], seq = 0;
    turn.calls.forEach(function (c, i) {
      ev.push({ t: c.start, k: "call", c: c, i: i, s: seq++ });
      for (var j = 0; j < c.t.length; j++) {
        ev.push({ t: c.start + c.t[j], k: "chunk", text: c.text ? c.text[j] : null, n: c.chars[j] || 0, s: seq++ });
      }
      var cend = c.start + (c.latency !== null ? c.latency : (c.t.length ? c.t[c.t.length - 1] : 0));
      if (c.tools && c.tools.length) { ev.push({ t: cend, k: "tools", text: "tool call: " + c.tools.join(", "), s: seq++ }); }
      if (c.error) { ev.push({ t: cend, k: "error", text: "error: " + c.error, s: seq++ }); }
    });
    ev.sort(function (a, b) { return a.t - b.t || a.s - b.s; });
    return ev;
  }

  function build() {
    var sel = selection();
    panesEl.textContent = "";
    st.panes = sel.turns.map(function (turn) {
      var p = el("section", "pane");
      p.setAttribute("data-state", "waiting");
      p.setAttribute("data-arm", turn.arm);
      var head = el("header");
      head.appendChild(el("h3", null, turn.arm));
      var info = armInfo[turn.arm] || { conditions: {} };
      var cond = Object.keys(info.conditions || {}).map(function (k) { return k + "=" + info.conditions[k]; });
      head.appendChild(el("div", "cond", (info.role ? info.role + " · " : "") + cond.join(" · ")));
      var status = el("div", "status", "waiting");
      var body = el("div", "body");
      if (!turn.text && data.text_stored) {
        body.appendChild(el("p", "notice", "This turn's text was not stored: each ▪ stands for one character " +
          "received, at its recorded time. Set store_text = true under [experiment] to replay the answers."));
      }
      p.appendChild(head); p.appendChild(status); p.appendChild(body);
      panesEl.appendChild(p);
      return { turn: turn, ev: events(turn), i: 0, el: p, body: body, status: status, out: null, node: null,
               chars: 0, chunks: 0, first: null, call: -1, done: false };
    });
    panesEl.style.gridTemplateColumns = "repeat(" + Math.max(1, Math.min(st.panes.length, 4)) + ", minmax(0, 1fr))";
    st.end = st.panes.reduce(function (m, p) { return Math.max(m, p.turn.end); }, 0);
    var notes = [];
    if (sel.arms.length === 0) { notes.push("Choose at least one arm."); }
    if (sel.missing.length) { notes.push("No finished turn to replay for: " + sel.missing.join(", ") + "."); }
    if (msg) { msg.textContent = notes.join(" "); msg.hidden = notes.length === 0; }
    st.t = 0;
    render();
  }

  function advance(p) {
    var changed = false;
    while (p.i < p.ev.length && p.ev[p.i].t <= st.t) {
      var e = p.ev[p.i++];
      changed = true;
      if (e.k === "call") {
        var blk = el("div", "step");
        var n = p.turn.calls.length;
        blk.appendChild(el("div", "steplabel", "call " + (e.i + 1) + "/" + n + " · sent at " + fmt(e.t) +
          (e.c.tokens !== null && e.c.tokens !== undefined ? " · " + e.c.tokens + " tokens generated" : "")));
        if (e.c.prompt) { blk.appendChild(el("div", "prompt", e.c.prompt)); }
        p.out = el("div", e.c.text ? "out" : "out blocks");
        p.node = document.createTextNode("");
        p.out.appendChild(p.node);
        blk.appendChild(p.out);
        p.body.appendChild(blk);
        p.call = e.i;
      } else if (e.k === "chunk") {
        if (p.first === null) { p.first = e.t; }
        p.chunks += 1;
        p.chars += e.n;
        p.node.appendData(e.text !== null ? e.text : "▪".repeat(Math.min(e.n, 200)));
      } else {
        p.body.lastChild.appendChild(el("div", e.k, e.text));
      }
    }
    if (changed) { p.body.scrollTop = p.body.scrollHeight; }
    var facts = (p.first !== null ? "first token " + fmt(p.first) + " · " : "") + p.chunks + " chunks · " +
      p.chars + " chars";
    if (!p.done && st.t >= p.turn.end) {
      p.done = true;
      p.el.setAttribute("data-state", "done");
      p.status.textContent = (p.turn.error ? "turn failed at " : "finished at ") + fmt(p.turn.end) + " · " + facts;
    } else if (!p.done) {
      if (p.first === null) {
        p.status.textContent = "waiting for the first token · " + fmt(st.t);
      } else {
        p.el.setAttribute("data-state", "streaming");
        p.status.textContent = "streaming call " + (p.call + 1) + "/" + p.turn.calls.length + " · " + facts;
      }
    }
    p.el.setAttribute("data-chars", String(p.chars));
  }

  function render() {
    st.panes.forEach(advance);
    clockOut.textContent = fmt(st.t) + " / " + fmt(st.end);
    bar.style.width = (st.end > 0 ? Math.min(100, 100 * st.t / st.end) : 0).toFixed(1) + "%";
    root.setAttribute("data-clock", st.t.toFixed(2));
    root.setAttribute("data-state", st.playing ? "playing" : (st.t >= st.end && st.end > 0 ? "ended" : "paused"));
  }

  function setPlaying(on) {
    st.playing = on;
    st.last = performance.now();
    playBtn.textContent = on ? "❚❚ pause" : "▶ play";
    playBtn.setAttribute("aria-pressed", on ? "true" : "false");
    render();
  }

  function tick() {
    if (!st.playing) { return; }
    var now = performance.now();
    st.t += (now - st.last) / 1000 * st.speed;
    st.last = now;
    if (st.t >= st.end) { st.t = st.end; st.playing = false; playBtn.textContent = "▶ play again";
                          playBtn.setAttribute("aria-pressed", "false"); }
    render();
  }

  function setSpeed(v) {
    st.speed = v;
    speedBtns.forEach(function (b) { b.setAttribute("aria-pressed", Number(b.getAttribute("data-speed")) === v ? "true" : "false"); });
  }

  playBtn.addEventListener("click", function () {
    if (!st.playing && st.t >= st.end) { build(); }
    setPlaying(!st.playing);
  });
  restartBtn.addEventListener("click", function () { var was = st.playing; build(); setPlaying(was); });
  speedBtns.forEach(function (b) {
    b.addEventListener("click", function () { setSpeed(Number(b.getAttribute("data-speed"))); });
  });
  [caseSel, repSel].forEach(function (s) { if (s) { s.addEventListener("change", function () { build(); setPlaying(false); }); } });
  if (armsBox) { armsBox.addEventListener("change", function () { build(); setPlaying(false); }); }

  var params = new URLSearchParams(window.location.search);
  var sp = Number(params.get("speed"));
  setSpeed(sp === 2 || sp === 5 ? sp : 1);
  build();
  setInterval(tick, 40);
  if (params.get("autoplay") === "1") { setPlaying(true); }
})();
