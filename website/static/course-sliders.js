/* The course's sliders on the website: each .course-frames block holds every frame its widget
   drew at build time (website/frames.py); moving its range inputs or checkbox shows the frame
   for those values. Nothing is fetched: the pictures are files of the site. */
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  for (const block of document.querySelectorAll(".course-frames")) {
    const frames = JSON.parse(block.querySelector(".course-frames-data").textContent);
    const inputs = [...block.querySelectorAll(".course-frames-controls input")];
    const parts = (name) => block.querySelector(".course-frames-" + name);
    const show = () => {
      const key = inputs.map((i) => (i.type === "checkbox" ? Number(i.checked) : i.value));
      for (const i of inputs) {
        if (i.type === "range") {
          const label = JSON.parse(i.dataset.labels)[i.value];
          i.setAttribute("aria-valuetext", label);
          i.parentElement.nextElementSibling.textContent = label;
        }
      }
      const frame = frames[key.join("-")];
      parts("pictures").innerHTML = frame.pictures;
      parts("caption").innerHTML = frame.caption;
      parts("text").textContent = frame.text;
      block.dataset.frame = key.join("-");
    };
    for (const i of inputs) i.addEventListener("input", show);
    parts("controls").hidden = false;
  }
});
