"""How an agent tool is defined once: every tool is a ToolBox method marked with `@tool`, and
`rlbench.harness.tools.TOOL_SPECS` (the ToolBox's specs) is the one list that everything else that
names tools reads.

Before this module the list lived in five places (the ToolBox, the react agent's function list and
its dispatch check, the replay agent's replayable set, the workspace description) and they had
drifted apart: replay dropped `claim` calls, react offered `sweep` but not `claim`. Now a tool is
defined once, as a method, and its parts are derived:

- name: the method's name;
- what the model reads about it (the LLM function list): the docstring's text before `Args:` is
  the tool's description, each `name: text` line under `Args:` describes a parameter, and the
  parameter's type hint gives its JSON-schema type; parameters without a default are required.
  Docstrings of tools are therefore written for the agent; notes for maintainers go in comments;
- how the harness treats a call (`ToolSpec`): whether it may change files (a code snapshot
  follows it), whether the replay agent repeats it, and which task feature it needs to be offered
  at all, by the feature's name in rlbench.features (`sweep` needs `sweeps`, `claim` needs
  `claims`); the feature itself says when it offers its tools (`TaskFeature.offers_tools`), so
  there is one list of task behaviours, not a second one here.

The shape follows Inspect AI's `@tool` (a function whose docstring and type hints become the
schema), kept to what the ToolBox needs. The decorator also routes each call through the host's
`_invoke`, so the timing and recording of a call are written once (rlbench/harness/tools.py).
"""

from __future__ import annotations

import functools
import inspect
import re
import types
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

if TYPE_CHECKING:
    from rlbench.tasks.spec import BudgetConfig, TaskConfig


@dataclass(frozen=True)
class ToolSpec:
    """One agent tool: the ToolBox method and how the harness treats its calls."""

    name: str
    func: Callable[..., dict[str, Any]]  # the method as written (undecorated)
    changes_files: bool  # a code snapshot follows each call
    replayable: bool = True  # the replay agent repeats recorded calls of it
    needs: str | None = None  # the name of the task feature (rlbench.features) it is offered with

    @property
    def description(self) -> str:
        return parse_docstring(self.func)[0]

    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments, from the signature, type hints and `Args:` lines."""
        _, docs = parse_docstring(self.func)
        hints = typing.get_type_hints(self.func)
        props: dict[str, Any] = {}
        required: list[str] = []
        for name, p in list(inspect.signature(self.func).parameters.items())[1:]:  # past `self`
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"tool {self.name}: *args/**kwargs cannot be described to a model")
            if name not in docs:
                raise ValueError(f"tool {self.name}: parameter {name!r} has no `{name}: ...` line under Args:")
            props[name] = {**json_type(hints.get(name, str), f"{self.name}.{name}"), "description": docs[name]}
            if p.default is p.empty:
                required.append(name)
        return {"type": "object", "properties": props, "required": required}

    def required(self) -> list[str]:
        return list(self.parameters()["required"])

    def openai(self) -> dict[str, Any]:
        """The tool as an OpenAI chat-completions function."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters()}}

    def anthropic(self) -> dict[str, Any]:
        """The tool as an Anthropic Messages API tool."""
        return {"name": self.name, "description": self.description, "input_schema": self.parameters()}


class ToolHost(Protocol):
    """What a class with `@tool` methods provides: one place that times and records a call."""

    def _invoke(self, spec: ToolSpec, args: dict[str, Any], body: Callable[[], Any]) -> dict[str, Any]: ...


def tool(*, changes_files: bool, replayable: bool = True, needs: str | None = None
         ) -> Callable[[Callable[..., dict[str, Any]]], Callable[..., dict[str, Any]]]:
    """Mark a method as an agent tool (`needs`: a feature's name; an unknown one is an error at
    import, not a tool that is silently never offered). A call binds its arguments to the signature (a wrong
    argument raises TypeError before anything runs, as a plain call would), records them all,
    defaults included and tuples as lists (so a replay can pass them back as JSON gave them), and
    hands the body to the host's `_invoke`."""

    if needs is not None and needs not in feature_names():
        raise ValueError(f"@tool(needs={needs!r}): no such task feature (rlbench.features: {sorted(feature_names())})")

    def mark(func: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        spec = ToolSpec(func.__name__, func, changes_files, replayable, needs)
        signature = inspect.signature(func)

        @functools.wraps(func)
        def call(self: ToolHost, *args: Any, **kwargs: Any) -> dict[str, Any]:
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            recorded = {k: _plain(v) for k, v in list(bound.arguments.items())[1:]}
            return self._invoke(spec, recorded, lambda: func(*bound.args, **bound.kwargs))

        call.tool_spec = spec  # type: ignore[attr-defined]
        return call

    return mark


def specs_of(cls: type) -> tuple[ToolSpec, ...]:
    """The `@tool` methods of `cls`, in the order the class defines them."""
    return tuple(v.tool_spec for v in vars(cls).values() if hasattr(v, "tool_spec"))


def names(specs: Iterable[ToolSpec]) -> tuple[str, ...]:
    return tuple(s.name for s in specs)


def feature_names() -> frozenset[str]:
    from rlbench.features import FEATURES

    return frozenset(f.name for f in FEATURES)


def offered(specs: Iterable[ToolSpec], features: Iterable[str]) -> tuple[ToolSpec, ...]:
    """The tools of `specs` a task with `features` offers: those that need nothing, or a feature it has."""
    have = set(features)
    return tuple(s for s in specs if s.needs is None or s.needs in have)


def task_features(task: "TaskConfig", budget: "BudgetConfig | None" = None) -> frozenset[str]:
    """The names of the features whose tools a cell of `task` is offered (`budget`: the cell's,
    where it overrides the task's)."""
    from rlbench.features import FEATURES

    b = budget or task.budget
    return frozenset(f.name for f in FEATURES if f.offers_tools(task, b))


# docstrings and types ------------------------------------------------------------------------------
_ARG = re.compile(r"^(\s+)(\w+):\s*(.*)$")


@functools.lru_cache(maxsize=None)
def parse_docstring(func: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """(description, {parameter: text}) from a Google-style docstring: the text before `Args:`,
    its lines joined (paragraphs kept apart by a blank line), and one entry per `name: text` line
    under `Args:` (more deeply indented lines continue it)."""
    doc = inspect.getdoc(func) or ""
    head, sep, tail = doc.partition("\nArgs:\n")
    if not sep and doc.startswith("Args:\n"):
        head, tail = "", doc[len("Args:\n"):]
    paragraphs = [" ".join(p.split()) for p in head.strip().split("\n\n")]
    args: dict[str, str] = {}
    indent, current = None, ""
    for line in tail.splitlines():
        if not line.strip():
            if args:
                break  # a blank line ends the section
            continue
        m = _ARG.match(line)
        if m and (indent is None or len(m.group(1)) == indent):
            indent, current = len(m.group(1)), m.group(2)
            args[current] = m.group(3).strip()
        elif current and indent is not None and len(line) - len(line.lstrip()) > indent:
            args[current] = f"{args[current]} {line.strip()}"
        else:
            break
    return "\n\n".join(p for p in paragraphs if p), args


_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean"}


def json_type(hint: Any, where: str = "") -> dict[str, Any]:
    """The JSON-schema type of a parameter's type hint. `X | None` is X (leaving the argument
    out is how a model says None; the parameter then has a default); `tuple[A, B]` is an array of
    exactly that many items; `list[A]` an array of A."""
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return json_type(rest[0], where)
    if origin is tuple and args and Ellipsis not in args:
        items = [json_type(a, where) for a in args]
        same = all(i == items[0] for i in items)
        return {"type": "array", **({"items": items[0]} if same else {"prefixItems": items}),
                "minItems": len(items), "maxItems": len(items)}
    if origin in (list, tuple) and args:
        return {"type": "array", "items": json_type(args[0], where)}
    raise TypeError(f"tool parameter {where}: no JSON-schema type for {hint!r}")


def _plain(value: Any) -> Any:
    """An argument as JSON gives it back: tuples are lists."""
    return [_plain(v) for v in value] if isinstance(value, tuple) else value
