/* The two menu buttons (the chapter list, the page's contents) in the article's bar. The
   theme's script listens to the first button of each kind on the page, a copy in a header the
   book theme hides, so the buttons a reader sees did nothing, on a phone above all. Each visible
   button hands its click to that first one (the theme then opens its dialog on a phone, or folds
   the sidebar on a wide screen); a link followed inside an open dialog closes it, so the page
   shows the heading it jumped to. */
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  for (const kind of ["primary", "secondary"]) {
    const [bound, ...seen] = document.querySelectorAll(`.${kind}-toggle`);
    for (const button of seen) {
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        bound.click();
      });
    }
  }
  for (const dialog of document.querySelectorAll("dialog[id$='-sidebar-modal']")) {
    dialog.addEventListener("click", (event) => {
      if (event.target.closest("a[href]") && dialog.open) dialog.close();
    });
  }
});
