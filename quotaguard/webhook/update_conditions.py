"""CEL for workload UPDATEs: whether an update changes the resources of some container of the
object's pod templates (those go to the fail-closed validating webhook, the rest to the
fail-open one)."""

from __future__ import annotations

from quotaguard.kube.kinds import Kind, Step, parse_path


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


def _pod_template_resources(template: str) -> str:
    """CEL: the `resources` of every init container and container of the pod template
    `template` (a list of two lists, empty ones where something is missing or odd)."""
    spec = f"{template}.spec"
    return (
        f"(type({template}) == map && has({spec}) && type({spec}) == map\n"
        f"  ? ['initContainers', 'containers'].map(f, f in {spec} && type({spec}[f]) == list\n"
        f"    ? {spec}[f].map(c, type(c) == map && 'resources' in c ? c.resources : null)\n"
        "    : [])\n"
        "  : [])"
    )


def _collect(value: str, steps: tuple[Step, ...], leaf: str, depth: int = 0) -> str:
    """CEL: a value that holds `leaf` (a template given the value's CEL as `{value}`) for every
    value at `steps` below `value`, the key with each value of a map (so that two maps with the
    same values under other keys differ). Every branch is `dyn`, as the type checker wants one
    type for both sides of a `?:` and for the items of a list."""
    if not steps:
        return f"dyn({leaf.replace('{value}', value)})"
    step, rest = steps[0], steps[1:]
    here = f"{value}.{step.field}"
    present = f"type({value}) == map && has({here})"
    if step.kind == "field":
        return f"({present}\n  ? {_collect(here, rest, leaf, depth)}\n  : dyn([]))"
    item = f"i{depth}"
    if step.kind == "list":
        inner = _collect(item, rest, leaf, depth + 1)
        return (
            f"({present} && type({here}) == list\n  ? dyn({here}.map({item}, {inner}))\n"
            "  : dyn([]))"
        )
    inner = _collect(f"{here}[{item}]", rest, leaf, depth + 1)
    return (
        f"({present} && type({here}) == map\n"
        f"  ? dyn({here}.map({item}, [dyn({item}), {inner}]))\n  : dyn([]))"
    )


def _same(old: str, new: str, steps: tuple[Step, ...], leaf: str, depth: int = 0) -> str:
    """CEL: the values at `steps` below `old` and `new` pass `leaf` equally. A list is compared
    in order; a map key by key, since CEL walks a map in no fixed order."""
    if not steps or steps[0].kind == "list":
        return f"{_collect(old, steps, leaf, depth)}\n== {_collect(new, steps, leaf, depth)}"
    step, rest = steps[0], steps[1:]
    old_here, new_here = f"{old}.{step.field}", f"{new}.{step.field}"
    is_map = " && type({0}) == map" if step.kind == "map" else ""
    old_present = f"(type({old}) == map && has({old_here}){is_map.format(old_here)})"
    new_present = f"(type({new}) == map && has({new_here}){is_map.format(new_here)})"
    if step.kind == "field":
        inner = _same(old_here, new_here, rest, leaf, depth)
    else:
        key = f"k{depth}"
        below = _same(f"{old_here}[{key}]", f"{new_here}[{key}]", rest, leaf, depth + 1)
        inner = (
            f"size({old_here}) == size({new_here})\n"
            f"&& {old_here}.all({key}, {key} in {new_here}\n&& {below})"
        )
    return f"({old_present} == {new_present}\n&& (!{old_present} || {inner}))"


def resources_unchanged_expression(kind: Kind) -> str:
    """CEL: the update keeps what the pod templates of the object ask for: the resources of
    every container (an AppWrapper: every component's template, which CEL cannot search)."""
    if kind.components is not None:
        leaf = (
            "(type({value}) == list\n"
            "  ? {value}.map(c, type(c) == map && 'template' in c ? c.template : null)\n"
            "  : [])"
        )
        return _same("oldObject", "object", parse_path(kind.components), leaf)
    parts = []
    for place in kind.templates:
        # a Spark driver or executor asks for GPUs in its template, its own containers and its
        # `gpu`: the whole role is compared
        whole = place.form in ("resources", "spark-role")
        leaf = "{value}" if whole else _pod_template_resources("{value}")
        parts.append(_same("oldObject", "object", place.steps, leaf))
    return "\n&& ".join(f"({part})" for part in parts)


def resources_changed_expression(kind: Kind, changed: bool) -> str:
    """CEL: the update changes (or, `changed=False`, keeps) the resources of some container of
    the object's pod templates."""
    unchanged = resources_unchanged_expression(kind)
    return f"!(\n{_indent(unchanged)})" if changed else unchanged
