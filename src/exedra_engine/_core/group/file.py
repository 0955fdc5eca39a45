"""A group file: the members of a group, as YAML. Pure (text in, values out).

    members:
      - {id: chat, model: /srv/models/chat.gguf, kind: llama, ctx: 8192}
      - {id: asr, model: /srv/models/ggml-base.en.bin, kind: transcribe, weight: 1}

A member takes the fields of the command line: ``id`` and ``model`` (required), ``kind``
(default llama), ``ctx``, ``threads``, ``port`` (integers, 0: derive), ``args`` (the
caller's flags, a list of strings), ``env`` (a mapping of strings, or ``KEY=VALUE``
strings as ``--env`` takes them), ``run_args`` (the model's recommended flags),
``api_key_env`` (the variable holding its API key), ``capabilities`` (a list, each one
its kind serves), ``weight`` (its share of the CPUs, at least 1) and ``executor`` (the
binary that runs it, instead of the host's executor of its kind). ``model`` and
``executor`` are paths: the shell that reads the file (`exedra_engine._shell.group_plan`)
expands ``~`` and resolves a relative one against the file's directory, so a file means
the same from anywhere. The file is
walked node by node as override files are (`exedra_engine._core.config.parse`), so a mistake
names the file, the line and the member: ``group.yaml:4: members[1] (asr): ctx: expected
an integer``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exedra_engine._core.config.parse import _TYPE_NAMES, _Bad, _shape, _Walk, compose_document
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.group.member import id_problem
from exedra_engine._core.struct import Value
from exedra_engine._core.values import Constraints, ModelSpec
from exedra_engine.constants import MAX_GROUP_MEMBERS
from exedra_engine.errors import ConfigError, UnsupportedKind

if TYPE_CHECKING:
    from collections.abc import Callable

    import yaml

_INT = "tag:yaml.org,2002:int"
_INT32_MAX = 2**31 - 1
FIELDS = (
    "id",
    "model",
    "kind",
    "ctx",
    "threads",
    "port",
    "args",
    "env",
    "run_args",
    "api_key_env",
    "capabilities",
    "weight",
    "executor",
)
"""What a member may set, in the order errors list them."""


class MemberEntry(Value, frozen=True, kw_only=True):
    """One member as the file gives it (before an API key is read from its variable)."""

    spec: ModelSpec
    constraints: Constraints = Constraints()
    weight: int = 1
    executor: str = ""
    """The binary that runs it, as written ("": the host's executor of its kind)."""
    line: int = 0
    """Where the member starts in the file."""
    model_line: int = 0
    """The line of its ``model:`` field."""
    executor_line: int = 0
    """The line of its ``executor:`` field (0: none)."""

    def where(self, source: str, index: int, line: int = 0) -> str:
        """``group.yaml:4: members[1] (asr)``: how an error names this member."""
        shown = self.spec.id if self.spec.id.isprintable() else ascii(self.spec.id)
        return f"{source}:{line or self.line}: members[{index}] ({shown})"


class GroupFile(Value, frozen=True, kw_only=True):
    """A parsed group file."""

    source: str
    members: tuple[MemberEntry, ...]


def parse_group_file(text: str, source: str, *, executors: Executors = BUILTIN) -> GroupFile:
    """The members of a group file, raising `ConfigError` that names `source`, the line
    and the member."""
    node = compose_document(text, source)
    if node is None:
        raise ConfigError(
            f"{source}: the group file is empty (expected members: [...])", file=source
        )
    walk = _GroupWalk(executors)
    try:
        return GroupFile(source=source, members=walk.group(node))
    except _Bad as e:
        raise ConfigError(
            f"{source}:{e.line}: {e.args[0]}", file=source, line=e.line, path=e.path
        ) from None


def checked_id(
    node: yaml.Node, where: str, text: Callable[[yaml.Node | None, str, str], str]
) -> str:
    """The member's id, read by `text`, refused (with the file's line, never echoed) where
    `id_problem` says it cannot name a member."""
    value = text(node, where, "id")
    if problem := id_problem(value):
        raise _Bad(node, f"{where}: id", problem)
    return value


class _GroupWalk(_Walk):
    def __init__(self, executors: Executors) -> None:
        super().__init__()
        self.executors = executors

    def group(self, node: yaml.Node) -> tuple[MemberEntry, ...]:
        top = self.mapping(node, "$", lambda n, p, k: (n, p), "a section name")
        unknown = sorted(set(top) - {"members"})
        if unknown:
            n, _ = top[unknown[0]]
            raise _Bad(n, unknown[0], "unknown section (expected members)")
        if "members" not in top:
            raise _Bad(node, "members", "no members: section (the list of executors)")
        mnode, _ = top["members"]
        self._visit(mnode, "members")
        if _shape(mnode) != "sequence" or not mnode.value:
            raise _Bad(mnode, "members", "expected a list of members (- {id: ..., model: ...})")
        if len(mnode.value) > MAX_GROUP_MEMBERS:
            # Refused before any member is read: planning cost grows with each one.
            raise _Bad(
                mnode,
                "members",
                f"{len(mnode.value)} members, more than {MAX_GROUP_MEMBERS} (plan fewer "
                "executors per group)",
            )
        out = [self.member(n, i) for i, n in enumerate(mnode.value)]
        seen: dict[str, int] = {}
        for i, e in enumerate(out):
            if e.spec.id in seen:
                raise _Bad(
                    mnode.value[i],
                    f"members[{i}] ({e.spec.id})",
                    f"id: {e.spec.id!r} is already the id of members[{seen[e.spec.id]}]",
                )
            seen[e.spec.id] = i
        ports: dict[int, int] = {}
        for i, e in enumerate(out):
            port = e.constraints.port
            if port and port in ports:
                j = ports[port]
                raise _Bad(
                    mnode.value[i],
                    f"members[{i}] ({e.spec.id})",
                    f"port: {port} is already the port of members[{j}] ({out[j].spec.id})",
                )
            ports.setdefault(port, i)
        return tuple(out)

    def member(self, node: yaml.Node, i: int) -> MemberEntry:
        where = f"members[{i}]"
        fields = self.mapping(node, where, lambda n, p, k: (n, p), "a field name")
        if "id" in fields:
            where = f"{where} ({checked_id(fields['id'][0], where, self.text)})"
        for name, (n, _) in fields.items():
            if name not in FIELDS:
                raise _Bad(n, where, f"unknown field {name!r} (expected {', '.join(FIELDS)})")
        for need in ("id", "model"):
            if need not in fields:
                raise _Bad(node, where, f"{need}: required")

        def get(name: str) -> yaml.Node | None:
            return fields[name][0] if name in fields else None

        kind = self.text(get("kind"), where, "kind") if "kind" in fields else "llama"
        try:
            kind = self.executors.kind_of(kind)
        except UnsupportedKind:
            # Not echoed, as --kind's value is not: a key pasted in the wrong field.
            raise _Bad(
                get("kind"),
                where,
                f"kind: unknown kind (the value given is not shown; known: "
                f"{', '.join(self.executors.kinds)})",
            ) from None
        spec = ModelSpec(
            id=self.text(get("id"), where, "id"),
            path=self.text(get("model"), where, "model"),
            kind=kind,
            capabilities=self.capabilities(get("capabilities"), where, kind),
            run_args=self.list(get("run_args"), where, "run_args"),
        )
        env = self.environment(fields["env"][0], where) if "env" in fields else ()
        c = Constraints(
            ctx=self.integer(get("ctx"), where, "ctx"),
            threads=self.integer(get("threads"), where, "threads"),
            port=self.integer(get("port"), where, "port", top=65535),
            api_key_env=self.text(get("api_key_env"), where, "api_key_env")
            if "api_key_env" in fields
            else "",
            extra_args=self.list(get("args"), where, "args"),
            extra_env=env,
        )
        weight = self.integer(get("weight"), where, "weight", low=1) if "weight" in fields else 1
        executor = self.text(get("executor"), where, "executor") if "executor" in fields else ""

        def line_of(name: str) -> int:
            return fields[name][0].start_mark.line + 1 if name in fields else 0

        return MemberEntry(
            spec=spec,
            constraints=c,
            weight=weight,
            executor=executor,
            line=node.start_mark.line + 1,
            model_line=line_of("model"),
            executor_line=line_of("executor"),
        )

    def capabilities(self, node: yaml.Node | None, where: str, kind: str) -> tuple[str, ...]:
        """``capabilities``: each one its kind's executor serves (a typo gets a did-you-mean)."""
        caps = self.list(node, where, "capabilities")
        known = tuple(self.executors.profile(kind).capabilities)
        for i, cap in enumerate(caps):
            if cap not in known:
                from exedra_engine._core.config.did_you_mean import close

                hit = close(cap, known, 0.6)
                hint = f"did you mean {hit!r}? " if hit else ""
                assert node is not None
                raise _Bad(
                    node.value[i],
                    f"{where}: capabilities[{i}]",
                    f"{cap!r} is not a capability of kind {kind} ({hint}"
                    f"kind {kind} serves: {', '.join(known)})",
                )
        return caps

    def environment(self, node: yaml.Node, where: str) -> tuple[str, ...]:
        """``env``: a mapping of strings, or a list of ``KEY=VALUE`` strings (as ``--env``)."""
        path = f"{where}: env"
        if _shape(node) != "sequence":
            return tuple(f"{k}={v}" for k, v in self.env(node, path).items())
        items = self.strings(node, path)
        for i, item in enumerate(items):
            name = item.partition("=")[0]
            if "=" not in item or not name:
                raise _Bad(node.value[i], f"{path}[{i}]", "expected KEY=VALUE")
        return items

    def text(self, node: yaml.Node | None, where: str, name: str) -> str:
        if node is None:
            return ""
        value = self.string(node, f"{where}: {name}", "the value")
        if not value:
            raise _Bad(node, f"{where}: {name}", "expected a non-empty string")
        return value

    def list(self, node: yaml.Node | None, where: str, name: str) -> tuple[str, ...]:
        return () if node is None else self.strings(node, f"{where}: {name}")

    def integer(
        self, node: yaml.Node | None, where: str, name: str, *, low: int = 0, top: int = _INT32_MAX
    ) -> int:
        if node is None:
            return 0
        path = f"{where}: {name}"
        self._visit(node, path)
        if _shape(node) != "scalar" or node.tag != _INT:
            found = (
                _TYPE_NAMES.get(node.tag, "a string")
                if _shape(node) == "scalar"
                else "a list or mapping"
            )
            raise _Bad(node, path, f"expected an integer, not {found}")
        n = _yaml_int(str(node.value))
        if n is None:
            raise _Bad(
                node,
                path,
                f"expected an integer, not {str(node.value)[:40]!r} (YAML 1.1 reads "
                "this form as a number in another base: write the number in decimal)",
            )
        if not low <= n <= top:
            raise _Bad(node, path, f"expected an integer from {low} to {top}, not {n}")
        return n


def _yaml_int(text: str) -> int | None:
    """A YAML 1.1 integer scalar in decimal, hex (``0x``), binary (``0b``) or octal (a
    leading ``0``), underscores allowed between digits; None for anything else the
    resolver also tags as an integer (base 60 ``1:20``, a bare ``0x_``), which no count
    or port is written as."""
    body = text.replace("_", "")
    sign, body = (body[0], body[1:]) if body[:1] in "+-" and body else ("", body)
    if ":" in body or not body:
        return None
    try:
        if body[:2] in ("0x", "0b", "0o") or body == "0" or body[0] != "0":
            return int(sign + body, 0)
        return int(sign + body, 8)  # YAML 1.1: 010 is octal
    except ValueError:
        return None
