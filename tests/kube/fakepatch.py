"""Pure helpers of the fake Kubernetes API server: patch formats, selectors, structural schemas.

    merge_patch        RFC 7386 (``application/merge-patch+json``): maps merge, ``null`` deletes
    strategic_merge    ``application/strategic-merge-patch+json`` for built-in kinds: like a merge
                       patch, but lists of objects with a known merge key (containers by name,
                       conditions by type, ...) merge item by item
    json_patch         RFC 6902 (``application/json-patch+json``): add / remove / replace / test /
                       move / copy
    LabelSelector      ``a=b,c!=d,e in (x,y),f notin (z),g,!h``
    field_matches      ``metadata.name=x,status.phase!=Running``
    apply_schema       what a real API server does to a custom resource: defaults, pruning of unknown
                       fields (reported), then validation (types, required, enum, bounds)

No I/O; errors are :class:`ApiError` carrying the HTTP status the server answers with.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ApiError",
    "LabelSelector",
    "apply_schema",
    "field_matches",
    "json_patch",
    "merge_patch",
    "strategic_merge",
]

Json = Any


class ApiError(Exception):
    """An answer other than success: ``status`` (HTTP code), ``reason`` (Kubernetes' StatusReason)."""

    def __init__(self, status: int, reason: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.status, self.reason, self.message, self.details = status, reason, message, details or {}

    def body(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.status,
        }


# -- patches ------------------------------------------------------------------------------------


def merge_patch(target: Json, patch: Json) -> Json:
    """RFC 7386 JSON merge patch; returns a new value."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


#: list fields of built-in kinds merged item by item, with their merge key
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "conditions": "type",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
}


def strategic_merge(target: Json, patch: Json, field: str = "") -> Json:
    """A strategic merge patch, simplified: lists listed in ``MERGE_KEYS`` merge by key (an item
    ``{"$patch": "delete", key: ...}`` removes one); other lists replace; ``null`` deletes."""
    if isinstance(patch, list) and isinstance(target, list) and field in MERGE_KEYS:
        return _merge_list(target, patch, MERGE_KEYS[field])
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue  # directives other than per-item delete are not emulated
        if value is None:
            out.pop(key, None)
        else:
            out[key] = strategic_merge(out.get(key), value, key)
    return out


def _merge_list(target: list[Json], patch: list[Json], key: str) -> list[Json]:
    out = copy.deepcopy(target)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise ApiError(422, "Invalid", f"strategic merge: list item without merge key {key!r}")
        at = next((i for i, old in enumerate(out) if old.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if at is not None:
                del out[at]
        elif at is None:
            out.append(copy.deepcopy(item))
        else:
            out[at] = strategic_merge(out[at], item)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"json patch: bad path {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Json, parts: list[str]) -> Json:
    node = doc
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node[p]
    return node


def _get(doc: Json, parts: list[str]) -> Json:
    node = doc
    for p in parts:
        node = node[int(p)] if isinstance(node, list) else node[p]
    return node


def _remove(doc: Json, parts: list[str]) -> Json:
    parent, last = _parent(doc, parts), parts[-1]
    return parent.pop(int(last)) if isinstance(parent, list) else parent.pop(last)


def _add(doc: Json, parts: list[str], value: Json) -> Json:
    if not parts:
        return value
    parent, last = _parent(doc, parts), parts[-1]
    if isinstance(parent, list):
        parent.insert(len(parent) if last == "-" else int(last), value)
    else:
        parent[last] = value
    return doc


def json_patch(target: Json, ops: Json) -> Json:
    """RFC 6902 JSON patch; a failed ``test`` answers 422 like the real server."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "json patch: the body must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        try:
            kind, parts = op["op"], _pointer(op["path"])
            if kind == "test":
                if _get(doc, parts) != op["value"]:
                    raise ApiError(422, "Invalid", f"json patch: test of {op['path']} failed")
            elif kind == "remove":
                _remove(doc, parts)
            elif kind == "add":
                doc = _add(doc, parts, copy.deepcopy(op["value"]))
            elif kind == "replace":
                _get(doc, parts)  # must exist
                _remove(doc, parts)
                doc = _add(doc, parts, copy.deepcopy(op["value"]))
            elif kind in ("move", "copy"):
                src = _pointer(op["from"])
                value = _remove(doc, src) if kind == "move" else copy.deepcopy(_get(doc, src))
                doc = _add(doc, parts, value)
            else:
                raise ApiError(422, "Invalid", f"json patch: unknown op {kind!r}")
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(422, "Invalid", f"json patch: {op!r} cannot apply: {exc!r}") from None
    return doc


# -- selectors ----------------------------------------------------------------------------------

_SET_RE = re.compile(r"^\s*([A-Za-z0-9._/-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9._/-]+)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)\s*$")
_EXISTS_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9._/-]+)\s*$")


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    terms, depth, cur = [], 0, ""
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        terms.append(cur)
    return terms


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector; ``LabelSelector.parse("")`` matches everything."""

    terms: tuple[tuple[str, str, frozenset[str]], ...]  # (key, op, values)

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        terms: list[tuple[str, str, frozenset[str]]] = []
        for raw in _split_terms(text or ""):
            if m := _SET_RE.match(raw):
                values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
                terms.append((m.group(1), m.group(2), values))
            elif m := _EQ_RE.match(raw):
                op = "!=" if m.group(2) == "!=" else "="
                terms.append((m.group(1), op, frozenset({m.group(3)})))
            elif m := _EXISTS_RE.match(raw):
                terms.append((m.group(2), "!" if m.group(1) else "exists", frozenset()))
            else:
                raise ApiError(400, "BadRequest", f"unable to parse requirement: {raw!r}")
        return cls(tuple(terms))

    def matches(self, labels: dict[str, str] | None) -> bool:
        labels = labels or {}
        for key, op, values in self.terms:
            have = labels.get(key)
            ok = {
                "=": have in values,
                "in": have in values,
                "!=": have not in values,
                "notin": have not in values,
                "exists": key in labels,
                "!": key not in labels,
            }[op]
            if not ok:
                return False
        return True


def field_matches(obj: dict[str, Any], selector: str | None) -> bool:
    """``path=value`` / ``path==value`` / ``path!=value`` terms over dotted paths of the object."""
    for raw in filter(None, (t.strip() for t in (selector or "").split(","))):
        m = re.match(r"^([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*)$", raw)
        if not m:
            raise ApiError(400, "BadRequest", f"invalid field selector: {raw!r}")
        node: Any = obj
        for part in m.group(1).split("."):
            node = node.get(part) if isinstance(node, dict) else None
        have = "" if node is None else str(node)
        if (have == m.group(3)) != (m.group(2) != "!="):
            return False
    return True


# -- structural schemas (custom resources) ------------------------------------------------------

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def apply_schema(schema: dict[str, Any], obj: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Default, prune and validate a custom resource against its version's openAPIV3Schema, as the
    API server does on every write. Returns the stored object and the pruned field paths; raises
    422 Invalid listing every violation. ``metadata``, ``apiVersion`` and ``kind`` are left alone.
    CEL rules (``x-kubernetes-validations``) are not evaluated."""
    out = copy.deepcopy(obj)
    pruned: list[str] = []
    errors: list[str] = []
    props = schema.get("properties", {})
    for key in list(out):
        if key in ("apiVersion", "kind", "metadata"):
            continue
        if key not in props and not schema.get("x-kubernetes-preserve-unknown-fields"):
            pruned.append(key)
            del out[key]
            continue
        if key in props:
            out[key] = _walk(props[key], out[key], key, pruned, errors)
    for key in schema.get("required", []):
        if key not in out:
            errors.append(f"{key}: Required value")
    if errors:
        raise ApiError(422, "Invalid", "; ".join(errors), {"causes": [{"message": e} for e in errors]})
    return out, pruned


def _walk(s: dict[str, Any], value: Any, path: str, pruned: list[str], errors: list[str]) -> Any:
    if value is None:
        if not s.get("nullable"):
            errors.append(f"{path}: Invalid value: null")
        return value
    if s.get("x-kubernetes-int-or-string"):
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            errors.append(f"{path}: Invalid value: must be an integer or a string")
        return value
    want = s.get("type")
    if want and (
        not isinstance(value, _TYPES[want]) or (isinstance(value, bool) and want in ("integer", "number"))
    ):
        errors.append(f"{path}: Invalid value: {value!r}: must be of type {want}")
        return value
    _check_bounds(s, value, path, errors)
    if isinstance(value, dict):
        return _walk_object(s, value, path, pruned, errors)
    if isinstance(value, list) and isinstance(s.get("items"), dict):
        return [_walk(s["items"], v, f"{path}[{i}]", pruned, errors) for i, v in enumerate(value)]
    return value


def _walk_object(
    s: dict[str, Any], value: dict[str, Any], path: str, pruned: list[str], errors: list[str]
) -> dict[str, Any]:
    props: dict[str, Any] = s.get("properties", {})
    extra = s.get("additionalProperties")
    keep_unknown = s.get("x-kubernetes-preserve-unknown-fields") or extra is True
    for key, sub in props.items():
        if key not in value and isinstance(sub, dict) and "default" in sub:
            value[key] = copy.deepcopy(sub["default"])
    for key in list(value):
        if key in props:
            value[key] = _walk(props[key], value[key], f"{path}.{key}", pruned, errors)
        elif isinstance(extra, dict):
            value[key] = _walk(extra, value[key], f"{path}.{key}", pruned, errors)
        elif not keep_unknown:
            pruned.append(f"{path}.{key}")
            del value[key]
    for key in s.get("required", []):
        if key not in value:
            errors.append(f"{path}.{key}: Required value")
    return value


def _check_bounds(s: dict[str, Any], value: Any, path: str, errors: list[str]) -> None:
    if "enum" in s and value not in s["enum"]:
        errors.append(f"{path}: Unsupported value: {value!r}: supported values: {s['enum']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in s and value < s["minimum"]:
            errors.append(f"{path}: Invalid value: {value}: must be greater than or equal to {s['minimum']}")
        if "maximum" in s and value > s["maximum"]:
            errors.append(f"{path}: Invalid value: {value}: must be less than or equal to {s['maximum']}")
    if isinstance(value, str):
        if "maxLength" in s and len(value) > s["maxLength"]:
            errors.append(f"{path}: Too long: may not be longer than {s['maxLength']}")
        if "minLength" in s and len(value) < s["minLength"]:
            errors.append(f"{path}: Invalid value: must be at least {s['minLength']} characters")
        if "pattern" in s and not re.search(s["pattern"], value):
            errors.append(f"{path}: Invalid value: {value!r}: must match {s['pattern']!r}")
    if isinstance(value, list):
        if "minItems" in s and len(value) < s["minItems"]:
            errors.append(f"{path}: Invalid value: must have at least {s['minItems']} items")
        if "maxItems" in s and len(value) > s["maxItems"]:
            errors.append(f"{path}: Too many: must have at most {s['maxItems']} items")
