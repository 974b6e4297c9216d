"""Three pictures of the Chinese edition in JupyterLab, for the README (`make screenshots`): a
check naming a slip, a hint opened, and the Tang-poem model's attention map with its characters.
Not a test of its own (its name does not start with test_): `make screenshots` runs it by name,
and each step still asserts what it photographs, so a picture of English or of an error fails.
"""

import re

from notebook_ui import NOTEBOOK as IN_FRONT
from notebook_ui import code_cell_index, open_notebook, run_cell
from playwright.sync_api import expect
from test_exercise_flow import BODY, STUB_LINE

HAN = re.compile(r"[\u4e00-\u9fff]")
EXERCISE = "zh/03_scaled_attention.ipynb"
WRONG = BODY.format(dim=-2)  # the softmax over the queries: the slip the check names
TANG = "zh/08_logits.ipynb"
TANG_LINE = "tang_maps = tang_model.attention_maps"  # the cell drawing the Tang model's attention


def _shot(page, locator, path) -> None:
    locator.scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    locator.screenshot(path=str(path))


def test_chinese_check_hint_and_tang_map(page, lab, artifacts):
    notebook = lab.root / EXERCISE
    open_notebook(page, lab.url, EXERCISE)
    cells = page.locator(f"{IN_FRONT} .jp-CodeCell")
    run_cell(page, cells.nth(0))  # the imports and set_language("zh")
    stub = cells.nth(code_cell_index(notebook, STUB_LINE))
    stub.locator(".cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(WRONG)
    run_cell(page, stub)
    output = stub.locator(".jp-OutputArea-output").first
    expect(output).to_contain_text("✗ causal_attention")
    assert HAN.search(output.inner_text()), output.inner_text()
    _shot(page, stub, artifacts / "zh-check.png")

    hint = page.locator(f"{IN_FRONT} .jp-MarkdownCell summary", has_text="提示 1").first
    hint.click()
    details = hint.locator("xpath=..")
    expect(details).to_have_attribute("open", "")
    _shot(page, details.locator("xpath=ancestor::div[contains(@class,'jp-MarkdownCell')]"),
          artifacts / "zh-hint.png")  # fmt: skip

    open_notebook(page, lab.url, TANG)
    tang = lab.root / TANG
    cell = page.locator(f"{IN_FRONT} .jp-CodeCell").nth(code_cell_index(tang, TANG_LINE))
    image = cell.locator(".jp-OutputArea-output img").first
    expect(image).to_be_visible()
    _shot(page, cell.locator(".jp-Cell-outputWrapper"), artifacts / "zh-tang.png")
