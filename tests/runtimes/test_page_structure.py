"""The page's structure (runtimes.page_structure, page_snapshot) in real Chromium on Xvnc.

Boxes are checked by clicking their centres through real X input (our VNC client to the
display) and seeing the page react; the page is read over DevTools only to see results.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from runtimes.base import PointerEvent
from runtimes.page_snapshot import observe_snapshot
from runtimes.page_structure import (
    BID_ATTRIBUTE,
    MAX_OBSERVATION_BYTES,
    MAX_VALUE_CHARS,
    Element,
    PageStructure,
    install_click_hook,
    locate,
    observe,
)
from runtimes.web_actor import WebActor
from tests.runtimes.webpage import TIMEOUT, Kiosk, kiosk

try:
    import runtimes.browser  # noqa: F401  (miniwob, Xvnc and Chromium)
except ModuleNotFoundError as exc:
    MISSING: str | None = str(exc)
else:
    MISSING = None

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _browser_installed() -> None:
    if MISSING is not None:
        pytest.skip(MISSING)


def click_at(page: Kiosk, x: float, y: float) -> None:
    x, y = round(x), round(y)
    page.inject([PointerEvent(x, y, 0), PointerEvent(x, y, 1), PointerEvent(x, y, 0)])


async def page_box(page: Kiosk, selector: str) -> list[float]:
    return await page.value(  # type: ignore[no-any-return]
        f"(() => {{ const r = document.querySelector({selector!r}).getBoundingClientRect(); "
        "return [r.x, r.y, r.width, r.height]; })()"
    )


def one(structure: PageStructure, **criteria: object) -> Element:
    found = structure.find(**criteria)
    assert len(found) == 1, (criteria, [e.bid for e in found], structure.text())
    return found[0]


async def test_click_test_button_is_where_the_structure_says_on_the_screen() -> None:
    async with kiosk() as page:
        await page.load_task("click-test", seed=5)
        structure = await observe(page.cdp)
        button = one(structure, role="button", name="Click Me!")
        assert button.tag == "button" and button.clickable and button.visibility == 1
        assert button.id == "subbtn"
        attribute = f"document.getElementById('subbtn').getAttribute('{BID_ATTRIBUTE}')"
        assert await page.value(attribute) == button.bid
        # Screen pixels = page pixels here (kiosk at 0, 0, scale 1): the page agrees ...
        assert list(button.bbox) == pytest.approx(await page_box(page, "#subbtn"), abs=0.06)
        assert structure.url.endswith("click-test.html") and structure.title == "Click Test Task"
        assert f"\t[{button.bid}] button 'Click Me!', clickable" in structure.text().splitlines()
        # ... and X agrees: a click at the box's centre is the button's.
        click_at(page, *button.centre)
        await page.cdp.wait_for("WOB_DONE_GLOBAL === true", TIMEOUT)
        assert await page.value("WOB_REWARD_GLOBAL") > 0


async def test_an_origin_moves_every_box_and_point() -> None:
    async with kiosk() as page:
        await page.load_task("click-test", seed=5)
        here = one(await observe(page.cdp), role="button")
        there = one(await observe(page.cdp, origin=(100, 40)), role="button")
        assert there.bbox[:2] == pytest.approx((here.bbox[0] + 100, here.bbox[1] + 40))
        assert there.point == pytest.approx((here.point[0] + 100, here.point[1] + 40))  # type: ignore[index]


async def test_click_checkboxes_are_named_by_their_labels_and_clicking_their_boxes_checks_them() -> None:
    async with kiosk() as page:
        instruction = await page.load_task("click-checkboxes", seed=3)
        structure = await observe(page.cdp)
        boxes = structure.find(role="checkbox")
        expected = await page.value(
            "Array.from(document.querySelectorAll('#boxes label')).map(l => l.textContent.trim())"
        )
        assert [b.name for b in boxes] == expected and len(boxes) >= 2
        assert all(b.checked is False and b.visible and b.clickable for b in boxes)
        assert "Select" in instruction
        for box in boxes:
            click_at(page, *box.centre)
        await page.cdp.wait_for(
            "Array.from(document.querySelectorAll('#boxes input')).every(i => i.checked)", TIMEOUT
        )
        again = await observe(page.cdp)
        assert [again.get(b.bid).checked for b in boxes] == [True] * len(boxes)  # type: ignore[union-attr]
        assert f"[{boxes[0].bid}] checkbox {boxes[0].name!r}, checked=True, clickable" in again.text()


async def test_enter_text_field_takes_focus_from_a_click_on_its_box() -> None:
    async with kiosk() as page:
        await page.load_task("enter-text", seed=2)
        structure = await observe(page.cdp)
        field = one(structure, role="textbox")
        submit = one(structure, role="button", name="Submit")
        assert field.tag == "input" and field.type == "text" and field.value == ""
        assert not field.focused and structure.focused is None
        assert field.bbox[1] + field.bbox[3] <= submit.bbox[1] + submit.bbox[3]
        click_at(page, *field.centre)
        await page.cdp.wait_for("document.activeElement.id === 'tt'", TIMEOUT)
        after = await observe(page.cdp)
        assert after.focused == field.bid and after.get(field.bid).focused  # type: ignore[union-attr]
        assert f"\t[{field.bid}] textbox '', focused, clickable" in after.text().splitlines()


async def test_bids_stay_with_their_elements_and_new_elements_get_new_ones() -> None:
    async with kiosk() as page:
        await page.load_task("click-checkboxes", seed=4)
        first = await observe(page.cdp)
        second = await observe(page.cdp)
        assert [(e.bid, e.tag, e.name) for e in first] == [(e.bid, e.tag, e.name) for e in second]
        bids = {e.bid for e in first}
        # The page adds a button and copies a label the way MiniWoB does (innerHTML +=,
        # which copies the bid attribute of the checkbox inside it into a new element).
        await page.value(
            "const b = document.createElement('button'); b.textContent = 'New';"
            "document.getElementById('area').appendChild(b);"
            "const l = document.querySelector('#boxes label'); l.innerHTML += ' more'; 0"
        )
        third = await observe(page.cdp)
        new = one(third, role="button", name="New")
        assert new.bid not in bids
        assert len({e.bid for e in third}) == len(third.elements)  # no bid twice
        submit = one(first, role="button", name="Submit")
        assert third.get(submit.bid).name == "Submit"  # type: ignore[union-attr]
        copies = await page.value(f"document.querySelectorAll('#boxes input[{BID_ATTRIBUTE}]').length")
        assert copies == len(third.find(role="checkbox"))
        # A new episode may number the page afresh: a0 is the document element again.
        fresh = await observe(page.cdp, reset=True)
        assert fresh.elements[0].bid == "a0" and fresh.elements[0].tag == "html"


async def test_hidden_covered_and_offscreen_elements_are_not_visible(tmp_path: Path) -> None:
    html = tmp_path / "page.html"
    html.write_text(
        "<!DOCTYPE html><html><head><title>Vis</title></head><body style='margin:0'>"
        "<button id='shown' style='position:absolute;left:10px;top:10px'>Shown</button>"
        "<button id='gone' style='display:none'>Gone</button>"
        "<button id='ghost' style='visibility:hidden'>Ghost</button>"
        "<button id='under' style='position:absolute;left:100px;top:10px;width:60px'>Under</button>"
        "<div id='lid' style='position:absolute;left:90px;top:0;width:100px;height:50px;"
        "background:red'></div>"
        "<button id='half' style='position:absolute;left:300px;top:10px;width:80px'>Half</button>"
        "<div style='position:absolute;left:340px;top:0;width:100px;height:60px;background:red'></div>"
        "<button id='far' style='position:absolute;left:10px;top:2000px'>Far</button>"
        "</body></html>"
    )
    async with kiosk() as page:
        await page.load_html(html)
        structure = await observe(page.cdp)
        by_id = {e.id: e for e in structure if e.id}
        assert by_id["shown"].visibility == 1 and by_id["shown"].point is not None
        assert not by_id["gone"].shown and by_id["gone"].visibility == 0
        assert not by_id["ghost"].shown and by_id["ghost"].visibility == 0
        assert by_id["under"].shown and by_id["under"].visibility == 0 and by_id["under"].point is None
        assert 0 < by_id["half"].visibility < 1 and by_id["half"].point is not None
        assert by_id["half"].point[0] < 340  # a point where a click reaches it, left of the lid
        assert by_id["far"].shown and by_id["far"].visibility == 0 and by_id["far"].bbox[1] == 2000
        text = structure.text()
        assert "Gone" not in text and "Ghost" not in text  # not rendered: not in the tree
        assert f"[{by_id['far'].bid}] button 'Far', clickable, hidden" in text
        # locate() reads the same elements as they are now.
        now = await locate(page.cdp, [by_id["half"].bid, "a99999"])
        half = by_id["half"]
        assert list(now) == [half.bid] and now[half.bid].visibility == half.visibility


async def test_a_fields_value_is_exactly_what_the_page_holds(tmp_path: Path) -> None:
    """Values keep their whitespace and newlines (names and texts are squashed; a value
    is data an agent reads back or copies), are cut only past MAX_VALUE_CHARS and then
    say so; and MiniWoB's copy-paste, whose text ends in a space, is won by copying the
    observed value verbatim."""
    html = tmp_path / "fields.html"
    html.write_text(
        "<!DOCTYPE html><html><head><title>Fields</title></head><body>"
        "<input id='spaced' value='a  b '><textarea id='lines'>\nline one\n  two  \n</textarea>"
        "<input id='long'><script>document.getElementById('long').value = "
        f"'x'.repeat({MAX_VALUE_CHARS + 5});</script></body></html>"
    )
    async with kiosk() as page:
        await page.load_html(html)
        for structure in (await observe(page.cdp), await observe_snapshot(page.cdp)):
            by_id = {e.id: e for e in structure if e.id}
            assert by_id["spaced"].value == "a  b " and not by_id["spaced"].value_cut
            if structure.method == "dom":  # (DOMSnapshot has no value for an unedited textarea)
                assert by_id["lines"].value == "line one\n  two  \n"
            assert by_id["long"].value == "x" * MAX_VALUE_CHARS and by_id["long"].value_cut
            body = {e["id"]: e for e in structure.observation()["elements"] if "id" in e}
            assert body["spaced"]["value"] == "a  b " and "value_cut" not in body["spaced"]
            assert body["long"]["value_cut"] is True
        tree = (await observe(page.cdp)).text()
        assert "value='a  b '" in tree and "value='line one\\n  two  \\n'" in tree  # quoted
        assert "value_cut" in next(line for line in tree.splitlines() if "xxxx" in line)

        await page.load_task("copy-paste", seed=4)
        structure = await observe(page.cdp)
        source = one(structure, id="to-copy")
        assert source.value is not None and source.value != " ".join(source.value.split())
        answer, submit = one(structure, id="answer-input"), one(structure, role="button", name="Submit")
        actor = WebActor(page.cdp, page.inject)
        result = await actor.run(f"fill('{answer.bid}', {source.value!r})\nclick('{submit.bid}')")
        assert result.error is None
        await page.cdp.wait_for("WOB_DONE_GLOBAL === true", TIMEOUT)
        assert await page.value("WOB_RAW_REWARD_GLOBAL") == 1


async def test_the_observation_body_is_json_within_its_limit_and_says_when_cut(tmp_path: Path) -> None:
    rows = "".join(f"<div><a href='#{i}'>link {i}</a> <input value='v{i}'></div>" for i in range(2500))
    html = tmp_path / "large.html"
    html.write_text(f"<!DOCTYPE html><html><head><title>Large</title></head><body>{rows}</body></html>")
    async with kiosk() as page:
        await page.load_task("click-test", seed=1)
        small = (await observe(page.cdp)).observation()
        assert not small["truncated"] and small["omitted"] == 0
        assert set(small) >= {"url", "title", "origin", "viewport", "scroll", "focused", "axtree",
                              "elements", "truncated", "omitted"}
        assert json.loads(orjson.dumps(small)) == small
        assert {"bid", "tag", "role", "name", "text", "bbox", "visibility", "clickable",
                "focused", "parent"} <= set(small["elements"][0])

        await page.load_html(html)
        structure = await observe(page.cdp)
        assert len(structure.elements) + structure.omitted >= 7500
        body = structure.observation()
        assert len(orjson.dumps(body)) <= MAX_OBSERVATION_BYTES and body["truncated"]
        tight = structure.observation(max_bytes=20_000)
        assert len(orjson.dumps(tight)) <= 20_000 and tight["truncated"]
        assert tight["omitted"] > structure.omitted
        assert tight["axtree"].splitlines()[-1].endswith("lines cut (MAX_TREE_BYTES) ...]")
        assert all(e["visibility"] > 0 for e in tight["elements"])  # hidden ones went first


async def test_listeners_added_by_scripts_make_elements_clickable_once_hooked(tmp_path: Path) -> None:
    html = tmp_path / "hook.html"
    html.write_text(
        "<!DOCTYPE html><html><body><span id='s'>plain</span><script>"
        "document.getElementById('s').addEventListener('click', () => document.title = 'hit');"
        "</script></body></html>"
    )
    async with kiosk() as page:
        await page.load_html(html)
        span = one(await observe(page.cdp), id="s")
        assert not span.clickable
        await install_click_hook(page.cdp)
        await page.cdp.reload()
        span = one(await observe(page.cdp), tag="span")
        assert span.clickable and span.name == "plain"  # a clickable generic is named by its text


async def test_the_snapshot_way_agrees_with_the_walk() -> None:
    async with kiosk() as page:
        await page.load_task("click-checkboxes", seed=3)
        walk = await observe(page.cdp)
        snapshot = await observe_snapshot(page.cdp)
        assert snapshot.method == "snapshot"
        for element in walk.find(role="checkbox") + walk.find(role="button"):
            other = snapshot.get(element.bid)
            assert other is not None and other.role == element.role and other.name == element.name
            assert other.bbox == pytest.approx(element.bbox, abs=0.1)
            assert other.visibility == element.visibility and other.clickable
        text = snapshot.text()
        first = walk.find(role="checkbox")[0]
        assert f"[{first.bid}] checkbox {first.name!r}, checked=False, clickable" in text
        assert text.splitlines()[0].startswith("RootWebArea 'Click Checkboxes Task'")  # no bid


async def test_set_of_marks_draws_a_box_and_bid_on_each_visible_clickable_element() -> None:
    from runtimes.marks import BOX_COLOUR, draw_marks, marked
    from runtimes.page_clock import decode_png

    async with kiosk() as page:
        await page.load_task("click-checkboxes", seed=3)
        structure = await observe(page.cdp)
        frame = decode_png(await page.cdp.screenshot_png((0, 0, 160, 210)), 210, 160)
        out = draw_marks(frame, structure)
        targets = [e for e in structure if e.clickable and e.visible and e.bbox[0] < 160]
        expected = {e.bid for e in structure if e.clickable and e.visible}
        assert {bid for bid, _ in marked(structure)} == expected
        assert out.shape == frame.shape and not (out == frame).all()
        for element in targets:
            x, y, w, h = (round(v) for v in element.bbox)
            right, bottom = min(x + w - 1, 159), min(y + h - 1, 209)
            assert tuple(out[bottom, right]) == BOX_COLOUR  # the box's corner
            assert tuple(out[y + h // 2, x]) == BOX_COLOUR  # its left edge
        hidden = [e for e in structure if not e.visible]
        everything = {bid for bid, _ in marked(structure, clickable_only=False)}
        assert hidden and not {e.bid for e in hidden} & everything
        # The agent's side has the observation's dicts, not Elements: same marks.
        assert (draw_marks(frame, structure.observation()["elements"]) == out).all()
