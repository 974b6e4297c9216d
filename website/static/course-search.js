/* The course's search (search.html): ranks the pages of this edition by what they teach.

   The index (course-search-index.js, website/search.py) holds each page's title and sections:
   heading and plain prose and code, no menus, no outputs. A query is read as words (Latin
   letters and digits) and runs of Chinese characters; each must be found on a page. A word
   found in the page's title counts most, then in a heading, then in the body (a little more
   for each time it is found there, up to a limit); the whole query found as it was typed in the
   title or a heading counts more again. Chinese is matched as written, inside any run of
   characters, so a term of one character (头, 熵) is found as well as one of seven; a Chinese
   run found nowhere as a whole is searched as its overlapping pairs of characters. The glossary
   and the errata are ranked after the chapters (they name every term). Each result shows the
   section where the query counts most, with the words marked, and links to it. Nothing is
   fetched, so it works from file:// as well. */
"use strict";
(() => {
  const W = {
    title: 100, heading: 30, taught: 60, body: 1, bodyMax: 20,
    phraseTitle: 1000, phraseTaught: 500, phraseHeading: 200,
  };
  const HAN = /[\u3400-\u9fff\uf900-\ufaff]/;

  // Lower case, no accents, every run of punctuation and spaces one space: "dot-product" and
  // "dot product" are the same words; Chinese punctuation too.
  const norm = (s) =>
    s.normalize("NFKC").toLowerCase().replace(/[^\p{L}\p{N}_]+/gu, " ").trim();

  // The query's parts: each Latin word, and each run of Chinese characters.
  const parts = (q) => {
    const found = [];
    for (const m of norm(q).matchAll(/[\u3400-\u9fff\uf900-\ufaff]+|[^\s\u3400-\u9fff\uf900-\ufaff]+/g))
      if (!found.includes(m[0])) found.push(m[0]);
    return found;
  };

  // A Latin word's forms (a plural found as its singular); a Chinese run as it is.
  const forms = (w) => {
    if (HAN.test(w)) return [w];
    const f = [w];
    if (w.length > 4 && w.endsWith("ies")) f.push(w.slice(0, -3) + "y");
    else if (w.length > 4 && w.endsWith("es")) f.push(w.slice(0, -2));
    if (w.length > 3 && w.endsWith("s") && !w.endsWith("ss")) f.push(w.slice(0, -1));
    return f;
  };

  const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  // A Latin word is found where a word starts (so "head" is not found in "ahead"); Chinese anywhere.
  const pattern = (w) =>
    new RegExp(forms(w).map((f) => (HAN.test(f) ? escape(f) : "(?<![\\p{L}\\p{N}])" + escape(f))).join("|"), "gu");

  const count = (re, text, limit) => {
    re.lastIndex = 0;
    let n = 0;
    while (n < limit && re.exec(text)) n++;
    return n;
  };

  // Pages prepared once: their texts normalised.
  const prepared = () =>
    window.courseSearchIndex.pages.map((p) => ({
      ...p,
      nTitle: norm(p.title),
      secs: p.sections.map((s) => ({
        ...s,
        nHeading: norm(s.heading),
        nText: norm(s.text) + " " + norm(s.code || ""),
        nTerms: (s.terms || "").split(" · ").map(norm),
      })),
    }));

  // How much a part counts on a page, and in which section most; 0 if it is not there.
  const scorePart = (page, re) => {
    let headings = 0;
    let taught = 0;
    let body = 0;
    let best = null;
    for (const s of page.secs) {
      const t = s.nTerms.some((term) => count(re, term, 1)) ? 1 : 0;
      taught += t;
      const h = count(re, s.nHeading, 1) + t;
      const b = count(re, s.nText, W.bodyMax);
      headings += h;
      body += b;
      const here = h * W.bodyMax + b;
      if (here && (!best || here > best.here)) best = { s, here };
    }
    const title = count(re, page.nTitle, 1);
    if (!title && !headings && !body) return null;
    const score =
      title * W.title +
      (taught ? W.taught : 0) +
      (headings ? W.heading + 5 * Math.min(headings - 1, 4) : 0) +
      Math.min(body, W.bodyMax) * W.body +
      Math.log1p(body);
    return { score, best };
  };

  const bigrams = (run) => {
    const found = [];
    for (let i = 0; i + 1 < run.length; i++) found.push(run.slice(i, i + 2));
    return found;
  };

  const search = (pages, query) => {
    const words = parts(query);
    if (!words.length) return [];
    const phrase = norm(query);
    const anywhere = (w) => pages.some((p) => scorePart(p, pattern(w)));
    // A Chinese run found on no page as a whole: its pairs of characters, each required.
    const terms = words.flatMap((w) => (HAN.test(w) && w.length > 2 && !anywhere(w) ? bigrams(w) : [w]));
    const res = [];
    for (const page of pages) {
      let total = 0;
      let best = null;
      let ok = true;
      for (const t of terms) {
        const got = scorePart(page, pattern(t));
        if (!got) {
          ok = false;
          break;
        }
        total += got.score;
        if (got.best && (!best || got.best.here > best.here)) best = got.best;
      }
      if (!ok) continue;
      // The query as typed in the title: the more of the title it is, the more it counts.
      if (page.nTitle.includes(phrase)) total += (W.phraseTitle * phrase.length) / page.nTitle.length;
      // The query is one of the glossary's words for a section here: what it teaches.
      const exact = page.secs.find((s) => s.nTerms.includes(phrase));
      const term = exact || page.secs.find((s) => s.nTerms.some((t) => t.includes(phrase)));
      if (term) {
        total += exact ? 2 * W.phraseTaught : W.phraseTaught / 2;
        best = { s: term, here: Infinity };
      }
      const head = page.secs.find((s) => s.nHeading.includes(phrase));
      if (head) {
        total += W.phraseHeading;
        best = { s: head, here: Infinity };
      }
      if (page.reference) total /= 10;
      res.push({ page, score: total, section: best ? best.s : null });
    }
    return res.sort((a, b) => b.score - a.score);
  };

  // The excerpt: about 240 characters of the section around the first word found, words marked.
  const excerpt = (text, words) => {
    const res = words.map(pattern);
    let at = -1;
    for (const re of res) {
      re.lastIndex = 0;
      const m = re.exec(text.toLowerCase());
      if (m && (at < 0 || m.index < at)) at = m.index;
    }
    const start = Math.max(0, at - 80);
    const piece = (start ? "…" : "") + text.slice(start, start + 240) + (start + 240 < text.length ? "…" : "");
    const p = document.createElement("p");
    p.className = "context";
    const marks = new RegExp(words.flatMap(forms).map(escape).join("|"), "gi");
    let last = 0;
    for (const m of piece.matchAll(marks)) {
      p.append(piece.slice(last, m.index));
      const mark = p.appendChild(document.createElement("mark"));
      mark.textContent = m[0];
      last = m.index + m[0].length;
    }
    p.append(piece.slice(last));
    return p;
  };

  const show = (query) => {
    const out = document.getElementById("search-results");
    if (!out) return;
    out.replaceChildren();
    const zh = document.documentElement.lang.startsWith("zh");
    const h2 = out.appendChild(document.createElement("h2"));
    h2.textContent = zh ? "搜索结果" : "Search results";
    const summary = out.appendChild(document.createElement("p"));
    summary.className = "search-summary";
    const list = out.appendChild(document.createElement("ul"));
    list.className = "search";
    list.setAttribute("role", "list");
    if (!window.courseSearchIndex) {
      summary.textContent = zh
        ? "搜索索引没有加载。请在网站文件夹中运行 python -m http.server，然后打开 http://localhost:8000/。"
        : "The search index did not load. Serve the site: run python -m http.server in its folder and open http://localhost:8000/.";
      return;
    }
    const found = search(prepared(), query);
    const words = parts(query);
    summary.textContent = zh
      ? `找到 ${found.length} 个页面。`
      : `Found ${found.length} page${found.length === 1 ? "" : "s"}.`;
    for (const r of found) {
      const li = list.appendChild(document.createElement("li"));
      const a = li.appendChild(document.createElement("a"));
      const sec = r.section;
      a.href = r.page.url + (sec && sec.id && sec.heading && sec !== r.page.secs[0] ? "#" + sec.id : "");
      a.textContent = r.page.title + (sec && sec !== r.page.secs[0] && sec.heading ? " › " + sec.heading : "");
      a.dataset.score = r.score.toFixed(1);
      if (sec) li.appendChild(excerpt(sec.text || sec.heading, words));
    }
  };

  window.courseSearch = {
    search: (q) => search(prepared(), q).map((r) => r.page.url),
    ranked: (q) => search(prepared(), q).map((r) => [r.page.url, Math.round(r.score)]),
  };
  document.addEventListener("DOMContentLoaded", () => {
    const query = new URLSearchParams(window.location.search).get("q") || "";
    for (const input of document.querySelectorAll('input[name="q"]')) input.value = query;
    if (query.trim()) show(query);
  });
})();
