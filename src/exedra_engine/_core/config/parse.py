"""Admin overrides: YAML text to a typed `Config`, and how two configs combine. Pure.

The schema (every section optional, an empty file is an empty config)::

    env:                      # every executor
      OMP_NUM_THREADS: "4"
    engines:                  # by executor kind: llama | transcribe
      llama:
        args: [--flash-attn, "on"]
        env: {GGML_VK_VISIBLE_DEVICES: "0"}
    models:                   # by model id
      qwen:
        args: [--ctx-size, "8192"]

Values are strings: quote numbers. The YAML is walked node by node, so every error names
the file, the line and the field path (``$.models.qwen.args[2]``); only the YAML 1.1 core
tags are accepted, so no document can construct arbitrary objects. PyYAML is imported on
the first document parsed, not with this module: a host with no config file never pays for
it (about 20 ms of a cold start).

Combining (a later file over an earlier one, `merge_configs`): env maps merge key by key,
the later value winning; for an engine kind or a model id present in both, the env maps
merge the same way and the later args are appended after the earlier ones, so where both
set a flag the later value wins (the layering rule) and repeatable flags accumulate.
Merging is associative and the empty config is its identity.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from exedra_engine._core.config.overrides import Config, Override
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.outcome import boundary
from exedra_engine._core.struct import EMPTY, Value, freeze, frozen_fields
from exedra_engine.errors import ConfigError

if TYPE_CHECKING:
    import yaml

_STR = "tag:yaml.org,2002:str"
_NULL = "tag:yaml.org,2002:null"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_TYPE_NAMES = freeze(
    {
        "tag:yaml.org,2002:int": "a number",
        "tag:yaml.org,2002:float": "a number",
        "tag:yaml.org,2002:bool": "a boolean",
        _NULL: "null",
        _MAP: "a mapping",
        _SEQ: "a sequence",
        "tag:yaml.org,2002:timestamp": "a date",
        "tag:yaml.org,2002:binary": "binary data",
        "tag:yaml.org,2002:set": "a set",
        "tag:yaml.org,2002:omap": "an ordered map",
        "tag:yaml.org,2002:pairs": "pairs",
    }
)
_MAX_NODES = 100_000
_MAX_DEPTH = 32
"""The schema nests four levels deep; deeper documents are refused while they are parsed."""
_SCALAR_TAGS = frozenset(
    {_STR, _NULL, "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
     "tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:binary"}
)  # fmt: skip
# By node shape: PyYAML's own name for each node class (`ScalarNode.id` is "scalar"), so the
# walker needs no yaml import of its own.
_SHAPE_TAGS: dict[str, frozenset[str]] = freeze(
    {
        "scalar": _SCALAR_TAGS,
        "mapping": frozenset({_MAP, "tag:yaml.org,2002:set"}),
        "sequence": frozenset({_SEQ, "tag:yaml.org,2002:omap", "tag:yaml.org,2002:pairs"}),
    }
)
_SHAPE_NAMES = freeze({"scalar": "a scalar", "mapping": "a mapping", "sequence": "a sequence"})

T = TypeVar("T")


class _Bad(Exception):
    def __init__(self, node: yaml.Node | None, path: str, message: str) -> None:
        self.line = node.start_mark.line + 1 if node is not None else 0
        self.path = path
        super().__init__(f"{path}: {message}")


def field_path(path: str, key: str) -> str:
    """The field path of `key` in the mapping at `path`: ``$.models.qwen``, ``$.models['q-7b']``."""
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"


def _shape(node: yaml.Node) -> str:
    """The node's shape, "scalar", "mapping" or "sequence": `_compose` makes no other node."""
    return getattr(node, "id", "")


class _Walk:
    """Checks one document against the schema; counts nodes so alias bombs stop early.

    With `lines`, records the line of every field path it visits (a mapping entry's path at
    its key's line), so later checks can name the line of each token."""

    def __init__(self, lines: dict[str, int] | None = None, kinds: Sequence[str] = ()) -> None:
        self.nodes = 0
        self.lines = lines
        self.kinds = kinds

    def _visit(self, node: yaml.Node, path: str) -> None:
        self.nodes += 1
        if self.lines is not None:
            self.lines.setdefault(path, node.start_mark.line + 1)
        if self.nodes > _MAX_NODES:
            raise _Bad(node, path, f"document has more than {_MAX_NODES} nodes")
        if node.tag not in _TYPE_NAMES and node.tag != _STR:
            raise _Bad(node, path, f"unsupported YAML tag {node.tag}")
        if node.tag not in _SHAPE_TAGS[_shape(node)]:
            raise _Bad(node, path, f"tag {node.tag} does not fit {_SHAPE_NAMES[_shape(node)]}")

    def string(self, node: yaml.Node, path: str, what: str) -> str:
        self._visit(node, path)
        scalar = _shape(node) == "scalar"
        if node.tag != _STR or not scalar:
            hint = " (quote it to make it a string)" if scalar else ""
            found = _TYPE_NAMES.get(node.tag, "a string") if scalar else _SHAPE_NAMES[_shape(node)]
            raise _Bad(node, path, f"{what} must be a string, not {found}{hint}")
        value = str(node.value)
        if "\0" in value:
            raise _Bad(node, path, f"{what} contains a NUL character")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _Bad(node, path, f"{what} holds a lone surrogate (not valid text)") from None
        return value

    def mapping(
        self, node: yaml.Node, path: str, value: Callable[[yaml.Node, str, str], T], key_what: str
    ) -> dict[str, T]:
        self._visit(node, path)
        if node.tag == _NULL and _shape(node) == "scalar":
            return {}
        if _shape(node) != "mapping" or node.tag != _MAP:
            found = "a string" if node.tag == _STR else _TYPE_NAMES.get(node.tag, node.tag)
            raise _Bad(node, path, f"must be a mapping, not {found}")
        out: dict[str, T] = {}
        lines: dict[str, int] = {}
        for knode, vnode in node.value:
            if knode.tag == "tag:yaml.org,2002:merge":
                raise _Bad(knode, path, "merge keys (<<) are not supported")
            key = self.string(knode, path, key_what)
            sub = field_path(path, key)
            if key in out:
                raise _Bad(knode, sub, f"duplicate key {key!r} (first on line {lines[key]})")
            lines[key] = knode.start_mark.line + 1
            if self.lines is not None:
                self.lines.setdefault(sub, lines[key])
            out[key] = value(vnode, sub, key)
        return out

    def strings(self, node: yaml.Node, path: str) -> tuple[str, ...]:
        self._visit(node, path)
        if node.tag == _NULL and _shape(node) == "scalar":
            return ()
        if _shape(node) != "sequence" or node.tag != _SEQ:
            found = "a string" if node.tag == _STR else _TYPE_NAMES.get(node.tag, node.tag)
            hint = (
                " (one item per argument: [--ctx-size, '4096'], or a '- ' line each)"
                if node.tag == _STR
                else ""
            )
            raise _Bad(node, path, f"must be a list of strings, not {found}{hint}")
        return tuple(
            self.string(n, f"{path}[{i}]", "an argument") for i, n in enumerate(node.value)
        )

    def env(self, node: yaml.Node, path: str, _key: str = "") -> dict[str, str]:
        def value(n: yaml.Node, p: str, name: str) -> str:
            if not name or "=" in name:
                raise _Bad(n, p, f"{name!r} is not a valid environment variable name")
            return self.string(n, p, "an environment value")

        return self.mapping(node, path, value, "an environment variable name")

    def override(self, node: yaml.Node, path: str, _key: str = "") -> Override:
        fields = self.mapping(node, path, lambda n, p, k: (n, p), "a field name")
        unknown = sorted(set(fields) - {"args", "env"})
        if unknown:
            n, p = fields[unknown[0]]
            raise _Bad(n, p, f"unknown field {unknown[0]!r} (expected args, env)")
        return Override(
            args=self.strings(*fields["args"]) if "args" in fields else (),
            env=self.env(*fields["env"]) if "env" in fields else {},
        )

    def engine(self, node: yaml.Node, path: str, key: str) -> Override:
        if key not in self.kinds:
            known = ", ".join(self.kinds)
            raise _Bad(node, path, f"unknown engine kind {key!r} (known: {known})")
        return self.override(node, path)

    def config(self, node: yaml.Node) -> Config:
        top = self.mapping(node, "$", lambda n, p, k: (n, p), "a section name")
        unknown = sorted(set(top) - {"env", "engines", "models"})
        if unknown:
            n, p = top[unknown[0]]
            raise _Bad(n, p, f"unknown section {unknown[0]!r} (expected env, engines, models)")
        engines = (
            self.mapping(*top["engines"], self.engine, "an engine kind") if "engines" in top else {}
        )
        return Config(
            env=self.env(*top["env"]) if "env" in top else {},
            engines=engines,
            models=self.mapping(*top["models"], self.override, "a model id")
            if "models" in top
            else {},
        )


def _next(loader: Any) -> Any:
    return loader.get_event()


def _compose(text: str) -> yaml.Node | None:
    """The document's node tree, built from the parser's events under a budget.

    PyYAML's own composer builds the whole tree, recursively, before anything can count it:
    two million list items cost a gigabyte, and 500 nested brackets a RecursionError. Here
    nodes are counted and depth is bounded as they are made.
    """
    import yaml

    # libyaml's parser when PyYAML was built with it (much faster); the pure-Python one otherwise.
    parser: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader: Any = parser(text)  # the stubs type events and marks loosely
    try:
        c = _Composer(loader)
        while (event := _next(loader)) is not None:
            c.feed(event)
        return c.root
    finally:
        loader.dispose()


class _Composer:
    """Events in, nodes out, one event at a time, under the node and depth budget."""

    def __init__(self, loader: Any) -> None:
        import yaml

        self.yaml = yaml
        self.loader = loader
        self.root: yaml.Node | None = None
        self.anchors: dict[str, yaml.Node] = {}
        self.stack: list[tuple[yaml.Node, list[object]]] = []
        self.nodes = 0
        self.documents = 0

    def feed(self, event: Any) -> None:
        y = self.yaml
        if isinstance(event, y.DocumentStartEvent):
            self.documents += 1
            if self.documents > 1:
                self._fail("expected a single document, found another", event)
        elif isinstance(event, y.AliasEvent):
            if event.anchor not in self.anchors:
                self._fail(f"found undefined alias {event.anchor!r}", event)
            self._add(self.anchors[event.anchor], None)
        elif isinstance(event, y.ScalarEvent):
            tag = self._tag(event, y.ScalarNode, event.value)
            node = y.ScalarNode(
                tag, event.value, event.start_mark, event.end_mark, style=event.style
            )
            self._add(node, event.anchor)
        elif isinstance(event, y.SequenceStartEvent | y.MappingStartEvent):
            self._open(event)
        elif isinstance(event, y.SequenceEndEvent | y.MappingEndEvent):
            done, items = self.stack.pop()
            done.value = (
                list(zip(items[0::2], items[1::2], strict=True))
                if isinstance(done, y.MappingNode)
                else items
            )
            done.end_mark = event.end_mark

    def _open(self, event: Any) -> None:
        y = self.yaml
        kind: type[yaml.Node] = (
            y.SequenceNode if isinstance(event, y.SequenceStartEvent) else y.MappingNode
        )
        node = kind(self._tag(event, kind, None), [], event.start_mark, None)
        if len(self.stack) >= _MAX_DEPTH:
            raise _Bad(node, "$", f"nested deeper than {_MAX_DEPTH} levels")
        self._add(node, event.anchor)
        self.stack.append((node, []))

    def _tag(self, event: Any, kind: type[yaml.Node], value: str | None) -> str:
        tag: str | None = event.tag
        if tag is None or tag == "!":
            implicit = event.implicit
            tag = self.loader.resolve(kind, value, implicit)
        assert tag is not None
        return tag

    def _add(self, node: yaml.Node, anchor: str | None) -> None:
        self.nodes += 1
        if self.nodes > _MAX_NODES:
            raise _Bad(node, "$", f"document has more than {_MAX_NODES} nodes")
        if anchor is not None:
            self.anchors[anchor] = node
        if self.stack:
            self.stack[-1][1].append(node)
        else:
            self.root = node

    def _fail(self, problem: str, event: Any) -> NoReturn:
        raise self.yaml.composer.ComposerError(None, None, problem, event.start_mark)


class LocatedConfig(Value, frozen=True, kw_only=True):
    """One override file's config, with the line of every field path in it."""

    source: str
    """The file name, as errors and findings name it."""
    config: Config
    lines: dict[str, int] = EMPTY
    """Line (from 1) by field path: ``$.engines.llama.args[2]`` at its token's line, a mapping
    entry (``$.env.OMP_NUM_THREADS``) at its key's line."""

    def __post_init__(self) -> None:
        frozen_fields(self, "lines")

    def line(self, path: str) -> int:
        """The line of `path`, or of the nearest enclosing path recorded; 0 if none is."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = _parent(path)
        return 0


def _parent(path: str) -> str:
    cut = max(path.rfind("."), path.rfind("["))
    return path[:cut] if cut > 0 else ""


def parse_config(text: str, source: str, *, executors: Executors = BUILTIN) -> Config:
    """Parse one override document; `source` (a file name) prefixes every error. The
    ``engines:`` keys are the kinds of `executors`."""
    return _from_yaml(text, source, None, executors).config


config_from_yaml = boundary(parse_config)
"""`parse_config` as a Result: ``Success(Config)``, or ``Failure`` with its `EngineError`."""


def located_config(text: str, source: str, *, executors: Executors = BUILTIN) -> LocatedConfig:
    """`config_from_yaml`, keeping the line of every field path (for `config --check`)."""
    return _from_yaml(text, source, {}, executors)


located_config_from_yaml = boundary(located_config)
"""`located_config` as a Result: ``Success(LocatedConfig)``, or ``Failure`` with its
`EngineError`."""


def compose_document(text: str, source: str) -> yaml.Node | None:
    """The node tree of one YAML document (None when it is empty), composed under the node
    and depth budget with only the core tags resolved; raises `ConfigError` naming
    `source` and the line. For the other hand-written walks over YAML files (group files)."""
    import yaml

    try:
        return _compose(text)
    except _Bad as e:
        raise _error(source, e) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{source}:{mark.line + 1}" if mark else source
        raise ConfigError(
            f"{where}: invalid YAML: {e.problem or e.context}",
            file=source,
            line=mark.line + 1 if mark else 0,
        ) from None
    except (yaml.YAMLError, ValueError) as e:  # ValueError: a character libyaml refuses
        raise ConfigError(f"{source}: invalid YAML: {_one_line(str(e))}", file=source) from None


def _from_yaml(
    text: str, source: str, lines: dict[str, int] | None, executors: Executors
) -> LocatedConfig:
    node = compose_document(text, source)
    if node is None:
        return LocatedConfig(source=source, config=Config())
    try:
        config = _Walk(lines, executors.kinds).config(node)
    except _Bad as e:
        raise _error(source, e) from None
    return LocatedConfig(source=source, config=config, lines=lines or {})


def _error(source: str, e: _Bad) -> ConfigError:
    return ConfigError(f"{source}:{e.line}: {e}", file=source, line=e.line, path=e.path)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def merge_all(configs: Sequence[Config]) -> Config:
    """`merge_configs` over `configs` in order, in time linear in their total size (a
    pairwise fold copies the growing env maps once per file)."""
    env: dict[str, str] = {}
    engines: dict[str, tuple[list[str], dict[str, str]]] = {}
    models: dict[str, tuple[list[str], dict[str, str]]] = {}
    for c in configs:
        env.update(c.env)
        for into, part in ((engines, c.engines), (models, c.models)):
            for k, o in part.items():
                args, e = into.setdefault(k, ([], {}))
                args.extend(o.args)
                e.update(o.env)
    return Config(
        env=env,
        engines={k: Override(args=tuple(a), env=e) for k, (a, e) in engines.items()},
        models={k: Override(args=tuple(a), env=e) for k, (a, e) in models.items()},
    )


def merge_configs(lower: Config, upper: Config) -> Config:
    """`upper` over `lower`; see the module docstring for the rules."""
    return Config(
        env={**lower.env, **upper.env},
        engines=_merge_overrides(lower.engines, upper.engines),
        models=_merge_overrides(lower.models, upper.models),
    )


K = TypeVar("K")


def _merge_overrides(lower: dict[K, Override], upper: dict[K, Override]) -> dict[K, Override]:
    out = dict(lower)
    for k, o in upper.items():
        prev = out.get(k)
        out[k] = o if prev is None else Override(args=prev.args + o.args, env={**prev.env, **o.env})
    return out
