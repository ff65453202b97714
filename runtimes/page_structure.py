"""What a web agent reads: the page's elements with stable ids, read over DevTools.

Holds :func:`observe` (one ``Runtime.evaluate`` that walks the DOM: every element gets a
``bid`` attribute once, and comes back with its tag, role, name, text, value, bounding
box in *screen* pixels, visibility, clickability and state), :class:`PageStructure` (what
it read, with :meth:`~PageStructure.observation`, the JSON body of ``v0.env.observation``,
and :meth:`~PageStructure.text`, the accessibility tree as text in BrowserGym's
flattened style), :class:`Element`, :func:`install_click_hook` and the limits.

**Bids.** Every element gets ``bid="aN"`` (:data:`BID_ATTRIBUTE`, :data:`BID_PREFIX`)
the first time an observation sees it, and keeps it for the life of the document; new
elements get new numbers. The page remembers which element owns which number (a
``WeakMap``), so an element the page copies (``cloneNode``, ``innerHTML +=``) gets its
own number instead of its original's; ``observe(reset=True)`` numbers the document
afresh from ``a0`` (a new episode, so that the same seed gives the same bids).

**Screen coordinates.** Boxes are the page's CSS pixels times ``devicePixelRatio`` plus
``origin``, where the page's (0, 0) is on the screen: (0, 0) for a kiosk window at the
top left (MiniWoB here). A served frame that starts elsewhere subtracts its own origin.

**Visible and clickable.** ``visibility`` is the share of 9 points spread over the box
(the centre first) where ``document.elementFromPoint`` finds the element or one of its
descendants: 0 for an element hidden, covered, or outside the viewport; ``point`` is
the first such point, where a click reaches it. ``clickable``: a button, link, form
control, label or summary, an ARIA widget role, an ``onclick``, a ``cursor: pointer``
that its parent does not have, or a click-like listener added by script (seen only in
documents loaded after :func:`install_click_hook`).

Why JavaScript in the page and not DevTools' ``DOMSnapshot`` + ``Accessibility``
(BrowserGym's way, :mod:`runtimes.page_snapshot`): see docs/browser.md for the measured
cost of each; the walk is one round trip, costs a few ms on a task page, and gives
visibility by hit-testing, which a snapshot cannot.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from .cdp import CALL_TIMEOUT, CDPClient, CDPError

#: Element ids the walk leaves out with everything inside (never numbered, never in the
#: observation): MiniWoB's reward display for people watching ("Last reward", "Episodes
#: done", "Time left"), which carries earlier episodes' outcomes into the page text, so
#: the same seed's text differed run to run (BrowserGym and MiniWoB's own DOM reader
#: leave it out too).
LEFT_OUT_IDS: Final = ("reward-display",)
#: The attribute each element's id is kept in (BrowserGym's name for it).
BID_ATTRIBUTE: Final = "bid"
#: Bids are this prefix and a number: ``a0``, ``a1``, ... (BrowserGym prefixes by frame).
BID_PREFIX: Final = "a"
#: The page's bid state and the click hook's set, under these globals (not enumerable).
STATE_GLOBAL: Final = "__universeBids"
HOOK_GLOBAL: Final = "__universeClickable"
#: Elements one observation describes (the first in document order); the rest are
#: counted in ``omitted``. Bids are given to all of them.
MAX_ELEMENTS: Final = 3000
#: Characters kept of a name or a text, whitespace collapsed (longer ones end with "…").
MAX_TEXT_CHARS: Final = 200
#: Characters kept of a form control's value, exactly as the page holds it (whitespace
#: and newlines kept); a longer value is cut there and its element says ``value_cut``.
MAX_VALUE_CHARS: Final = 10_000
#: Bytes of an observation's JSON (``v0.env.observation`` body), tree text included:
#: well under the rewarder's 4 MiB limit of a server message.
MAX_OBSERVATION_BYTES: Final = 512 * 1024
#: Bytes of the text tree alone (about 30k tokens for a language model).
MAX_TREE_BYTES: Final = 128 * 1024
#: Seconds an observation may take (a 5,000-element page takes a few tens of ms).
OBSERVE_TIMEOUT: Final = CALL_TIMEOUT

#: Element states the text tree shows after the name, in this order.
TREE_STATES: Final = ("focused", "checked", "selected", "expanded", "disabled", "required")

_WALK_JS: Final = r"""
(opts) => {
  const ATTR = opts.attr, PREFIX = opts.prefix, MAXTEXT = opts.maxText;
  let st = window[opts.state];
  if (st === undefined || opts.reset) {
    st = {next: 0, owned: new WeakMap()};
    Object.defineProperty(window, opts.state, {value: st, configurable: true, writable: true});
  }
  const hooked = window[opts.hook];
  const SKIP = new Set(['SCRIPT', 'STYLE', 'HEAD', 'META', 'LINK', 'TITLE', 'NOSCRIPT',
                        'TEMPLATE', 'BASE']);
  const LEFT_OUT = new Set(opts.leftOut);
  const walked = (c) => !SKIP.has(c.tagName.toUpperCase()) && !(c.id && LEFT_OUT.has(c.id));
  const WIDGETS = new Set(['button', 'link', 'checkbox', 'radio', 'switch', 'tab', 'menuitem',
    'menuitemcheckbox', 'menuitemradio', 'option', 'combobox', 'textbox', 'searchbox',
    'slider', 'spinbutton', 'listbox', 'treeitem', 'gridcell']);
  const FROM_CONTENT = new Set(['button', 'link', 'heading', 'cell', 'gridcell', 'option',
    'menuitem', 'menuitemcheckbox', 'menuitemradio', 'tab', 'treeitem', 'columnheader',
    'rowheader', 'tooltip', 'LabelText', 'checkbox', 'radio', 'switch', 'DisclosureTriangle',
    'legend', 'caption', 'figcaption']);
  const INPUT_ROLES = {checkbox: 'checkbox', radio: 'radio', button: 'button', submit: 'button',
    reset: 'button', image: 'button', range: 'slider', number: 'spinbutton',
    search: 'searchbox', color: 'ColorWell', file: 'button', date: 'textbox'};
  const TAG_ROLES = {A: 'link', BUTTON: 'button', TEXTAREA: 'textbox', OPTION: 'option',
    H1: 'heading', H2: 'heading', H3: 'heading', H4: 'heading', H5: 'heading', H6: 'heading',
    IMG: 'img', UL: 'list', OL: 'list', LI: 'listitem', TABLE: 'table', TR: 'row', TD: 'cell',
    TH: 'columnheader', FORM: 'form', NAV: 'navigation', MAIN: 'main', HEADER: 'banner',
    FOOTER: 'contentinfo', ASIDE: 'complementary', DIALOG: 'dialog', LABEL: 'LabelText',
    P: 'paragraph', PROGRESS: 'progressbar', METER: 'meter', FIELDSET: 'group',
    DETAILS: 'group', SUMMARY: 'DisclosureTriangle', HR: 'separator', IFRAME: 'Iframe',
    CANVAS: 'Canvas', SVG: 'graphics-document', LEGEND: 'legend', CAPTION: 'caption',
    FIGURE: 'figure', FIGCAPTION: 'figcaption', ARTICLE: 'article', SECTION: 'region',
    OUTPUT: 'status', BODY: 'generic', HTML: 'RootWebArea'};
  const squash = (s) => {
    s = (s || '').replace(/\s+/g, ' ').trim();
    return s.length > MAXTEXT ? s.slice(0, MAXTEXT - 1) + '\u2026' : s;
  };
  const MAXVALUE = opts.maxValue;
  const role = (el, tag) => {
    const explicit = el.getAttribute('role');
    if (explicit) return explicit.trim().split(/\s+/)[0];
    if (tag === 'INPUT') {
      const type = (el.getAttribute('type') || 'text').toLowerCase();
      if (INPUT_ROLES[type]) return INPUT_ROLES[type];
      return el.hasAttribute('list') ? 'combobox' : 'textbox';
    }
    if (tag === 'SELECT') return el.multiple || el.size > 1 ? 'listbox' : 'combobox';
    if (tag === 'A' && !el.hasAttribute('href')) return 'generic';
    if (tag === 'IMG' && el.getAttribute('alt') === '') return 'presentation';
    return TAG_ROLES[tag] || 'generic';
  };
  const byIds = (ids) => ids.split(/\s+/).map((id) => {
    const e = document.getElementById(id); return e ? e.textContent : '';
  }).join(' ');
  const name = (el, tag, r, clickable) => {
    let n = el.getAttribute('aria-labelledby');
    if (n) { n = squash(byIds(n)); if (n) return n; }
    n = el.getAttribute('aria-label');
    if (n && n.trim()) return squash(n);
    if (tag === 'INPUT' || tag === 'SELECT' || tag === 'TEXTAREA') {
      const type = (el.type || '').toLowerCase();
      if (type === 'button' || type === 'submit' || type === 'reset') {
        return squash(el.value || (type === 'submit' ? 'Submit' : type === 'reset' ? 'Reset' : ''));
      }
      if (type === 'image') return squash(el.alt || el.value);
      const labelled = labels.get(el);
      if (labelled !== undefined) return squash(labelled);
      return squash(el.getAttribute('placeholder') || el.getAttribute('title') || '');
    }
    if (tag === 'IMG' || tag === 'AREA') return squash(el.getAttribute('alt') || el.title);
    if (FROM_CONTENT.has(r) || (clickable && tag !== 'BODY' && tag !== 'HTML' &&
                                (r === 'generic' || r === 'listitem'))) {
      return squash(el.textContent);
    }
    return squash(el.getAttribute('title'));
  };
  const clickTags = (el, tag) => (tag === 'A' && el.hasAttribute('href')) || tag === 'BUTTON' ||
    (tag === 'INPUT' && el.type !== 'hidden') || tag === 'SELECT' || tag === 'TEXTAREA' ||
    tag === 'SUMMARY' || (tag === 'LABEL' && el.control != null) || tag === 'OPTION';
  const labels = new Map();  // control -> its labels' text (el.labels scans the document)
  for (const label of document.getElementsByTagName('label')) {
    const control = label.control;
    if (control) labels.set(control, (labels.get(control) || '') + ' ' + label.textContent);
  }
  const vw = innerWidth, vh = innerHeight, dpr = devicePixelRatio || 1;
  const [ox, oy] = opts.origin;
  const active = document.activeElement;
  const FX = [0.5, 1 / 6, 5 / 6, 1 / 6, 5 / 6, 0.5, 1 / 6, 5 / 6, 0.5];
  const FY = [0.5, 1 / 6, 1 / 6, 5 / 6, 5 / 6, 1 / 6, 0.5, 0.5, 5 / 6];
  const round = (v) => Math.round(v * 10) / 10;
  const out = [];
  let total = 0, hidden = 0;
  let stack = document.documentElement ? [[document.documentElement, -1, 0, 'auto']] : [];
  if (opts.only) {  // just these bids' elements, not their children (an action's targets)
    const wanted = new Set(opts.only);
    stack = Array.from(document.querySelectorAll('[' + ATTR + ']'))
      .filter((el) => wanted.has(st.owned.get(el))).map((el) => [el, -1, 0, 'auto']);
  }
  while (stack.length) {
    const [el, parent, depth, parentCursor] = stack.pop();
    let bid = st.owned.get(el);
    if (bid === undefined) { bid = PREFIX + st.next++; st.owned.set(el, bid); }
    if (el.getAttribute(ATTR) !== bid) el.setAttribute(ATTR, bid);
    total++;
    const tag = el.tagName.toUpperCase();
    if (out.length >= opts.max) {
      for (let c = el.lastElementChild; c; c = c.previousElementSibling) {
        if (walked(c)) stack.push([c, -1, depth + 1, 'auto']);
      }
      continue;
    }
    const shown = el.checkVisibility ? el.checkVisibility({checkOpacity: true,
      checkVisibilityCSS: true, opacityProperty: true, visibilityProperty: true}) : true;
    const style = shown ? getComputedStyle(el) : null;
    const cursor = style ? style.cursor : parentCursor;
    const r = role(el, tag);
    const clickable = clickTags(el, tag) || WIDGETS.has(r) || el.onclick != null ||
      (hooked !== undefined && hooked.has(el)) || (cursor === 'pointer' && parentCursor !== 'pointer');
    const rect = el.getBoundingClientRect();
    let hits = 0, px = null, py = null;
    if (shown && rect.width > 0 && rect.height > 0 && rect.right > 0 && rect.bottom > 0 &&
        rect.left < vw && rect.top < vh) {
      for (let i = 0; i < 9; i++) {
        const x = rect.left + rect.width * FX[i], y = rect.top + rect.height * FY[i];
        if (x < 0 || y < 0 || x >= vw || y >= vh) continue;
        const hit = document.elementFromPoint(x, y);
        if (hit !== null && (hit === el || el.contains(hit))) {
          hits++;
          if (px === null) { px = x; py = y; }
        }
      }
    }
    if (!shown) hidden++;
    let own = '', segments = null, children = 0;  // text runs, after how many child elements
    for (let c = el.firstChild; c; c = c.nextSibling) {
      if (c.nodeType === 1) { children++; continue; }
      if (c.nodeType !== 3 || !c.data.trim()) continue;
      own += c.data;
      if (segments === null) segments = [];
      const last = segments[segments.length - 1];
      if (last !== undefined && last[0] === children) last[1] += c.data;
      else segments.push([children, c.data]);
    }
    if (segments !== null) segments = segments.map(([at, text]) => [at, squash(text)]);
    const type = tag === 'INPUT' ? (el.type || 'text') : null;
    const hasValue = tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'SELECT';
    // A value is what the page holds, exactly: only its length is bounded.
    const full = hasValue && type !== 'checkbox' && type !== 'radio' ? String(el.value) : null;
    const value = full !== null && full.length > MAXVALUE ? full.slice(0, MAXVALUE) : full;
    const ariaChecked = el.getAttribute('aria-checked');
    const checked = (type === 'checkbox' || type === 'radio') ? el.checked :
      ariaChecked === null ? null : ariaChecked === 'mixed' ? 'mixed' : ariaChecked === 'true';
    const expanded = el.getAttribute('aria-expanded');
    const index = out.length;
    out.push([
      bid, parent, depth, tag.toLowerCase(), r, name(el, tag, r, clickable), squash(own), value,
      round(ox + rect.left * dpr), round(oy + rect.top * dpr), round(rect.width * dpr),
      round(rect.height * dpr), Math.round(hits / 9 * 1000) / 1000,
      px === null ? null : [round(ox + px * dpr), round(oy + py * dpr)],
      clickable, el === active && tag !== 'BODY', checked, tag === 'OPTION' ? el.selected : null,
      expanded === null ? null : expanded === 'true', el.disabled === true ||
      el.getAttribute('aria-disabled') === 'true', el.required === true, shown, type,
      el.id || null, segments, value !== full,
    ]);
    if (SKIP.has(tag) || opts.only) continue;
    for (let c = el.lastElementChild; c; c = c.previousElementSibling) {
      if (walked(c)) stack.push([c, index, depth + 1, cursor]);
    }
  }
  const focused = active && active !== document.body ? st.owned.get(active) || null : null;
  // One string: DevTools serialises a string in one piece, an object value by value.
  return JSON.stringify({url: location.href, title: document.title, viewport: [vw, vh],
                         scroll: [scrollX, scrollY], dpr: dpr, focused: focused, total: total,
                         elements: out});
}
"""

_HOOK_JS: Final = r"""
(() => {
  const NAME = %HOOK%;
  if (window[NAME] !== undefined) return;
  const seen = new WeakSet();
  Object.defineProperty(window, NAME, {value: seen});
  const CLICKY = new Set(['click', 'dblclick', 'mousedown', 'mouseup', 'pointerdown',
                          'pointerup', 'touchstart']);
  const add = EventTarget.prototype.addEventListener;
  EventTarget.prototype.addEventListener = function (type, listener, options) {
    if (CLICKY.has(type) && this instanceof Element) seen.add(this);
    return add.call(this, type, listener, options);
  };
})();
"""


def hook_script() -> str:
    """JavaScript that notes every element a click-like listener is added to (run before
    the page's scripts: :func:`install_click_hook`)."""
    return _HOOK_JS.replace("%HOOK%", json.dumps(HOOK_GLOBAL))


async def install_click_hook(cdp: CDPClient, *, current: bool = True) -> str:
    """Have every document the page loads from now on note the elements its scripts
    add click-like listeners to, so :func:`observe` calls them clickable; with
    ``current``, the loaded document too (listeners it added before are not seen:
    reload it for all). Returns the script's id for ``cdp.remove_script``."""
    script = hook_script()
    identifier = await cdp.add_script(script)
    if current:
        await cdp.evaluate(f"{script}; 0")
    return identifier


@dataclass(slots=True)
class Element:
    """One element as an agent sees it. Boxes and points are screen pixels."""

    bid: str
    tag: str
    role: str
    name: str
    text: str
    value: str | None
    bbox: tuple[float, float, float, float]  # x, y, width, height
    visibility: float  # 0..1: the share of sampled points where the element is hit
    point: tuple[float, float] | None  # where a click reaches it, None when nowhere
    clickable: bool
    focused: bool
    checked: bool | str | None  # True/False for checkboxes and radios, "mixed", None
    selected: bool | None  # options
    expanded: bool | None
    disabled: bool
    required: bool
    shown: bool  # rendered (not display:none, visibility:hidden or opacity 0)
    type: str | None  # an input's type
    id: str | None  # the element's id attribute
    parent: str | None  # the parent's bid (None for the root, or when cut)
    depth: int
    #: The element's own text runs, each after how many of its child elements (for
    #: the text tree, which shows text where it is among the children).
    segments: list[tuple[int, str]] | None = None
    #: ``value`` is the first :data:`MAX_VALUE_CHARS` characters of a longer one.
    value_cut: bool = False

    @property
    def visible(self) -> bool:
        return self.visibility > 0

    @property
    def centre(self) -> tuple[float, float]:
        x, y, w, h = self.bbox
        return x + w / 2, y + h / 2

    def states(self) -> list[str]:
        """The states the text tree shows: ``focused``, ``checked=True``, ... (checked
        shows when False too: an unchecked box says so)."""
        out = []
        for key in TREE_STATES:
            value = getattr(self, key)
            if value is None or (value is False and key != "checked"):
                continue
            out.append(key if value is True and key in ("focused", "required") else f"{key}={value!r}")
        if self.value_cut:
            out.append("value_cut")
        return out

    def as_json(self) -> dict[str, Any]:
        """The element's entry in an observation (see docs/browser.md)."""
        out: dict[str, Any] = {
            "bid": self.bid, "tag": self.tag, "role": self.role, "name": self.name,
            "text": self.text, "bbox": list(self.bbox), "visibility": self.visibility,
            "clickable": self.clickable, "focused": self.focused, "parent": self.parent,
        }
        if self.point is not None:
            out["point"] = list(self.point)
        for key in ("value", "checked", "selected", "expanded", "type", "id"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.value_cut:
            out["value_cut"] = True
        if self.disabled:
            out["disabled"] = True
        return out


@dataclass(slots=True)
class TreeLine:
    """One line of the text tree: a node at ``depth`` (a bid when it is an element)."""

    depth: int
    role: str
    name: str
    bid: str | None = None
    value: str | None = None
    states: list[str] = field(default_factory=list)
    clickable: bool = False
    visible: bool = True

    def render(self) -> str:
        head = f"[{self.bid}] " if self.bid is not None else ""
        line = f"{chr(9) * self.depth}{head}{self.role} {self.name!r}"
        if self.value is not None and self.value != "":
            line += f", value={self.value!r}"
        extra = list(self.states)
        if self.bid is not None and self.clickable:
            extra.append("clickable")
        if self.bid is not None and not self.visible:
            extra.append("hidden")
        return line + "".join(f", {item}" for item in extra)


@dataclass(slots=True)
class PageStructure:
    """One observation of a page's structure."""

    url: str
    title: str
    origin: tuple[int, int]
    viewport: tuple[int, int]
    scroll: tuple[float, float]
    focused: str | None
    elements: list[Element]
    #: Elements the page has that are not in :attr:`elements` (past MAX_ELEMENTS).
    omitted: int = 0
    #: The accessibility tree as lines (None: built from :attr:`elements` when asked).
    tree: list[TreeLine] | None = None
    #: Seconds the observation took, and how (``"dom"``, ``"snapshot"``).
    seconds: float = 0.0
    method: str = "dom"
    _by_bid: dict[str, Element] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_bid = {element.bid: element for element in self.elements}

    def get(self, bid: str) -> Element | None:
        """The element with ``bid``, or None when the page has none (or it was cut)."""
        return self._by_bid.get(bid)

    def __iter__(self) -> Iterator[Element]:
        return iter(self.elements)

    def find(self, **criteria: Any) -> list[Element]:
        """Elements whose attributes equal every one given: ``find(role="button",
        name="Submit")``, ``find(id="tt")``, ``find(visible=True)``."""
        return [e for e in self.elements if all(getattr(e, k) == v for k, v in criteria.items())]

    def lines(self) -> list[TreeLine]:
        """The accessibility tree as lines, BrowserGym's way: generic nodes with no name
        and nothing to do are left out (their children move up), as are nodes not
        rendered; an element's own text shows as a ``StaticText`` child when it is not
        its name already."""
        if self.tree is not None:
            return self.tree
        return list(_element_lines(self.elements, self.title))

    def text(self, max_bytes: int = MAX_TREE_BYTES) -> str:
        """The accessibility tree as text (tab-indented lines such as
        ``[a12] button 'Submit', focused``), cut to ``max_bytes`` with a last line saying
        how many lines were left out."""
        return _cut_lines([line.render() for line in self.lines()], max_bytes)

    def observation(
        self,
        *,
        max_bytes: int = MAX_OBSERVATION_BYTES,
        tree: bool = True,
        elements: bool = True,
    ) -> dict[str, Any]:
        """The JSON-able body of ``v0.env.observation`` (schema: docs/browser.md), at most
        ``max_bytes`` of JSON: when over, hidden elements go first, then the last ones in
        document order, and ``truncated`` says so."""
        body: dict[str, Any] = {
            "url": self.url, "title": self.title, "origin": list(self.origin),
            "viewport": list(self.viewport), "scroll": list(self.scroll),
            "focused": self.focused, "method": self.method,
            "truncated": self.omitted > 0, "omitted": self.omitted,
        }
        if tree:
            text = self.text(min(MAX_TREE_BYTES, max_bytes // 2))
            body["axtree"] = text
            body["truncated"] = body["truncated"] or text.endswith(_CUT_MARK)
        if elements:
            listed = [element.as_json() for element in self.elements]
            room = max_bytes - len(_dumps(body)) - len(', "elements": []')
            kept = _fit(listed, room)
            body["elements"] = kept
            if len(kept) < len(listed):
                body["truncated"] = True
                body["omitted"] = self.omitted + len(listed) - len(kept)
        return body


_CUT_MARK: Final = " lines cut (MAX_TREE_BYTES) ...]"


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def _fit(listed: list[dict[str, Any]], room: int) -> list[dict[str, Any]]:
    """The elements that fit in ``room`` bytes of JSON: all, or without the hidden ones,
    or the first of those in document order."""
    sizes = [len(_dumps(item)) + 1 for item in listed]
    if sum(sizes) <= room:
        return listed
    shown = [(item, size) for item, size in zip(listed, sizes, strict=True) if item["visibility"] > 0]
    kept, used = [], 0
    for item, size in shown:
        if used + size > room:
            break
        kept.append(item)
        used += size
    return kept


def _cut_lines(lines: list[str], max_bytes: int) -> str:
    out, used = [], 0
    for i, line in enumerate(lines):
        size = len(line.encode()) + 1
        if used + size > max_bytes - 64:
            out.append(f"[... {len(lines) - i}{_CUT_MARK}")
            break
        out.append(line)
        used += size
    return "\n".join(out)


_SKIPPED_ROLES: Final = frozenset({"generic", "none", "presentation"})


def _element_lines(elements: Iterable[Element], title: str) -> Iterator[TreeLine]:
    """Tree lines from walked elements (document order): a skipped element's children
    take its depth; text runs come where they are among their element's children."""
    depth_of: dict[str, int] = {}
    children_seen: dict[str, int] = {}
    open_: list[Element] = []  # the ancestors of the element at hand, innermost last
    left: dict[str, list[tuple[int, str]]] = {}  # text runs not shown yet, by bid

    def text_lines(owner: Element, upto: int | None) -> Iterator[TreeLine]:
        """``owner``'s text runs that come before its child ``upto`` (None: all left)."""
        segments = left.get(owner.bid)
        while segments and (upto is None or segments[0][0] <= upto):
            _, text = segments.pop(0)
            if text != owner.name:
                yield TreeLine(depth_of[owner.bid] + 1, "StaticText", text)

    for e in elements:
        if e.segments:
            left[e.bid] = list(e.segments)
        while open_ and open_[-1].bid != e.parent:
            yield from text_lines(open_.pop(), None)
        if e.parent is None or not open_:
            if e.parent is not None:
                continue  # below something cut off
            depth_of[e.bid] = 0
            open_.append(e)
            yield TreeLine(0, "RootWebArea", title)
            continue
        parent = open_[-1]
        yield from text_lines(parent, children_seen.get(parent.bid, 0))
        children_seen[parent.bid] = children_seen.get(parent.bid, 0) + 1
        if not e.shown:
            # Not rendered: left out with everything below it (its parent's count moved).
            depth_of[e.bid] = -1
            left.pop(e.bid, None)
            open_.append(e)
            continue
        if depth_of.get(parent.bid, 0) < 0:
            depth_of[e.bid] = -1
            left.pop(e.bid, None)
            open_.append(e)
            continue
        states = e.states()
        skip = e.role in _SKIPPED_ROLES and not e.name and not states and not e.clickable
        depth_of[e.bid] = depth_of[parent.bid] + (0 if skip else 1)
        open_.append(e)
        if not skip:
            yield TreeLine(depth_of[e.bid], e.role, e.name, e.bid, e.value, states, e.clickable, e.visible)
    while open_:
        yield from text_lines(open_.pop(), None)


def _element(row: list[Any], parents: list[str]) -> Element:
    (bid, parent, depth, tag, role, name, text, value, x, y, w, h, visibility, point,
     clickable, focused, checked, selected, expanded, disabled, required, shown, type_,
     id_, segments, value_cut) = row
    return Element(
        bid=bid, tag=tag, role=role, name=name, text=text, value=value,
        bbox=(x, y, w, h), visibility=visibility,
        point=None if point is None else (point[0], point[1]),
        clickable=clickable, focused=focused, checked=checked, selected=selected,
        expanded=expanded, disabled=disabled, required=required, shown=shown, type=type_,
        id=id_, parent=parents[parent] if parent >= 0 else None, depth=depth,
        segments=None if segments is None else [(int(at), str(text)) for at, text in segments],
        value_cut=bool(value_cut),
    )


def walk_expression(
    origin: tuple[int, int] = (0, 0),
    *,
    max_elements: int = MAX_ELEMENTS,
    reset: bool = False,
    only: Sequence[str] | None = None,
) -> str:
    """The JavaScript expression :func:`observe` evaluates (benchmarks run it through
    other clients); ``only`` describes just the elements of these bids."""
    opts = {
        "attr": BID_ATTRIBUTE, "prefix": BID_PREFIX, "state": STATE_GLOBAL, "hook": HOOK_GLOBAL,
        "maxText": MAX_TEXT_CHARS, "maxValue": MAX_VALUE_CHARS, "max": max_elements,
        "origin": list(origin), "reset": reset, "leftOut": list(LEFT_OUT_IDS),
        "only": list(only) if only is not None else None,
    }
    return f"({_WALK_JS.strip()})({json.dumps(opts)})"


def parse_walk(
    value: Any, origin: tuple[int, int], seconds: float = 0.0
) -> PageStructure:
    """A :class:`PageStructure` from what the walk returned."""
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise CDPError(f"the page structure walk returned no JSON: {exc}") from None
    if not isinstance(value, dict) or not isinstance(value.get("elements"), list):
        raise CDPError(f"the page structure walk returned {str(value)[:200]!r}, not a result")
    rows = value["elements"]
    parents = [row[0] for row in rows]
    elements = [_element(row, parents) for row in rows]
    width, height = value["viewport"]
    sx, sy = value["scroll"]
    return PageStructure(
        url=str(value["url"]), title=str(value["title"]), origin=origin,
        viewport=(int(width), int(height)), scroll=(float(sx), float(sy)),
        focused=value["focused"], elements=elements,
        omitted=int(value["total"]) - len(elements), seconds=seconds, method="dom",
    )


async def observe(
    cdp: CDPClient,
    origin: tuple[int, int] = (0, 0),
    *,
    max_elements: int = MAX_ELEMENTS,
    reset: bool = False,
    timeout: float = OBSERVE_TIMEOUT,
) -> PageStructure:
    """Read the page's structure in one ``Runtime.evaluate``; ``origin`` is where the
    page's (0, 0) is on the screen; ``reset`` numbers the elements afresh from ``a0``."""
    started = time.perf_counter()
    value = await cdp.evaluate(
        walk_expression(origin, max_elements=max_elements, reset=reset), timeout
    )
    return parse_walk(value, origin, time.perf_counter() - started)


async def locate(
    cdp: CDPClient, bids: Sequence[str], origin: tuple[int, int] = (0, 0),
    timeout: float = OBSERVE_TIMEOUT,
) -> dict[str, Element]:
    """The elements of ``bids`` as they are now (box, visibility, state): what an action
    checks just before it runs. Bids the page no longer has are missing."""
    value = await cdp.evaluate(walk_expression(origin, only=bids), timeout)
    return {element.bid: element for element in parse_walk(value, origin).elements}
