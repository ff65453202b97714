"""What an OpenEnv client sends and gets for one runtime: the JSON Schemas of its action,
observation and state (``GET /schema``), and actions back as the remote's input events.

Sans I/O: built from the remote's describe body. Each family gets the action fields its
runtime can use (a field the runtime cannot take is not in its schema and is refused):

- **Atari** (describe has ``action_keys``): ``action_id``, an index into the game's
  minimal action set (or all 18 with ``--option full_action_space=true``), held for the
  step's frames, as OpenEnv's own Atari environment and ale-py take it;
- **built-in games**: ``keys`` (the keys held during the step, by name) and, where they
  take the mouse, ``pointer`` (move there with a button mask held) and ``click``;
- **x11 and MiniWoB**: the same, plus ``events`` (key presses and releases, pointer moves,
  in order) and ``text`` (typed a character at a time). MiniWoB's element actions
  (``action_str``: ``click('a42')`` on the page's bids) plug in through
  :func:`family_extras` (their schema) and :func:`family_action` (their input events);
  its observations add the page: ``axtree``, ``elements`` (:data:`ELEMENT_SCHEMA`),
  ``url``, ``focused``, ``truncated`` and ``last_action_error``.

What is not sent stays as it was, as held keys do over VNC: a step with ``{}`` holds
what the last one held. ``metadata`` (OpenEnv's ``Action`` base class has it) is taken
and ignored. Errors name the field and what it takes (:class:`ActionError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from rewarder.protocol import MAX_ACTION_EVENTS, MAX_ACTION_STRING_CHARS
from vncdriver import keysyms
from vncdriver.keysyms import UnknownKey

from ..agent_port import Held
from .frames import FORMATS

#: Input events one step may carry (``events`` and ``text`` together): a paragraph typed,
#: as many as a rewarder action may (one limit for every front end).
MAX_STEP_EVENTS: Final = MAX_ACTION_EVENTS
#: Action fields every family may send, and what each family's runtimes may add; a field
#: whose input the runtime lacks (keys, a pointer) is dropped from its schema.
COMMON_FIELDS: Final = ("metadata",)
FAMILY_FIELDS: Final[Mapping[str, tuple[str, ...]]] = {
    "atari": ("action_id",),
    "builtin": ("keys", "pointer", "click"),
    "x11": ("keys", "pointer", "click", "events", "text"),
    # Issue 4/7's element actions join through family_extras and family_action.
    "miniwob": ("keys", "pointer", "click", "events", "text"),
}
#: A family not listed (a recording replayed, a runtime of one's own): everything it can take.
DEFAULT_FIELDS: Final = ("keys", "pointer", "click", "events", "text")
#: Fields that need keys, and fields that need a pointer.
_KEY_FIELDS: Final = frozenset({"keys", "text"})
_POINTER_FIELDS: Final = frozenset({"pointer", "click"})

#: Input events as the remote takes them (``rewarder.protocol.ActionEvent``).
Event = tuple[Any, ...]


class ActionError(ValueError):
    """An action the runtime's schema does not allow; the message says what would be."""


def family_of(env_id: str) -> str:
    return env_id.split(".", 1)[0]


#: MiniWoB's element actions (docs/browser.md): a BrowserGym-style action string.
ACTION_STRING_FIELD: Final = "action_str"


#: One element of a MiniWoB observation's ``elements`` (runtimes.page_structure's keys;
#: the optional ones are there when they apply).
ELEMENT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object", "required": ["bid", "tag", "role", "name", "bbox", "visibility", "clickable"],
    "properties": {
        "bid": {"type": "string", "pattern": "^a[0-9]+$"},
        "tag": {"type": "string"}, "role": {"type": "string"}, "name": {"type": "string"},
        "text": {"type": "string"}, "value": {"type": "string"},
        "bbox": {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4},
        "point": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2},
        "visibility": {"type": "number", "minimum": 0, "maximum": 1},
        "clickable": {"type": "boolean"}, "focused": {"type": "boolean"},
        "parent": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
}


def family_extras(spec: Spec) -> dict[str, Any]:
    """A family's own action fields: their JSON Schema properties by name. MiniWoB's is
    :data:`ACTION_STRING_FIELD`, run by the remote's runtime (``runtimes.web_actor``)
    rather than turned into events here."""
    if spec.family != "miniwob":
        return {}
    return {ACTION_STRING_FIELD: {
        "type": "string", "maxLength": MAX_ACTION_STRING_CHARS,
        "description": "an action on the page's elements, BrowserGym style: click('a42'), "
        "fill('a12', 'text'), select_option('a7', 'Red'), press('a12', 'Enter'), scroll(0, 100), "
        "keyboard_type('hi'), ... (bids from the observation's axtree or elements); run after the other "
        "fields, as real input; what failed is the observation's last_action_error",
    }}


def family_action(spec: Spec, name: str, value: Any, held: Held) -> list[Event]:
    """The input events of ``name`` (a field :func:`family_extras` added) in a step, in
    the order of the step's fields; ``held`` is what the agent holds, to update. The
    action string brings none: the session hands it to the remote whole."""
    if name == ACTION_STRING_FIELD and spec.family == "miniwob":
        if not isinstance(value, str):
            raise ActionError(f"{name} must be a string such as \"click('a42')\", not {value!r}")
        return []
    raise ActionError(f"{spec.env_id} takes no action field {name!r}")


@dataclass(frozen=True)
class Spec:
    """One runtime's actions and observations (they change only with the env or its screen)."""

    env_id: str
    width: int
    height: int
    keys: tuple[str, ...] = ()
    #: Keys each discrete action holds (Atari's ``action_keys``), and its name.
    action_keys: tuple[tuple[str, ...], ...] = ()
    action_names: tuple[str, ...] = ()
    buttons: int = 0
    players: int = 1
    fields: tuple[str, ...] = field(init=False)

    @classmethod
    def of(cls, describe: Mapping[str, Any]) -> Spec:
        """The spec of the runtime a describe body talks about."""
        return cls(
            env_id=str(describe["env_id"]),
            width=int(describe["width"]), height=int(describe["height"]),
            keys=tuple(describe.get("keys") or ()),
            action_keys=tuple(tuple(keys) for keys in describe.get("action_keys") or ()),
            action_names=tuple(describe.get("actions") or ()),
            buttons=int(describe.get("buttons") or 0),
            players=int(describe.get("players") or 1),
        )

    def __post_init__(self) -> None:
        wanted = FAMILY_FIELDS.get(self.family, DEFAULT_FIELDS)
        fields = [
            name for name in wanted
            if not (name == "action_id" and not self.action_keys)
            and not (name in _KEY_FIELDS and not self.keys)
            and not (name in _POINTER_FIELDS and not self.buttons)
            and not (name == "events" and not (self.keys or self.buttons))
        ]
        object.__setattr__(self, "fields", (*fields, *family_extras(self), *COMMON_FIELDS))

    @property
    def family(self) -> str:
        return family_of(self.env_id)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.height, self.width, 3)

    # Schemas ------------------------------------------------------------------------------

    def action_schema(self) -> dict[str, Any]:
        """The JSON Schema of a step's ``data`` (the action)."""
        x = {"type": "integer", "minimum": 0, "maximum": self.width - 1}
        y = {"type": "integer", "minimum": 0, "maximum": self.height - 1}
        mask = {"type": "integer", "minimum": 0, "maximum": self.buttons,
                "description": "button mask: bit 0 left, 1 middle, 2 right"}
        key = {"type": "string", "enum": list(self.keys)}
        every: dict[str, Any] = {
            "action_id": {
                "type": "integer", "minimum": 0, "maximum": len(self.action_keys) - 1,
                "description": "index into the game's action set, held for the step's frames: "
                + ", ".join(f"{i} {name}" for i, name in enumerate(self.action_names)),
            },
            "keys": {
                "type": "array", "items": key, "uniqueItems": True,
                "description": "the keys held during this step (the others are let go)",
            },
            "pointer": {
                "type": "object", "additionalProperties": False, "required": ["x", "y"],
                "properties": {"x": x, "y": y, "buttons": {**mask, "default": 0}},
                "description": "move the pointer to (x, y) holding this button mask",
            },
            "click": {
                "type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 2,
                "maxItems": 2,
                "description": f"[x, y] (x < {self.width}, y < {self.height}): press and release "
                "the left button there",
            },
            "events": {
                "type": "array", "maxItems": MAX_STEP_EVENTS,
                "description": "input events in order, after the fields above",
                "items": {"oneOf": [
                    {"type": "object", "additionalProperties": False, "required": ["key", "down"],
                     "properties": {"key": key, "down": {"type": "boolean"}}},
                    {"type": "object", "additionalProperties": False, "required": ["x", "y"],
                     "properties": {"x": x, "y": y, "buttons": {**mask, "default": 0}}},
                ]},
            },
            "text": {
                "type": "string", "maxLength": MAX_STEP_EVENTS // 2,
                "description": "typed a character at a time (each must be one of the keys)",
            },
            "metadata": {"type": "object", "description": "ignored (OpenEnv's Action has it)"},
        }
        properties = {name: every[name] for name in self.fields if name in every} | family_extras(self)
        return {
            "title": f"{self.env_id} action", "type": "object",
            "additionalProperties": False, "properties": properties,
        }

    def observation_schema(self) -> dict[str, Any]:
        """The JSON Schema of an observation (``data.observation``; ``reward`` and ``done``
        travel beside it, as OpenEnv's wire format has them)."""
        h, w, c = self.shape
        properties: dict[str, Any] = {
            "screen": {
                "description": f"the {w}x{h} RGB screen, as screen_format says: png, a "
                "data:image/png;base64 URI; raw, base64 of the H*W*3 bytes; list, a flat list "
                "of integers (OpenEnv's Atari form); none, null",
                "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer"}},
                          {"type": "null"}],
            },
            "screen_shape": {"type": "array", "items": {"type": "integer"}, "const": [h, w, c]},
            "screen_format": {"type": "string", "enum": list(FORMATS)},
            "screen_dtype": {"type": "string", "const": "uint8"},
            "episode_id": {"type": "integer", "description": "the remote's episode"},
            "frame": {"type": "integer", "description": "the remote's frame number"},
            "text": {"anyOf": [{"type": "string"}, {"type": "null"}],
                     "description": "the episode's latest instruction or status line"},
        }
        if self.action_keys:
            properties["legal_actions"] = {"type": "array", "items": {"type": "integer"}}
            properties["lives"] = {"type": "integer"}
        if self.family == "miniwob":
            text = {"anyOf": [{"type": "string"}, {"type": "null"}]}
            properties["axtree"] = {**text, "description": "the page's accessibility tree as "
                                    "text, BrowserGym's flattened style, a [bid] on each element"}
            properties["elements"] = {
                "anyOf": [{"type": "array", "items": ELEMENT_SCHEMA}, {"type": "null"}],
                "description": "the page's elements in document order, one object each (bid, "
                "tag, role, name, text, value, bbox [x, y, w, h] in screen pixels, point, "
                "visibility, clickable, states, parent: docs/browser.md); bids start afresh "
                "from a0 at every reset",
            }
            properties["url"] = {**text, "description": "the page's address"}
            properties["focused"] = {**text, "description": "the bid of the focused element"}
            properties["truncated"] = {
                "anyOf": [{"type": "boolean"}, {"type": "null"}],
                "description": "elements or tree lines were left out (the page's size limits)",
            }
            properties["last_action_error"] = {**text, "description": "what the last "
                                               "action_str could not do (null: it ran)"}
        return {"title": f"{self.env_id} observation", "type": "object", "properties": properties,
                "required": list(properties)}

    @staticmethod
    def state_schema() -> dict[str, Any]:
        """The JSON Schema of ``GET /state`` and a ``state`` message's data."""
        text = {"anyOf": [{"type": "string"}, {"type": "null"}]}
        return {
            "title": "universe-remote state", "type": "object",
            "properties": {
                "episode_id": {**text, "description": "the remote's episode (OpenEnv's State "
                               "names it as a string)"},
                "episode_label": {**text, "description": "the episode_id a reset gave, if any"},
                "step_count": {"type": "integer", "minimum": 0},
                "env_id": {"type": "string"},
                "mode": {"type": "string", "enum": ["realtime", "lockstep"]},
                "remote_state": {"type": "string"},
                "frame": {"type": "integer"},
                "fps": {"type": "number"},
                "frameskip": {"type": "integer", "minimum": 1},
                "screen_format": {"type": "string", "enum": list(FORMATS)},
                "role": {"type": "string", "enum": ["agent", "observer", "none"]},
                "held_by": {**text, "description": "who drives the remote, if anyone"},
            },
        }

    # Actions -------------------------------------------------------------------------------

    def parse(self, data: Mapping[str, Any], held: Held) -> tuple[list[Event], Held]:
        """``data`` (a step's action) as input events, and what is held after them; the
        caller keeps the new :class:`Held` only once the step went through."""
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise ActionError(
                f"{self.env_id} takes no action field {unknown[0]!r}; its fields are "
                f"{list(self.fields)} (GET /schema)"
            )
        after = Held(set(held.keys), held.pointer, held.buttons)
        events: list[Event] = []
        if "action_id" in data:
            n = len(self.action_keys)
            index = _integer(data["action_id"], "action_id", 0, n - 1)
            events += after.keys_to(set(self.action_keys[index]))
        if "keys" in data:
            names = data["keys"]
            if not isinstance(names, list):
                raise ActionError(f"keys must be a list of key names, not {names!r}")
            events += after.keys_to({self._key(k, "keys") for k in names})
        if "pointer" in data:
            x, y, buttons = self._point(data["pointer"], "pointer")
            events += after.pointer_to(x, y, buttons)
        if "click" in data:
            click = data["click"]
            if not isinstance(click, list) or len(click) != 2:
                raise ActionError(f"click must be [x, y], not {click!r}")
            x, y, _ = self._point({"x": click[0], "y": click[1]}, "click")
            events += after.pointer_to(x, y, after.buttons | 1) + after.pointer_to(x, y, after.buttons & ~1)
        if "events" in data:
            events += self._events(data["events"], after)
        if "text" in data:
            text = data["text"]
            if not isinstance(text, str):
                raise ActionError(f"text must be a string, not {text!r}")
            for char in text:
                key = self._key(char, "text")
                events += [("KeyEvent", key, True), ("KeyEvent", key, False)]
        for name in family_extras(self):
            if name in data:
                events += family_action(self, name, data[name], after)
        if len(events) > MAX_STEP_EVENTS:
            raise ActionError(f"{len(events)} input events in one step; at most {MAX_STEP_EVENTS} "
                              "(MAX_STEP_EVENTS)")
        return events, after

    def _events(self, items: object, after: Held) -> list[Event]:
        if not isinstance(items, list):
            raise ActionError(f"events must be a list, not {type(items).__name__}")
        if len(items) > MAX_STEP_EVENTS:
            raise ActionError(f"events has {len(items)} items; at most {MAX_STEP_EVENTS}")
        out: list[Event] = []
        for i, item in enumerate(items):
            where = f"events[{i}]"
            if isinstance(item, dict) and set(item) <= {"key", "down"} and "key" in item:
                down = item.get("down")
                if not isinstance(down, bool):
                    raise ActionError(f"{where}.down must be true or false, not {down!r}")
                key = self._key(item["key"], where)
                (after.keys.add if down else after.keys.discard)(key)
                out.append(("KeyEvent", key, down))
            elif isinstance(item, dict) and set(item) <= {"x", "y", "buttons"} and {"x", "y"} <= set(item):
                if not self.buttons:
                    raise ActionError(f"{where}: {self.env_id} takes no pointer")
                x, y, buttons = self._point(item, where)
                after.pointer, after.buttons = (x, y), buttons
                out.append(("PointerEvent", x, y, buttons))
            else:
                raise ActionError(
                    f'{where} must be {{"key": name, "down": true|false}} or '
                    f'{{"x": x, "y": y, "buttons": mask}}, not {str(item)[:100]}'
                )
        return out

    def _key(self, name: object, where: str) -> str:
        if not isinstance(name, str):
            raise ActionError(f"{where}: a key is named by a string, not {name!r}")
        try:
            key = keysyms.canonical(name)
        except UnknownKey:
            key = None
        if key is None or key not in self.keys:
            shown = ", ".join(self.keys[:40]) + (", ..." if len(self.keys) > 40 else "")
            raise ActionError(f"{where}: {self.env_id} takes no key {name[:40]!r}; its keys: {shown}")
        return key

    def _point(self, value: object, where: str) -> tuple[int, int, int]:
        if not isinstance(value, dict) or not {"x", "y"} <= set(value) or set(value) - {"x", "y", "buttons"}:
            raise ActionError(f'{where} must be {{"x": x, "y": y, "buttons": mask}}, not {str(value)[:100]}')
        x = _integer(value["x"], f"{where}.x", 0, self.width - 1)
        y = _integer(value["y"], f"{where}.y", 0, self.height - 1)
        buttons = _integer(value.get("buttons", 0), f"{where}.buttons", 0, self.buttons)
        return x, y, buttons


def _integer(value: object, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ActionError(f"{name} must be an integer in {low}..{high}, not {value!r}")
    if not low <= value <= high:
        raise ActionError(f"{name} = {value} is out of range: {low}..{high}")
    return value
