// Typesets the site's formulas once, at build time (website/build.py, prerender_math): reads
// a JSON list of [tex, display] from the file named by its first argument and writes to stdout
// JSON {"html": [...], "css": "..."}: MathJax 3's CommonHTML markup for each formula and the one
// style sheet they all need (its web fonts under the URL given as the second argument). MathJax
// is the one the pinned sphinx-mathjax-offline ships, folder given as the third argument.
"use strict";
const fs = require("fs");
const [list, fontURL, root] = process.argv.slice(2);
const MathJax = require(root + "/node-main.js");
MathJax.init({
  loader: { load: ["input/tex", "output/chtml", "adaptors/liteDOM"] },
  chtml: { fontURL },
}).then((MathJax) => {
  const adaptor = MathJax.startup.adaptor;
  const html = JSON.parse(fs.readFileSync(list, "utf8")).map(([tex, display]) =>
    adaptor.outerHTML(MathJax.tex2chtml(tex, { display })),
  );
  const css = adaptor.textContent(MathJax.chtmlStylesheet());
  process.stdout.write(JSON.stringify({ html, css }));
}).catch((error) => {
  console.error(error);
  process.exit(1);
});
