/* The course's trained microgpt, live in the page (website/live): the reader types a name and
   sees each head's attention map and the next-letter probabilities, computed here by a forward
   pass in plain JavaScript equal to gptlib's GPT.forward for the exported configs; a temperature
   and a top-k slider redraw the distribution and draw names with a seeded generator; a heads
   slider moves among the trained models. The weights come from course-live-weights.js (a script
   that sets window.COURSE_LIVE_MODELS), so nothing is fetched and a page opened from disk works.
   Arithmetic in float64 on the float32 weights. */
"use strict";
(() => {
  const TEXT = {
    en: {
      title: "Live in this page: the trained microgpt",
      about: "{params} parameters, {h} head(s) of width d_h = {dh} ({file}), run by your browser: type a name, move the sliders.",
      name: "name",
      heads: "heads",
      temperature: "temperature",
      topk: "top-k (0=off)",
      caption: "Context {context}: {h} attention map(s), one per head. Row = the token looking (query), column = the token looked at (key); colour from 0 (dark) to 1 (yellow); white = the masked future.",
      cropped: " The model reads only the last {T} tokens.",
      error: "Cannot read {text}: {char} at position {position} is not one of the model's {V} symbols ({symbols}). Type lower-case letters a to z.",
      head: "head {j}",
      probs: "After {context}: next-letter probabilities, {mode}",
      likely: "Most likely:",
      greedy: "greedy (argmax), no randomness",
      temp: "temperature {t}",
      tempk: "temperature {t}, top-{k}",
      samples: "{n} names drawn in this page, seed {seed}, {mode}:",
      draw: "Draw fresh names",
      cell: "{query} looks at {key}: {w}",
      bar: "{symbol}: {p}",
      below: {
        heads_explorer: "Below it: the textbook preset's maps, pictures drawn when this site was built (that model is too large to send to the page).",
        temperature_explorer: "Below it: the picture the notebook's own slider drew, for the textbook preset (too large to send to the page).",
      },
    },
    zh: {
      title: "在本页实时运行：训练好的 microgpt",
      about: "{params} 个参数，{h} 个头，每个头宽 d_h = {dh}（{file}），由你的浏览器计算：输入一个名字，拖动滑块。",
      name: "名字",
      heads: "头数",
      temperature: "温度",
      topk: "top-k（0 = 关闭）",
      caption: "上下文 {context}：{h} 张注意力图，每个头一张。行是发出查看的 token（query），列是被查看的 token（key）；颜色从 0（深色）到 1（黄色）；白色是被屏蔽的未来位置。",
      cropped: "模型只读最后 {T} 个 token。",
      error: "无法读取 {text}：位置 {position} 上的 {char} 不在模型的 {V} 个符号（{symbols}）之中。请只输入小写字母 a 到 z。",
      head: "头 {j}",
      probs: "{context} 之后：下一个字母的概率，{mode}",
      likely: "最可能的：",
      greedy: "贪心（argmax），没有随机性",
      temp: "温度 {t}",
      tempk: "温度 {t}，top-{k}",
      samples: "在本页抽出的 {n} 个名字，种子 {seed}，{mode}：",
      draw: "重新抽取名字",
      cell: "{query} 查看 {key}：{w}",
      bar: "{symbol}：{p}",
      below: {
        heads_explorer: "下面是 textbook 预设的注意力图：构建本网站时画好的图片（这个模型太大，无法发送到网页中）。",
        temperature_explorer: "下面是笔记本自己的滑块为 textbook 预设画出的图（这个模型太大，无法发送到网页中）。",
      },
    },
  };
  const SVG = "http://www.w3.org/2000/svg";
  const MAX_NEW = 20; // letters a sample may add (gptlib.classroom.widgets' max_len)
  // matplotlib's viridis at 0, 1/8, ..., 1: the colours of the notebooks' attention maps.
  const VIRIDIS = ["#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962",
    "#addc30", "#fde725"].map((c) => [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16)));

  const fill = (template, values) =>
    template.replace(/\{(\w+)\}/g, (m, k) => (k in values ? String(values[k]) : m));

  // ------------------------------------------------------------------------------------------
  // The model: weights, forward pass, sampling.

  function decode(entry) {
    const bytes = Uint8Array.from(atob(entry.data), (c) => c.charCodeAt(0));
    const all = new Float32Array(bytes.buffer);
    const tensors = {};
    let at = 0;
    for (const [name, shape] of entry.tensors) {
      const size = shape.reduce((a, b) => a * b, 1);
      tensors[name] = Float64Array.from(all.subarray(at, at + size));
      at += size;
    }
    if (at !== all.length) throw new Error(`${entry.name}: ${all.length} numbers, tensors need ${at}`);
    return { name: entry.name, cfg: entry.config, parameters: entry.parameters, w: tensors };
  }

  // x: rows of length inn -> rows of length out; weight [out, inn] as nn.Linear stores it.
  function linear(rows, weight, bias, out) {
    return rows.map((x) => {
      const inn = x.length;
      const y = new Float64Array(out);
      for (let o = 0; o < out; o++) {
        let s = bias ? bias[o] : 0;
        for (let i = 0; i < inn; i++) s += weight[o * inn + i] * x[i];
        y[o] = s;
      }
      return y;
    });
  }

  function norm(rows, cfg, w, prefix) {
    const gain = w[prefix + ".weight"];
    const beta = w[prefix + ".bias"];
    const eps = 1e-5;
    return rows.map((x) => {
      const d = x.length;
      const y = new Float64Array(d);
      if (cfg.norm === "rmsnorm") {
        let ms = 0;
        for (let i = 0; i < d; i++) ms += x[i] * x[i];
        const r = 1 / Math.sqrt(ms / d + eps);
        for (let i = 0; i < d; i++) y[i] = x[i] * r * gain[i];
      } else {
        let mean = 0;
        for (let i = 0; i < d; i++) mean += x[i];
        mean /= d;
        let v = 0;
        for (let i = 0; i < d; i++) v += (x[i] - mean) ** 2;
        const r = 1 / Math.sqrt(v / d + eps);
        for (let i = 0; i < d; i++) y[i] = (x[i] - mean) * r * gain[i] + (beta ? beta[i] : 0);
      }
      return y;
    });
  }

  // erf to about 1e-15 (Taylor series near 0, a continued fraction for erfc further out).
  function erf(x) {
    const a = Math.abs(x);
    if (a < 2.5) {
      let term = a, sum = a;
      for (let n = 1; n < 200; n++) {
        term *= (-a * a) / n;
        const add = term / (2 * n + 1);
        sum += add;
        if (Math.abs(add) < 1e-17 * Math.abs(sum)) break;
      }
      return Math.sign(x) * (2 / Math.sqrt(Math.PI)) * sum;
    }
    let f = 0;
    for (let n = 60; n >= 1; n--) f = (n / 2) / (a + f);
    const erfc = Math.exp(-a * a) / Math.sqrt(Math.PI) / (a + f);
    return Math.sign(x) * (1 - erfc);
  }

  const ACTIVATIONS = {
    relu: (x) => (x > 0 ? x : 0),
    gelu: (x) => 0.5 * x * (1 + erf(x / Math.SQRT2)),
    gelu_tanh: (x) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3))),
  };

  const add = (a, b) => a.map((x, i) => Float64Array.from(x, (v, j) => v + b[i][j]));

  function attention(rows, cfg, w, p, maps) {
    const d = cfg.n_embd, h = cfg.n_head, dh = d / h, n = rows.length;
    const qkv = linear(rows, w[p + "qkv.weight"], w[p + "qkv.bias"], 3 * d);
    const y = rows.map(() => new Float64Array(d));
    const layer = [];
    for (let head = 0; head < h; head++) {
      const map = [];
      for (let i = 0; i < n; i++) {
        const scores = new Float64Array(n).fill(-Infinity);
        for (let j = 0; j <= i; j++) {
          let s = 0;
          for (let c = 0; c < dh; c++) s += qkv[i][head * dh + c] * qkv[j][d + head * dh + c];
          scores[j] = s / Math.sqrt(dh);
        }
        const weights = softmax(scores);
        for (let j = 0; j <= i; j++) {
          for (let c = 0; c < dh; c++) y[i][head * dh + c] += weights[j] * qkv[j][2 * d + head * dh + c];
        }
        map.push(weights);
      }
      layer.push(map);
    }
    maps.push(layer);
    return linear(y, w[p + "proj.weight"], w[p + "proj.bias"], d);
  }

  function mlp(rows, cfg, w, p) {
    const act = ACTIVATIONS[cfg.activation];
    if (!act) throw new Error(`activation ${cfg.activation} is not one of ${Object.keys(ACTIVATIONS)}`);
    const hidden = linear(rows, w[p + "fc.weight"], w[p + "fc.bias"], 4 * cfg.n_embd);
    return linear(hidden.map((x) => x.map(act)), w[p + "proj.weight"], w[p + "proj.bias"], cfg.n_embd);
  }

  // ids (at most block_size) -> {logits: [n][V], attention: [L][h][n][n]}, as GPT.forward and
  // GPT.attention_maps compute them.
  function forward(model, ids) {
    const { cfg, w } = model;
    const d = cfg.n_embd;
    if (ids.length < 1 || ids.length > cfg.block_size) {
      throw new Error(`${ids.length} tokens: the model reads 1 to ${cfg.block_size}`);
    }
    let x = ids.map((id, t) =>
      Float64Array.from({ length: d }, (_, c) => w["tok_emb.weight"][id * d + c] + w["pos_emb.weight"][t * d + c]));
    const maps = [];
    for (let l = 0; l < cfg.n_layer; l++) {
      const p = `blocks.${l}.`;
      if (cfg.norm_placement === "pre") {
        x = add(x, attention(norm(x, cfg, w, p + "ln1"), cfg, w, p + "attn.", maps));
        x = add(x, mlp(norm(x, cfg, w, p + "ln2"), cfg, w, p + "mlp."));
      } else {
        x = norm(add(x, attention(x, cfg, w, p + "attn.", maps)), cfg, w, p + "ln1");
        x = norm(add(x, mlp(x, cfg, w, p + "mlp.")), cfg, w, p + "ln2");
      }
    }
    const head = w["lm_head.weight"] || w["tok_emb.weight"]; // tied: the token table itself
    const logits = linear(norm(x, cfg, w, "ln_f"), head, null, cfg.vocab_size);
    return { logits: logits.map((r) => Array.from(r)), attention: maps.map((l) => l.map((h) => h.map((r) => Array.from(r)))) };
  }

  function softmax(z) {
    const top = Math.max(...z);
    const e = z.map((v) => Math.exp(v - top));
    const s = e.reduce((a, b) => a + b, 0);
    return e.map((v) => v / s);
  }

  // gptlib.generate.next_token_probs: logits / temperature, top-k kept (ties with the k-th
  // included), softmax; temperature 0 puts all the mass on the argmax.
  function nextProbs(logits, temperature, topK) {
    const V = logits.length;
    if (temperature === 0) {
      let best = 0;
      for (let i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
      return logits.map((_, i) => (i === best ? 1 : 0));
    }
    let z = logits.map((v) => v / temperature);
    if (topK && topK < V) {
      const kth = [...z].sort((a, b) => b - a)[topK - 1];
      z = z.map((v) => (v < kth ? -Infinity : v));
    }
    return softmax(z);
  }

  // A small seeded generator (mulberry32): the same seed gives the same draws.
  function generator(seed) {
    let a = seed >>> 0;
    return () => {
      a = (a + 0x6d2b79f5) >>> 0;
      let t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  // `num` continuations of ids, each until BOS or MAX_NEW letters, the context cropped to the
  // last block_size tokens at every step (gptlib.generate without the cache).
  function sample(model, ids, bos, num, temperature, topK, seed) {
    const random = generator(seed);
    const out = [];
    for (let s = 0; s < num; s++) {
      const seq = ids.slice();
      const added = [];
      for (let step = 0; step < MAX_NEW; step++) {
        const { logits } = forward(model, seq.slice(-model.cfg.block_size));
        const p = nextProbs(logits[logits.length - 1], temperature, topK);
        let next = 0;
        if (temperature === 0) {
          next = p.indexOf(1);
        } else {
          const u = random();
          let acc = 0;
          next = -1;
          for (let i = 0; i < p.length; i++) {
            if (p[i] > 0) next = i;
            acc += p[i];
            if (u < acc) break;
          }
        }
        if (next === bos) break;
        seq.push(next);
        added.push(next);
      }
      out.push(added);
    }
    return out;
  }

  // gptlib.classroom.widgets' _context_ids: the typed text read after BOS, cropped to block_size.
  function contextIds(text, symbols, bos, blockSize) {
    const ids = [];
    [...text].forEach((ch, position) => {
      const i = symbols.indexOf(ch);
      if (i < 0) throw Object.assign(new Error("unknown symbol"), { char: ch, position });
      ids.push(i);
    });
    if (ids[0] !== bos) ids.unshift(bos);
    return ids.slice(-blockSize);
  }

  // ------------------------------------------------------------------------------------------
  // The panel.

  function el(tag, attrs = {}, ...children) {
    const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    for (const c of children) node.append(c);
    return node;
  }

  function colour(v) {
    const x = Math.min(Math.max(v, 0), 1) * (VIRIDIS.length - 1);
    const i = Math.min(Math.floor(x), VIRIDIS.length - 2), f = x - i;
    const [a, b] = [VIRIDIS[i], VIRIDIS[i + 1]];
    return `rgb(${a.map((c, k) => Math.round(c + f * (b[k] - c))).join(",")})`;
  }

  function drawMap(weights, tokens, title, t) {
    const n = tokens.length, cell = 18, pad = 16;
    const size = pad + n * cell;
    const svg = el("svg:svg", { viewBox: `0 0 ${size + 2} ${size + 2}`, width: size + 2, height: size + 2, role: "img", "aria-label": title });
    tokens.forEach((tok, i) => {
      svg.append(el("svg:text", { x: pad + i * cell + cell / 2, y: pad - 4, "text-anchor": "middle" }, tok));
      svg.append(el("svg:text", { x: pad - 4, y: pad + i * cell + cell / 2 + 4, "text-anchor": "end" }, tok));
    });
    for (let i = 0; i < n; i++) {
      for (let j = 0; j < n; j++) {
        const future = j > i;
        const rect = el("svg:rect", {
          x: pad + j * cell, y: pad + i * cell, width: cell, height: cell,
          fill: future ? "#fff" : colour(weights[i][j]), class: future ? "course-live-future" : "course-live-cell",
        });
        if (!future) {
          rect.append(el("svg:title", {}, fill(t.cell, { query: `'${tokens[i]}'`, key: `'${tokens[j]}'`, w: weights[i][j].toFixed(3) })));
        }
        svg.append(rect);
      }
    }
    return el("figure", { class: "course-live-map" }, svg, el("figcaption", {}, title));
  }

  function drawBars(p, symbols, highlight, label) {
    const V = p.length, bar = 14, height = 90, top = Math.max(...p);
    const width = V * bar;
    const svg = el("svg:svg", { viewBox: `0 0 ${width} ${height + 16}`, class: "course-live-bars", role: "img", "aria-label": label });
    p.forEach((v, i) => {
      const h = top > 0 ? (v / top) * (height - 12) : 0;
      const rect = el("svg:rect", { x: i * bar + 1, y: height - h, width: bar - 2, height: h, class: i === highlight ? "course-live-argmax" : "course-live-bar" });
      rect.append(el("svg:title", {}, `${symbols[i]}: ${v.toFixed(4)}`));
      svg.append(rect);
      svg.append(el("svg:text", { x: i * bar + bar / 2, y: height + 12, "text-anchor": "middle" }, symbols[i]));
    });
    svg.append(el("svg:text", { x: highlight * bar + bar / 2, y: height - (height - 12) - 2, "text-anchor": "middle", class: "course-live-top" }, top.toFixed(2)));
    return svg;
  }

  function panel(root, data, models) {
    const lang = (document.documentElement.lang || "en").toLowerCase().startsWith("zh") ? "zh" : "en";
    const t = TEXT[lang];
    const { symbols, bos } = data;
    const counts = models.map((m) => m.cfg.n_head);
    const numSamples = Number(root.dataset.samples) || 10;
    let seed = Number(root.dataset.seed) || 0;
    const startText = (root.dataset.context || "").replace(/^\.+/, "");
    const range = (cls, min, max, step, value) =>
      el("input", { type: "range", class: cls, min, max, step, value });
    const name = el("input", { type: "text", class: "course-live-name", value: startText, spellcheck: "false", autocomplete: "off", autocapitalize: "none", maxlength: "40", size: "12" });
    const heads = range("course-live-heads", 0, counts.length - 1, 1, Math.max(0, counts.indexOf(data.start)));
    const temperature = range("course-live-temperature", 0, 2, 0.05, 1);
    const topK = range("course-live-topk", 0, symbols.length, 1, 0);
    const outputs = {};
    const control = (label, input, key) => {
      const parts = [el("label", {}, label + " ", input)];
      if (key) parts.push((outputs[key] = el("output", {})));
      return el("span", { class: "course-live-control" }, ...parts);
    };
    const about = el("p", { class: "course-live-about" });
    const caption = el("p", { class: "course-live-caption", "aria-live": "polite" });
    const maps = el("div", { class: "course-live-maps" });
    const probsTitle = el("p", { class: "course-live-probs-title" });
    const bars = el("div", { class: "course-live-probs" });
    const likely = el("p", { class: "course-live-likely" });
    const draw = el("button", { type: "button", class: "course-live-draw" }, t.draw);
    const samplesTitle = el("p", { class: "course-live-samples-title" });
    const names = el("p", { class: "course-live-names", "aria-live": "polite" });
    root.replaceChildren(
      el("p", { class: "course-live-title" }, el("strong", {}, t.title)), about,
      el("div", { class: "course-live-controls" },
        control(t.name, name), control(t.heads, heads, "heads"),
        control(t.temperature, temperature, "temperature"), control(t.topk, topK, "topk")),
      caption, maps, probsTitle, bars, likely,
      el("div", { class: "course-live-samples" }, samplesTitle, names, draw));
    const below = t.below[root.dataset.widget];
    if (below) root.append(el("p", { class: "course-live-below" }, below));

    const state = { lang };
    root.courseLive = state;

    function model() {
      return models[Number(heads.value)];
    }

    function redrawModel() {
      const m = model();
      outputs.heads.textContent = String(m.cfg.n_head);
      heads.setAttribute("aria-valuetext", String(m.cfg.n_head));
      about.textContent = fill(t.about, { params: m.parameters.toLocaleString(lang === "zh" ? "zh-CN" : "en"), h: m.cfg.n_head, dh: m.cfg.n_embd / m.cfg.n_head, file: m.name });
      let ids;
      try {
        ids = contextIds(name.value, symbols, bos, m.cfg.block_size);
      } catch (e) {
        if (!("position" in e)) throw e;
        Object.assign(state, { error: e, ids: null, logits: null, attention: null });
        name.setAttribute("aria-invalid", "true");
        caption.textContent = fill(t.error, { text: JSON.stringify(name.value), char: `'${e.char}'`, position: e.position, V: symbols.length, symbols: symbols.join("") });
        caption.classList.add("course-live-error");
        maps.replaceChildren();
        redrawSampling();
        return;
      }
      name.removeAttribute("aria-invalid");
      caption.classList.remove("course-live-error");
      const tokens = ids.map((i) => symbols[i]);
      const { logits, attention } = forward(m, ids);
      Object.assign(state, { error: null, heads: m.cfg.n_head, model: m.name, ids, tokens, logits, attention });
      const context = `'${tokens.join("")}'`;
      const typed = contextIds(name.value, symbols, bos, Infinity).length;
      caption.textContent = fill(t.caption, { context, h: m.cfg.n_head * m.cfg.n_layer }) +
        (typed > m.cfg.block_size ? fill(t.cropped, { T: m.cfg.block_size }) : "");
      const drawn = [];
      attention.forEach((layer, l) => layer.forEach((weights, j) => {
        const title = fill(t.head, { j }) + (attention.length > 1 ? ` (${l})` : "");
        drawn.push(drawMap(weights, tokens, title, t));
      }));
      maps.replaceChildren(...drawn);
      redrawSampling();
    }

    function redrawSampling() {
      const temp = Number(temperature.value), k = Number(topK.value);
      outputs.temperature.textContent = temp.toFixed(2);
      temperature.setAttribute("aria-valuetext", temp.toFixed(2));
      outputs.topk.textContent = String(k);
      topK.setAttribute("aria-valuetext", String(k));
      const mode = temp === 0 ? t.greedy : fill(k ? t.tempk : t.temp, { t: temp.toFixed(2), k });
      if (!state.ids) {
        Object.assign(state, { probs: null, samples: null });
        probsTitle.textContent = likely.textContent = samplesTitle.textContent = names.textContent = "";
        bars.replaceChildren();
        draw.disabled = true;
        return;
      }
      draw.disabled = false;
      const m = model();
      const last = state.logits[state.logits.length - 1];
      const p = nextProbs(last, temp, k);
      const best = p.indexOf(Math.max(...p));
      probsTitle.textContent = fill(t.probs, { context: `'${state.tokens.join("")}'`, mode });
      bars.replaceChildren(drawBars(p, symbols, best, probsTitle.textContent));
      const order = p.map((v, i) => [v, i]).sort((a, b) => b[0] - a[0]).slice(0, 5).filter(([v]) => v > 0);
      likely.textContent = t.likely + " " + order.map(([v, i]) => fill(t.bar, { symbol: `'${symbols[i]}'`, p: v.toFixed(3) })).join(" · ");
      const prefix = name.value.replace(/^\.+/, "");
      const drawnIds = sample(m, contextIds(name.value, symbols, bos, Infinity), bos, numSamples, temp, k, seed);
      const samples = drawnIds.map((row) => prefix + row.map((i) => symbols[i]).join(""));
      Object.assign(state, { temperature: temp, topK: k, seed, probs: p, samples });
      samplesTitle.textContent = fill(t.samples, { n: numSamples, seed, mode });
      names.textContent = samples.join("  ");
    }

    name.addEventListener("input", redrawModel);
    heads.addEventListener("input", redrawModel);
    temperature.addEventListener("input", redrawSampling);
    topK.addEventListener("input", redrawSampling);
    draw.addEventListener("click", () => {
      seed += 1;
      redrawSampling();
    });
    redrawModel();
  }

  function start() {
    const data = window.COURSE_LIVE_MODELS;
    const roots = document.querySelectorAll(".course-live");
    if (!roots.length) return;
    if (!data) throw new Error("course-live.js: window.COURSE_LIVE_MODELS is missing (course-live-weights.js not loaded)");
    const models = data.models.map(decode);
    for (const root of roots) panel(root, data, models);
  }

  // For the browser tests and the curious: the forward pass on any exported model.
  window.CourseLive = { decode, forward, nextProbs, contextIds, sample, erf };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
