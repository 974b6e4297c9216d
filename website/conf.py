"""Sphinx's configuration for one edition of the course's website (see website/build.py).

The edition comes from the environment: COURSE_EDITION is "en" or "zh". Notebooks are rendered
by myst-nb as stored, never executed; the theme is sphinx-book-theme; formulas are typeset by a
MathJax 3 copied into the site (TeX in, CommonHTML out, its web fonts beside it). Sphinx still
writes its own search index; website/build.py replaces its search with the course's.
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
EDITION = os.environ.get("COURSE_EDITION", "en")
OTHER = "zh" if EDITION == "en" else "en"
NAMES = {"en": "English", "zh": "中文"}

project = {"en": "A small GPT, notebook by notebook", "zh": "从零读懂一个小 GPT：逐个笔记本"}[
    EDITION
]
author = "the course's authors"
copyright = "MIT licence"
language = "zh_CN" if EDITION == "zh" else "en"
html_search_language = "zh" if EDITION == "zh" else "en"
if EDITION == "zh":  # Sphinx splits Chinese into words with jieba: quietly
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)

extensions = ["myst_nb", "sphinx_copybutton"]
nb_execution_mode = "off"  # the stored outputs are the course's: never re-executed here
nb_merge_streams = True
smartquotes = False  # the notebooks' own quotation marks, as in JupyterLab
nb_render_markdown_format = "myst"
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 4
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type", "misc.highlighting_failure"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

html_theme = "sphinx_book_theme"
html_title = project
html_static_path = [str(HERE / "static")]
# course-icons.css is written by website/build.py after Sphinx (the icons the pages use)
html_css_files = ["course.css", "course-icons.css"]
html_js_files = [
    ("course-sliders.js", {"defer": "defer"}),  # the sliders' frames
    ("course-menus.js", {"defer": "defer"}),  # the menu buttons, on a phone too
]
html_favicon = str(HERE / "static" / "favicon.svg")
html_templates_path = []
templates_path = [str(HERE / "templates")]
html_sourcelink_suffix = ""  # the download is the notebook itself, NN_topic.ipynb
html_copy_source = True
html_show_sphinx = False
html_last_updated_fmt = None
html_context = {
    "course_other": OTHER,
    "course_other_name": NAMES[OTHER],
    "default_mode": "auto",  # light or dark as the reader's system says; a switch is in the bar
}
html_theme_options = {
    "use_download_button": True,
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "article_header_end": ["course-language.html", "article-header-buttons.html"],
    "show_prev_next": True,
}
# A MathJax 3 of the site's own, as components (website/build.py copies them into _static/mathjax/):
# TeX in, CommonHTML out with MathJax's own web fonts; no menu, no speech. Sphinx puts it on the
# pages with a formula only.
mathjax_path = "mathjax/startup.js"
mathjax3_config = {
    "loader": {"load": ["input/tex", "output/chtml"]},
    "options": {"enableMenu": False},
}


def setup(app):
    """Chinese search as Sphinx 9.0 means it: its script sets the stemmer to ChineseStemmer, which
    it never defines (the stemmer it ships for Chinese is the English one, for Latin words)."""
    from sphinx import search
    from sphinx.search.zh import SearchChinese

    class Chinese(SearchChinese):
        language_name = "English"  # names the stemmer the script defines: EnglishStemmer

    search.languages["zh"] = Chinese
    return {"parallel_read_safe": True}
