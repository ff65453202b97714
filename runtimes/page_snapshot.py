"""The page's structure BrowserGym's way: DevTools' DOM snapshot and accessibility tree.

Holds :func:`observe_snapshot`, the other implementation of
:func:`runtimes.page_structure.observe`, kept to compare with it
(``benchmarks/page_structure``) and for agents that want Chromium's own accessibility
tree (its roles and names, computed by the browser's accessibility code instead of our
approximation of them in JavaScript).

Three round trips: a short ``Runtime.evaluate`` that gives bids and hit-tests the
elements in view (``visibility``, ``point``: a snapshot cannot say what covers what),
``DOMSnapshot.captureSnapshot`` (layout boxes, input values, checked and selected
states, and Chromium's own ``isClickable``, which knows every listener without a hook)
and ``Accessibility.getFullAXTree`` (the tree, joined to bids through
``backendDOMNodeId``). BrowserGym adds a fourth, marking bids into ARIA attributes and
back, which joining through ``backendDOMNodeId`` avoids.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, Final

from .cdp import CDPClient, CDPError
from .page_structure import (
    BID_ATTRIBUTE,
    BID_PREFIX,
    MAX_ELEMENTS,
    MAX_TEXT_CHARS,
    MAX_VALUE_CHARS,
    OBSERVE_TIMEOUT,
    STATE_GLOBAL,
    Element,
    PageStructure,
    TreeLine,
)

#: Computed styles the snapshot carries for each laid-out node, in this order.
STYLES: Final = ("display", "visibility", "opacity")
#: ``DOMSnapshot.captureSnapshot``'s parameters.
SNAPSHOT_PARAMS: Final = {"computedStyles": list(STYLES)}
#: Accessibility roles left out of the text tree (their children move up).
SKIPPED_AX_ROLES: Final = frozenset({"none", "generic", "InlineTextBox", "LineBreak", "ignored"})
#: AX properties shown in the tree, as (AX name, our name).
AX_STATES: Final = (("focused", "focused"), ("checked", "checked"), ("selected", "selected"),
                    ("expanded", "expanded"), ("disabled", "disabled"), ("required", "required"))

_BIDS_JS: Final = r"""
(opts) => {
  let st = window[opts.state];
  if (st === undefined || opts.reset) {
    st = {next: 0, owned: new WeakMap()};
    Object.defineProperty(window, opts.state, {value: st, configurable: true, writable: true});
  }
  const vw = innerWidth, vh = innerHeight, dpr = devicePixelRatio || 1;
  const FX = [0.5, 1 / 6, 5 / 6, 1 / 6, 5 / 6, 0.5, 1 / 6, 5 / 6, 0.5];
  const FY = [0.5, 1 / 6, 1 / 6, 5 / 6, 5 / 6, 1 / 6, 0.5, 0.5, 5 / 6];
  const seen = {};
  for (const el of document.querySelectorAll('*')) {
    let bid = st.owned.get(el);
    if (bid === undefined) { bid = opts.prefix + st.next++; st.owned.set(el, bid); }
    if (el.getAttribute(opts.attr) !== bid) el.setAttribute(opts.attr, bid);
    const r = el.getBoundingClientRect();
    if (!(r.width > 0 && r.height > 0 && r.right > 0 && r.bottom > 0 && r.left < vw && r.top < vh)) continue;
    let hits = 0, point = null;
    for (let i = 0; i < 9; i++) {
      const x = r.left + r.width * FX[i], y = r.top + r.height * FY[i];
      if (x < 0 || y < 0 || x >= vw || y >= vh) continue;
      const hit = document.elementFromPoint(x, y);
      if (hit !== null && (hit === el || el.contains(hit))) {
        hits++;
        if (point === null) point = [opts.origin[0] + x * dpr, opts.origin[1] + y * dpr];
      }
    }
    if (hits) seen[bid] = [hits / 9, point];
  }
  return JSON.stringify({seen: seen, viewport: [vw, vh], scroll: [scrollX, scrollY], dpr: dpr,
                         focused: document.activeElement && document.activeElement !== document.body
                           ? st.owned.get(document.activeElement) || null : null});
}
"""


def _squash(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_TEXT_CHARS else text[: MAX_TEXT_CHARS - 1] + "\u2026"


def _value(text: str) -> str:
    """A form control's value as the page holds it, only its length bounded."""
    return text[:MAX_VALUE_CHARS]


def _rare(data: dict[str, Any] | None) -> set[int]:
    return set(data["index"]) if data else set()


def _rare_strings(data: dict[str, Any] | None, strings: list[str]) -> dict[int, str]:
    if not data:
        return {}
    return {i: strings[v] for i, v in zip(data["index"], data["value"], strict=True) if v >= 0}


def _ax_value(node: dict[str, Any], key: str) -> Any:
    return (node.get(key) or {}).get("value")


async def observe_snapshot(
    cdp: CDPClient,
    origin: tuple[int, int] = (0, 0),
    *,
    max_elements: int = MAX_ELEMENTS,
    reset: bool = False,
    timeout: float = OBSERVE_TIMEOUT,
) -> PageStructure:
    """Read the page's structure through ``DOMSnapshot`` and ``Accessibility`` (see the
    module's docstring); the same :class:`~runtimes.page_structure.PageStructure` as
    :func:`~runtimes.page_structure.observe`, with Chromium's tree as its text."""
    started = time.perf_counter()
    seen_json = await cdp.evaluate(bids_expression(origin, reset=reset), timeout)
    snapshot = await cdp.call("DOMSnapshot.captureSnapshot", SNAPSHOT_PARAMS, timeout)
    ax = await cdp.call("Accessibility.getFullAXTree", {}, timeout)
    return build(seen_json, snapshot, ax, origin, max_elements, time.perf_counter() - started)


def bids_expression(origin: tuple[int, int] = (0, 0), *, reset: bool = False) -> str:
    """The JavaScript that gives bids and hit-tests the elements in view (its JSON is
    :func:`build`'s ``seen``)."""
    opts = {"attr": BID_ATTRIBUTE, "prefix": BID_PREFIX, "state": STATE_GLOBAL,
            "origin": list(origin), "reset": reset}
    return f"({_BIDS_JS.strip()})({json.dumps(opts)})"


def build(
    seen: str,
    snapshot: dict[str, Any],
    ax: dict[str, Any],
    origin: tuple[int, int] = (0, 0),
    max_elements: int = MAX_ELEMENTS,
    seconds: float = 0.0,
) -> PageStructure:
    """The structure from what the three calls returned (any client may make them)."""
    try:
        return _build(json.loads(seen), snapshot, ax, origin, max_elements, seconds)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise CDPError(f"an unexpected DOM snapshot or accessibility tree: {exc!r}") from None


def _build(
    page: dict[str, Any],
    snapshot: dict[str, Any],
    ax: dict[str, Any],
    origin: tuple[int, int],
    max_elements: int,
    seconds: float,
) -> PageStructure:
    strings: list[str] = snapshot["strings"]
    document = snapshot["documents"][0]
    nodes, layout = document["nodes"], document["layout"]
    dpr = float(page["dpr"])
    scroll_x, scroll_y = float(document.get("scrollOffsetX", 0)), float(document.get("scrollOffsetY", 0))
    boxes: dict[int, tuple[list[float], list[int]]] = {}
    for index, bounds, styles in zip(layout["nodeIndex"], layout["bounds"], layout["styles"], strict=True):
        boxes.setdefault(index, (bounds, styles))
    clickable = _rare(nodes.get("isClickable"))
    checked = _rare(nodes.get("inputChecked"))
    selected = _rare(nodes.get("optionSelected"))
    values = _rare_strings(nodes.get("inputValue"), strings)
    names, types, parents = nodes["nodeName"], nodes["nodeType"], nodes["parentIndex"]
    node_values = nodes["nodeValue"]

    bid_of: dict[int, str] = {}  # snapshot node index -> bid
    attrs_of: dict[int, dict[str, str]] = {}
    for index, attributes in enumerate(nodes["attributes"]):
        if types[index] != 1:
            continue
        attrs = {strings[attributes[i]]: strings[attributes[i + 1]] for i in range(0, len(attributes), 2)}
        if BID_ATTRIBUTE in attrs:
            bid_of[index] = attrs[BID_ATTRIBUTE]
            attrs_of[index] = attrs
    own_text: dict[int, str] = {}
    for index, parent in enumerate(parents):
        if types[index] == 3 and parent in bid_of and node_values[index] >= 0:
            own_text[parent] = own_text.get(parent, "") + strings[node_values[index]]

    ax_nodes = ax["nodes"]
    backend_to_bid = {nodes["backendNodeId"][i]: bid for i, bid in bid_of.items()}
    ax_by_bid = {
        backend_to_bid[n["backendDOMNodeId"]]: n for n in ax_nodes
        if n.get("backendDOMNodeId") in backend_to_bid
    }
    seen: dict[str, list[Any]] = page["seen"]
    elements: list[Element] = []
    for index, bid in bid_of.items():
        if len(elements) >= max_elements:
            break
        attrs, node = attrs_of[index], ax_by_bid.get(bid, {})
        box = boxes.get(index)
        x = y = w = h = 0.0
        shown = False
        if box is not None:
            (bx, by, w, h), styles = box[0], box[1]
            x, y = bx - scroll_x, by - scroll_y
            display, visibility, opacity = (strings[s] if s >= 0 else "" for s in styles)
            shown = display != "none" and visibility != "hidden" and opacity != "0"
        props = {p["name"]: (p.get("value") or {}).get("value") for p in node.get("properties", [])}
        parent = parents[index]
        while parent >= 0 and parent not in bid_of:
            parent = parents[parent]
        vis, point = seen.get(bid, (0.0, None))
        tag = strings[names[index]].lower()
        is_toggle = attrs.get("type") in ("checkbox", "radio")
        ax_checked = props.get("checked")
        elements.append(Element(
            bid=bid, tag=tag, role=str(_ax_value(node, "role") or "generic"),
            name=_squash(str(_ax_value(node, "name") or "")),
            text=_squash(own_text.get(index, "")),
            value=_value(values[index]) if index in values and not is_toggle else None,
            value_cut=index in values and not is_toggle and len(values[index]) > MAX_VALUE_CHARS,
            bbox=(round(origin[0] + x * dpr, 1), round(origin[1] + y * dpr, 1),
                  round(w * dpr, 1), round(h * dpr, 1)),
            visibility=round(float(vis), 3), point=None if point is None else (point[0], point[1]),
            clickable=index in clickable, focused=bid == page["focused"],
            checked=(index in checked) if is_toggle else (
                None if ax_checked is None else "mixed" if ax_checked == "mixed" else ax_checked == "true"),
            selected=(index in selected) if tag == "option" else None,
            expanded=props.get("expanded"), disabled=bool(props.get("disabled")),
            required=bool(props.get("required")), shown=shown,
            type=attrs.get("type") if tag == "input" else None, id=attrs.get("id"),
            parent=bid_of.get(parent), depth=0,
        ))
    width, height = page["viewport"]
    sx, sy = page["scroll"]
    return PageStructure(
        url=str(document.get("documentURL") and strings[document["documentURL"]]),
        title=strings[document["title"]] if document.get("title", -1) >= 0 else "",
        origin=origin, viewport=(int(width), int(height)), scroll=(float(sx), float(sy)),
        focused=page["focused"], elements=elements, omitted=len(bid_of) - len(elements),
        tree=list(_ax_lines(ax_nodes, {id(n): b for b, n in ax_by_bid.items()}, elements)),
        seconds=seconds, method="snapshot",
    )


def _ax_lines(
    ax_nodes: list[dict[str, Any]], bid_by_node: dict[int, str], elements: list[Element]
) -> Iterator[TreeLine]:
    """The accessibility tree's lines, depth first, BrowserGym's way: ignored nodes,
    generic ones with no name, and text that repeats its parent's name are left out."""
    if not ax_nodes:
        return
    by_id = {n["nodeId"]: n for n in ax_nodes}
    element_of = {e.bid: e for e in elements}
    stack: list[tuple[dict[str, Any], int, str]] = [(ax_nodes[0], 0, "")]
    while stack:
        node, depth, parent_name = stack.pop()
        role = str(_ax_value(node, "role") or "")
        name = _squash(str(_ax_value(node, "name") or ""))
        bid = bid_by_node.get(id(node))
        props = {p["name"]: (p.get("value") or {}).get("value") for p in node.get("properties", [])}
        states = [
            ours if value is True and ours in ("focused", "required") else f"{ours}={value!r}"
            for key, ours in AX_STATES
            if (value := _state(props.get(key))) is not None and (value is not False or key == "checked")
        ]
        element = element_of.get(bid) if bid is not None else None
        skip = (
            node.get("ignored")
            or role in SKIPPED_AX_ROLES and not name and not states
            and not (element is not None and element.clickable)
            or role == "StaticText" and (not name or name == parent_name)
        )
        child_depth = depth
        if not skip:
            value = _ax_value(node, "value")
            yield TreeLine(
                depth, role, name, bid, None if value is None else _value(str(value)), states,
                element.clickable if element is not None else False,
                element.visible if element is not None else True,
            )
            child_depth = depth + 1
        children = [by_id[c] for c in node.get("childIds", []) if c in by_id]
        for child in reversed(children):
            stack.append((child, child_depth, name or parent_name if skip else name))


def _state(value: Any) -> Any:
    """An AX property's value as the tree shows it ("true" -> True, "mixed" stays)."""
    if value == "true":
        return True
    if value == "false":
        return False
    return value
