"""Path-rule presets: the server's table, read from Redis, as typed objects.

sandqd writes its presets at start to the Redis string key
sandq:perm_presets, as JSON: {"presets": [{"name", "description",
"default", "rules": [{"pattern", "level"}]}]}, the table it enforces
(docs/paths.md "Presets"). Client.list_presets(), get_preset() and
extend_preset() read it; this module only parses it (bounded, every field
checked) and holds the result: no I/O here.

A Preset is usable wherever a preset is named (perm_preset= or preset= of
a run, a sandbox or an fs op). It goes on the wire as perm_preset=its base
name plus perms=its additions, so the server applies its own table and the
additions win on a tie, as a job's rules always do (docs/paths.md
"Precedence").
"""

import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .errors import Error, InvalidJob

PRESETS_JSON_MAX = 1 << 20      # bytes of the key's value read at most
PRESETS_MAX = 256
RULES_MAX = 256
LEVELS = ("none", "view", "read", "write")


class Rule:
    """One path rule: pattern (docs/paths.md "Patterns") and level."""

    __slots__ = ("pattern", "level")

    def __init__(self, pattern: str, level: str) -> None:
        self.pattern = pattern
        self.level = level

    def as_dict(self) -> Dict[str, str]:
        """The rule as the protocol's {pattern, level} map."""
        return {"pattern": self.pattern, "level": self.level}

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Rule) and
                (self.pattern, self.level) == (other.pattern, other.level))

    def __hash__(self) -> int:
        return hash((self.pattern, self.level))

    def __repr__(self) -> str:
        return "Rule(%r, %r)" % (self.pattern, self.level)


class Preset:
    """A named set of path rules: name, description, default (the level of
    a path no rule names: "none", "view", "read" or "write") and rules (the
    server's, in its order). An extended preset (Client.extend_preset())
    has base (the server's preset it starts from) and additions (the rules
    added, which win on a tie); rules then lists both, base first."""

    __slots__ = ("name", "description", "default", "rules", "base", "additions")

    def __init__(self, name: str, description: str, default: str,
                 rules: Sequence[Rule], base: Optional[str] = None,
                 additions: Sequence[Rule] = ()) -> None:
        self.name = name
        self.description = description
        self.default = default
        self.rules: Tuple[Rule, ...] = tuple(rules)
        self.base = base if base is not None else name
        self.additions: Tuple[Rule, ...] = tuple(additions)

    def wire(self) -> Tuple[str, List[Dict[str, str]]]:
        """What the job carries: (perm_preset, perms)."""
        return self.base, [r.as_dict() for r in self.additions]

    def __repr__(self) -> str:
        extra = " + %d rules" % len(self.additions) if self.additions else ""
        return "<sandq.Preset %s%s default=%s>" % (self.base, extra, self.default)


def _field(what: str, m: Dict[str, Any], key: str, lo: int, hi: int) -> str:
    """A string member of m within lo..hi characters; Error naming it otherwise."""
    v = m.get(key)
    if not isinstance(v, str) or not lo <= len(v) <= hi:
        raise Error("%s: field %r: expected a string of %d..%d characters"
                    % (what, key, lo, hi))
    return v


def parse_presets(buf: bytes) -> Dict[str, Preset]:
    """The presets of the key's JSON, by name, in the server's order.
    Error naming the preset and the field when the JSON is not the
    contract's."""
    if len(buf) > PRESETS_JSON_MAX:
        raise Error("perm_presets: more than %d bytes" % PRESETS_JSON_MAX)
    try:
        doc = json.loads(buf)
    except ValueError as e:
        raise Error("perm_presets: not JSON: %s" % e) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("presets"), list):
        raise Error("perm_presets: expected {\"presets\": [...]}")
    if len(doc["presets"]) > PRESETS_MAX:
        raise Error("perm_presets: more than %d presets" % PRESETS_MAX)
    out: Dict[str, Preset] = {}
    for i, p in enumerate(doc["presets"]):
        what = "perm_presets[%d]" % i
        if not isinstance(p, dict):
            raise Error("%s: expected an object" % what)
        name = _field(what, p, "name", 1, 64)
        what = "perm preset %r" % name
        default = _field(what, p, "default", 1, 8)
        if default not in LEVELS:
            raise Error("%s: default %r: expected none, view, read or write"
                        % (what, default))
        desc = p.get("description", "")
        if not isinstance(desc, str):
            raise Error("%s: field 'description': expected a string" % what)
        rules = p.get("rules", [])
        if not isinstance(rules, list) or len(rules) > RULES_MAX:
            raise Error("%s: field 'rules': expected at most %d rules" % (what, RULES_MAX))
        parsed = []
        for j, r in enumerate(rules):
            if not isinstance(r, dict):
                raise Error("%s: rules[%d]: expected an object" % (what, j))
            pattern = _field("%s rules[%d]" % (what, j), r, "pattern", 1, 4096)
            level = _field("%s rules[%d]" % (what, j), r, "level", 1, 8)
            if level not in LEVELS:
                raise Error("%s: rules[%d] %r: level %r" % (what, j, pattern, level))
            parsed.append(Rule(pattern, level))
        out[name] = Preset(name, desc, default, parsed)
    return out


def unknown(name: str, known: Sequence[str]) -> InvalidJob:
    """The error for a preset name the server does not have."""
    return InvalidJob("perm preset %r: no such preset (sandqd has %s)"
                      % (name, ", ".join(known) or "none"))
